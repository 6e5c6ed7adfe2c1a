//! Writing kubeconfig files that kubectl, kube-rs and gitlab-runner read as they are.
//! Reading goes through `kube::config::Kubeconfig`; this module only renders.

use std::path::Path;

use serde::Serialize;

/// How the kubeconfig refers to the CA, client certificate and key.
#[derive(Debug, Clone)]
pub enum Material<'a> {
    /// Absolute paths to PEM files (what a runner credential uses, so one rotation of the
    /// files updates every reader).
    Files {
        /// The CA bundle that verifies the apiserver (`certificate-authority`).
        ca: &'a Path,
        /// The client certificate (`client-certificate`).
        cert: &'a Path,
        /// The client certificate's private key (`client-key`).
        key: &'a Path,
    },
    /// Inline PEM (for kubeconfigs that must stand alone, like the simulator's admin ones).
    Inline {
        /// The CA bundle that verifies the apiserver, PEM (written base64 as
        /// `certificate-authority-data`).
        ca_pem: &'a str,
        /// The client certificate, PEM (written as `client-certificate-data`).
        cert_pem: &'a str,
        /// The client certificate's private key, PEM (written as `client-key-data`).
        key_pem: &'a str,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Doc<'a> {
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<Named<'a, ClusterEntry>>,
    users: Vec<Named<'a, UserEntry>>,
    contexts: Vec<Named<'a, ContextEntry<'a>>>,
    current_context: &'a str,
    preferences: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Named<'a, T> {
    name: &'a str,
    #[serde(flatten)]
    value: T,
}

#[derive(Serialize)]
struct ClusterEntry {
    cluster: ClusterData,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterData {
    server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_authority: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate_authority_data: Option<String>,
}

#[derive(Serialize)]
struct UserEntry {
    user: UserData,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct UserData {
    #[serde(skip_serializing_if = "Option::is_none")]
    client_certificate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_certificate_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_key_data: Option<String>,
}

#[derive(Serialize)]
struct ContextEntry<'a> {
    context: ContextData<'a>,
}

#[derive(Serialize)]
struct ContextData<'a> {
    cluster: &'a str,
    user: &'a str,
}

/// Renders a kubeconfig with one cluster, one user and one context named `name`, current.
pub fn render(name: &str, server: &str, material: &Material<'_>) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let (cluster, user) = match material {
        Material::Files { ca, cert, key } => (
            ClusterData {
                server: server.to_string(),
                certificate_authority: Some(path(ca)),
                certificate_authority_data: None,
            },
            UserData {
                client_certificate: Some(path(cert)),
                client_key: Some(path(key)),
                client_certificate_data: None,
                client_key_data: None,
            },
        ),
        Material::Inline {
            ca_pem,
            cert_pem,
            key_pem,
        } => (
            ClusterData {
                server: server.to_string(),
                certificate_authority: None,
                certificate_authority_data: Some(b64(ca_pem)),
            },
            UserData {
                client_certificate: None,
                client_key: None,
                client_certificate_data: Some(b64(cert_pem)),
                client_key_data: Some(b64(key_pem)),
            },
        ),
    };
    let doc = Doc {
        api_version: "v1",
        kind: "Config",
        clusters: vec![Named {
            name,
            value: ClusterEntry { cluster },
        }],
        users: vec![Named {
            name,
            value: UserEntry { user },
        }],
        contexts: vec![Named {
            name,
            value: ContextEntry {
                context: ContextData {
                    cluster: name,
                    user: name,
                },
            },
        }],
        current_context: name,
        preferences: Default::default(),
    };
    serde_yaml::to_string(&doc).expect("a kubeconfig always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_kubeconfig_parses_with_kube() {
        let text = render(
            "ci",
            "https://127.0.0.1:6443",
            &Material::Files {
                ca: Path::new("/etc/r/ca.crt"),
                cert: Path::new("/etc/r/tls.crt"),
                key: Path::new("/etc/r/tls.key"),
            },
        );
        let kc: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("ci"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/etc/r/ca.crt")
        );
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/etc/r/tls.crt"));
        assert_eq!(user.client_key.as_deref(), Some("/etc/r/tls.key"));
    }
}
