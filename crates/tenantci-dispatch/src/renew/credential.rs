//! The dispatcher's client credential on the gateway path (`cluster.kubeconfig` naming the
//! files `dispatch init` minted into `<dir>/kube/`): a new certificate and key from the
//! cluster's ClientCA, for the same user, groups and lifetime, used against the apiserver
//! (the SelfSubjectAccessReviews `dispatch init` makes) before anything is replaced. The
//! kubeconfig and `ca.crt` stay as they are: they name the files, whose contents change.
//!
//! In the cluster there is nothing to renew: the ServiceAccount's token is the kubelet's.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::plan::{self, Due, Policy};
use crate::config::Config;
use crate::provision::access;
use tenantci_core::error::ErrorKind;
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::gateway::StateDir;
use tenantci_core::input::{self, MAX_PEM};
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::kube_subject::KubeIdentity;
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};
use tenantci_core::{Error, Result, kubeconfig};
use tenantci_runner::credential::CredentialFiles;
use tenantci_runner::credential::decision as cred;
use tenantci_runner::tenant::access::Reviewer;

/// The gateway's ClientCA: `--state-dir` and `--cluster`.
#[derive(Debug, Clone)]
pub struct Gateway {
    /// The gateway's state directory (`--state-dir`).
    pub state_dir: PathBuf,
    /// The tenant cluster's name in it (`--cluster`).
    pub cluster: String,
}

/// What phase one found for the client credential.
pub enum Credential {
    /// In the cluster: no credential of its own.
    None,
    /// Not due.
    Keep {
        /// Its end.
        until: OffsetDateTime,
    },
    /// Due, and a new one issued and proven.
    Renew {
        /// Why it is due.
        why: String,
        /// The new certificate and key, and where they go.
        renewed: Box<Renewed>,
    },
}

/// A credential issued and proven against the apiserver, not yet written.
pub struct Renewed {
    /// The credential's files in `<dir>/kube/`.
    pub files: CredentialFiles,
    /// The new certificate and key.
    pub issued: issue::IssuedCert,
}

/// The credential directory the config's kubeconfig lives in.
fn kube_dir(kubeconfig: &Path) -> PathBuf {
    kubeconfig.parent().unwrap_or(Path::new("/")).to_path_buf()
}

/// Phase one: reads the credential, decides, and when due issues a new one and makes the
/// access reviews with it. Nothing is written.
pub async fn prepare(
    cfg: &Config,
    gateway: Option<&Gateway>,
    policy: Policy,
    now: OffsetDateTime,
) -> Result<Credential> {
    let Some(kubeconfig) = &cfg.cluster.kubeconfig else {
        return Ok(Credential::None);
    };
    let dir = kube_dir(kubeconfig);
    let files = CredentialFiles::in_dir(&dir);
    let existing = cred::inspect(&dir)?;
    let (Some(cert), Some(server), 4) = (&existing.cert, &existing.server, existing.present.len())
    else {
        return Err(Error::bad_input(format!(
            "`{}` holds no complete credential (ca.crt, tls.crt, tls.key, kubeconfig) as `dispatch init` mints it",
            dir.display()
        ))
        .hint("re-run `tenantci dispatch init` with --state-dir and --cluster: it mints one"));
    };
    if files.kubeconfig != *kubeconfig {
        return Err(Error::bad_input(format!(
            "cluster.kubeconfig `{}` is not the kubeconfig of a minted credential (`{}`); only that one is renewed",
            kubeconfig.display(),
            files.kubeconfig.display()
        ))
        .hint("renew another credential with the tool that made it"));
    }
    let why = match plan::due(cert.not_before, cert.not_after, now, policy) {
        Due::Keep { until } => return Ok(Credential::Keep { until }),
        Due::Renew { why } => why,
    };
    let Some(gateway) = gateway else {
        return Err(Error::bad_input(format!(
            "the credential in `{}` is due ({why}), and renewing it needs the gateway's ClientCA",
            dir.display()
        ))
        .hint("pass --state-dir and --cluster, as to `dispatch init`; nothing was written"));
    };
    let identity = renewable_identity(cert, &dir)?;
    let ca = client_ca(gateway, cert, now)?;
    let issued = issue::client_cert(
        &ca,
        &ClientCertSpec {
            common_name: identity.user,
            organizations: identity.groups,
            valid_for: lifetime(cert),
            key_type: KeyType::EcdsaP256,
        },
    )?;
    prove(cfg, server, &files.ca, &issued).await?;
    Ok(Credential::Renew {
        why,
        renewed: Box::new(Renewed { files, issued }),
    })
}

/// The identity the new certificate repeats: the old one's as kube-apiserver reads it, refused
/// when ambiguous or when it is one a credential may not have (a `system:` name), so a renewal
/// never re-signs what `credential mint` would refuse.
fn renewable_identity(cert: &CertInfo, dir: &Path) -> Result<KubeIdentity> {
    let identity = cert.identity().map_err(|a| {
        Error::bad_input(format!(
            "the credential in `{}` is not renewed: {a}",
            dir.display()
        ))
        .hint("move that directory aside and re-run `tenantci dispatch init` with --state-dir and --cluster: it mints a new one; nothing was written")
    })?;
    tenantci_core::pki::policy::check_common_name(&identity.user)?;
    tenantci_core::pki::policy::check_organizations(&identity.groups)?;
    Ok(identity)
}

/// The old credential's lifetime (720 h unless init was given another).
fn lifetime(cert: &CertInfo) -> std::time::Duration {
    let secs = (cert.not_after - cert.not_before).whole_seconds().max(0);
    std::time::Duration::from_secs(secs.unsigned_abs())
}

/// The cluster's ClientCA, which must be the one that signed the old credential and must
/// outlive the new one.
fn client_ca(g: &Gateway, old: &CertInfo, now: OffsetDateTime) -> Result<CertificateAuthority> {
    tenantci_core::gateway::layout::validate_cluster_name(&g.cluster)?;
    let paths = StateDir::new(&g.state_dir).cluster(&g.cluster);
    let ca = CertificateAuthority::load(&paths.client_ca_cert, &paths.client_ca_key)?;
    let info = CertInfo::from_pem(ca.cert_pem()).map_err(|e| {
        Error::bad_input(format!(
            "the ClientCA `{}` cannot be read back ({e})",
            paths.client_ca_cert.display()
        ))
    })?;
    if info.subject_key_id.is_none() || info.subject_key_id != old.authority_key_id {
        return Err(Error::bad_input(format!(
            "the ClientCA of cluster `{}` in `{}` did not sign the dispatcher's credential",
            g.cluster,
            g.state_dir.display()
        ))
        .hint(
            "pass the --state-dir and --cluster `dispatch init` was given; nothing was written",
        ));
    }
    tenantci_core::pki::policy::check_within_ca(lifetime(old), now, ca.not_after())?;
    Ok(ca)
}

/// The new credential against the apiserver, before it replaces the old one: the access
/// reviews `dispatch init` makes, as the new certificate.
async fn prove(
    cfg: &Config,
    server: &str,
    ca_file: &Path,
    issued: &issue::IssuedCert,
) -> Result<()> {
    let ca_pem = input::read_text("the credential's serving CA", ca_file, MAX_PEM)?;
    let yaml = kubeconfig::render(
        "tenantci-dispatcher-renewed",
        server,
        &kubeconfig::Material::Inline {
            ca_pem: &ca_pem,
            cert_pem: &issued.cert_pem,
            key_pem: &issued.key_pem,
        },
    );
    let client =
        tenantci_core::kube_client::from_kubeconfig_yaml(&yaml, "the renewed credential").await?;
    let ns = access::Namespaces::of(&cfg.cluster);
    access::verify(&Reviewer::Own(&client), ns, cfg.identity.is_some())
        .await
        .map(drop)
        .map_err(|e| {
            let why = e.causes().last().cloned().unwrap_or_default();
            let message = match e.kind() {
                ErrorKind::External => format!(
                    "cannot reach the apiserver at {server} to prove the renewed credential ({why})"
                ),
                _ => format!(
                    "the apiserver at {server} did not accept the renewed credential: {}",
                    e.message()
                ),
            };
            Error::new(e.kind(), message).hint("check that the apiserver is up and answers this host, then run the renewal again; nothing was written, the old credential stays in use")
        })
}

/// Phase two: the old certificate and key kept as `<file>.old-<UTC timestamp>`, then the key
/// and the certificate replaced atomically (0600). The kubeconfig names the same files.
pub fn write(r: &Renewed, now: OffsetDateTime) -> Result<()> {
    let stamp = now
        .format(&time::format_description::well_known::Iso8601::DEFAULT)
        .unwrap_or_default();
    let stamp: String = stamp
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    for f in [&r.files.cert, &r.files.key] {
        let old = PathBuf::from(format!("{}.old-{stamp}", f.display()));
        let bytes = fsutil::read_bounded(f, MAX_PEM)
            .map_err(|e| Error::unwritable("the old credential", f, e))?;
        fsutil::write_atomic(&old, &bytes, MODE_SECRET)
            .map_err(|e| Error::unwritable("the old credential's copy", &old, e))?;
    }
    fsutil::write_atomic(&r.files.key, r.issued.key_pem.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the credential key", &r.files.key, e))?;
    fsutil::write_atomic(&r.files.cert, r.issued.cert_pem.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the credential certificate", &r.files.cert, e))
}

/// `valid until ...` for the line.
pub fn until(r: &Renewed) -> String {
    rfc3339(r.issued.not_after)
}
