//! The dispatcher's own client certificate (gateway path: `cluster.kubeconfig` names the
//! credential `dispatch init` minted), read so its end can be exported as
//! `tenantci_dispatch_credential_expiry_days` and logged at start. In the cluster there is
//! none: the ServiceAccount's token is the kubelet's to renew.

use std::path::Path;

use base64::Engine as _;
use kube::config::Kubeconfig;

use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{fsutil, input};

/// Fewer days left than this: `dispatch run` warns at start. `dispatch renew` (daily, from
/// its timer) and `dispatch init` rotate the credential once two thirds of its life have
/// passed (10 of the default 30 days left), so a renewal that runs is never this close.
pub const WARN_DAYS: i64 = 7;

/// The client certificate and key of a kubeconfig's current context, as PEM.
pub struct Material {
    /// The certificate as read: subject, validity, public key.
    pub cert: CertInfo,
    /// The certificate (PEM).
    pub cert_pem: String,
    /// None when the kubeconfig names no key (the client built from it reports that).
    pub key_pem: Option<String>,
}

/// The client certificate the current context of the kubeconfig at `path` authenticates
/// with; None when it uses something else (a token, an exec plugin) or cannot be read (the
/// client built from the same file reports that).
pub fn client_certificate(path: &Path) -> Option<CertInfo> {
    material(path).map(|m| m.cert)
}

/// The certificate and key the kubeconfig at `path` authenticates with (inline or in files
/// beside it), each read with a bound; None as for [`client_certificate`].
pub fn material(path: &Path) -> Option<Material> {
    // Bounded reads, as every file the dispatcher reads.
    let text = fsutil::read_bounded(path, input::MAX_CONFIG).ok()?;
    let kc: Kubeconfig = serde_yaml::from_slice(&text).ok()?;
    let current = kc.current_context.as_deref()?;
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == current)?
        .context
        .as_ref()?
        .user
        .clone()?;
    let auth = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()?;
    let cert_pem = pem_of(
        path,
        auth.client_certificate_data.as_deref(),
        auth.client_certificate.as_deref(),
    )?;
    let key_data = auth
        .client_key_data
        .as_ref()
        .and_then(|_| inline_key(&text, &user));
    let key_pem = pem_of(path, key_data.as_deref(), auth.client_key.as_deref());
    Some(Material {
        cert: CertInfo::from_pem(&cert_pem).ok()?,
        cert_pem,
        key_pem,
    })
}

/// `client-key-data` of user `user`, read from the YAML itself: kube keeps it in a secrecy
/// type whose accessor trait this crate does not link.
fn inline_key(text: &[u8], user: &str) -> Option<String> {
    let doc: serde_yaml::Value = serde_yaml::from_slice(text).ok()?;
    doc.get("users")?
        .as_sequence()?
        .iter()
        .find(|u| u.get("name").and_then(|n| n.as_str()) == Some(user))?
        .get("user")?
        .get("client-key-data")?
        .as_str()
        .map(str::to_string)
}

/// Inline base64 data, else the file it names (relative to the kubeconfig's directory).
fn pem_of(kubeconfig: &Path, data: Option<&str>, file: Option<&str>) -> Option<String> {
    match (data, file) {
        (Some(data), _) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        (None, Some(file)) => {
            let file = Path::new(file);
            let file = match (file.is_relative(), kubeconfig.parent()) {
                (true, Some(dir)) => dir.join(file),
                _ => file.to_path_buf(),
            };
            String::from_utf8(fsutil::read_bounded(&file, input::MAX_PEM).ok()?).ok()
        }
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::kubeconfig::{Material, render};
    use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};

    #[test]
    fn reads_the_client_certificate_inline_or_from_a_file() {
        let ca = CertificateAuthority::generate("ca", Duration::from_secs(86400 * 60)).unwrap();
        let cert = issue::client_cert(
            &ca,
            &ClientCertSpec {
                common_name: "tenantci-dispatcher".into(),
                organizations: vec!["tenantci:gitea-dispatchers".into()],
                valid_for: Duration::from_secs(86400 * 30),
                key_type: KeyType::EcdsaP256,
            },
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let inline = dir.path().join("inline");
        let text = render(
            "ci",
            "https://127.0.0.1:6443",
            &Material::Inline {
                ca_pem: ca.cert_pem(),
                cert_pem: &cert.cert_pem,
                key_pem: &cert.key_pem,
            },
        );
        std::fs::write(&inline, text).unwrap();
        let got = client_certificate(&inline).unwrap();
        assert_eq!(got.common_name.as_deref(), Some("tenantci-dispatcher"));
        for (name, body) in [
            ("ca.crt", ca.cert_pem()),
            ("tls.crt", &cert.cert_pem),
            ("tls.key", &cert.key_pem),
        ] {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        let files = dir.path().join("kubeconfig");
        let text = render(
            "ci",
            "https://127.0.0.1:6443",
            &Material::Files {
                ca: &dir.path().join("ca.crt"),
                cert: &dir.path().join("tls.crt"),
                key: &dir.path().join("tls.key"),
            },
        );
        std::fs::write(&files, text).unwrap();
        assert_eq!(client_certificate(&files).unwrap().not_after, got.not_after);
        std::fs::write(&files, "apiVersion: v1\nkind: Config\n").unwrap();
        assert!(client_certificate(&files).is_none());
    }
}
