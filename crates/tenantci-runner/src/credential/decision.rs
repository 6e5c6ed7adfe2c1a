//! Keep, mint, rotate or refuse a credential that is already on disk: the decision `bootstrap
//! runner` and `dispatch init` both make before minting (`dispatch renew` reads the directory
//! with [`inspect`] too).
//!
//! [`decide`] is pure over what is on disk; [`inspect`] reads the credential directory;
//! [`move_aside`] renames the old files before a rotation mints.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use crate::credential::CredentialFiles;
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

/// The credential already in the credential directory, as far as the decision needs it.
#[derive(Debug, Clone)]
pub struct Existing {
    /// Which of the four files exist.
    pub present: Vec<PathBuf>,
    /// `tls.crt`, parsed; `None` when it cannot be read (a file that does not parse is an error of
    /// [`inspect`]).
    pub cert: Option<CertInfo>,
    /// `server` of the credential's kubeconfig.
    pub server: Option<String>,
}

/// What the credential must be.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    /// The tenant apiserver's URL the credential's kubeconfig must name.
    pub server: &'a str,
    /// The CN (Kubernetes user) the certificate must carry.
    pub common_name: &'a str,
    /// The organizations (Kubernetes groups) the certificate must carry, in this order.
    pub groups: &'a [String],
    /// Subject key id of this cluster's ClientCA (hex); a credential from another CA is a
    /// mismatch even if the names agree.
    pub client_ca_key_id: Option<&'a str>,
}

/// What to do with the credential directory; [`decide`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Valid, for the same server, CN and groups, with more than a third of its life left.
    Keep,
    /// Nothing there yet.
    Mint,
    /// Move the old files aside (timestamped), then mint.
    Rotate {
        /// What triggered it, for the report: `--rotate` or the coming expiry.
        why: String,
    },
}

/// Reads the credential directory.
pub fn inspect(dir: &Path) -> Result<Existing> {
    let files = CredentialFiles::in_dir(dir);
    let present: Vec<PathBuf> = files
        .all()
        .iter()
        .filter(|p| p.exists())
        .map(|p| p.to_path_buf())
        .collect();
    let cert = match tenantci_core::fsutil::read_bounded(&files.cert, tenantci_core::input::MAX_PEM)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
    {
        Ok(pem) => Some(CertInfo::from_pem(&pem).map_err(|e| {
            Error::bad_input(format!(
                "the existing credential `{}` is not a certificate",
                files.cert.display()
            ))
            .caused_by(e)
            .hint("pass --rotate to move it aside and mint a new one")
        })?),
        Err(_) => None,
    };
    let server =
        tenantci_core::fsutil::read_bounded(&files.kubeconfig, tenantci_core::input::MAX_CONFIG)
            .ok()
            .and_then(|t| serde_yaml::from_slice::<kube::config::Kubeconfig>(&t).ok())
            .and_then(|kc| kc.clusters.into_iter().next())
            .and_then(|c| c.cluster)
            .and_then(|c| c.server);
    Ok(Existing {
        present,
        cert,
        server,
    })
}

/// Decides what to do with the existing credential.
pub fn decide(
    existing: &Existing,
    want: &Wanted<'_>,
    now: OffsetDateTime,
    rotate: bool,
    dir: &Path,
) -> Result<Decision> {
    if existing.present.is_empty() {
        return Ok(Decision::Mint);
    }
    if rotate {
        return Ok(Decision::Rotate {
            why: "--rotate".into(),
        });
    }
    let refuse = |what: String| {
        Error::bad_input(format!("the credential in `{}` {what}", dir.display()))
            .hint("pass --rotate to move the old files aside (timestamped) and mint a new credential, or pass another --credential-dir")
    };
    let (Some(cert), true) = (&existing.cert, existing.present.len() == 4) else {
        return Err(refuse(
            "is incomplete (some of ca.crt, tls.crt, tls.key, kubeconfig are missing)".into(),
        ));
    };
    if existing.server.as_deref() != Some(want.server) {
        return Err(refuse(format!(
            "is for server {} but the cluster is at {}",
            existing.server.as_deref().unwrap_or("(none)"),
            want.server
        )));
    }
    // Read as kube-apiserver reads it; a subject it could read otherwise is never kept.
    let identity = cert
        .identity()
        .map_err(|a| refuse(format!("has a subject tenantci does not keep: {a}")))?;
    if identity.user != want.common_name {
        return Err(refuse(format!(
            "is for user `{}` but `{}` was asked for",
            identity.user, want.common_name
        )));
    }
    if identity.groups != want.groups {
        return Err(refuse(format!(
            "is for groups {:?} but {:?} were asked for (the group must be the one the binding names)",
            identity.groups, want.groups
        )));
    }
    if let (Some(want_id), Some(have)) = (want.client_ca_key_id, cert.authority_key_id.as_deref())
        && want_id != have
    {
        return Err(refuse(
            "was signed by another ClientCA than this cluster's".into(),
        ));
    }
    if cert.remaining_fraction(now) <= 1.0 / 3.0 {
        return Ok(Decision::Rotate {
            why: format!(
                "it expires at {} (a third or less of its life left)",
                tenantci_core::pki::inspect::rfc3339(cert.not_after)
            ),
        });
    }
    Ok(Decision::Keep)
}

/// Moves the credential files aside as `<dir>/<file>.old-<UTC timestamp>` and returns the
/// new names, so a rotation never destroys the old credential.
pub fn move_aside(dir: &Path, now: OffsetDateTime) -> Result<Vec<PathBuf>> {
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let mut moved = Vec::new();
    for f in CredentialFiles::in_dir(dir).all() {
        if f.exists() {
            let to = PathBuf::from(format!("{}.old-{stamp}", f.display()));
            std::fs::rename(f, &to).map_err(|e| Error::unwritable("the old credential", f, e))?;
            moved.push(to);
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, orgs: &[&str], age_days: i64, life_days: i64) -> CertInfo {
        cert_with(&[cn], orgs, age_days, life_days)
    }

    fn cert_with(cns: &[&str], orgs: &[&str], age_days: i64, life_days: i64) -> CertInfo {
        let now = OffsetDateTime::now_utc();
        let kube_subject = tenantci_core::pki::kube_subject::KubeSubject {
            common_names: cns.iter().map(|s| s.to_string()).collect(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        CertInfo {
            subject: String::new(),
            common_name: kube_subject.user().map(str::to_string),
            organizations: kube_subject.organizations.clone(),
            kube_subject,
            not_before: now - time::Duration::days(age_days),
            not_after: now - time::Duration::days(age_days) + time::Duration::days(life_days),
            is_ca: false,
            serial_hex: String::new(),
            spki_der: vec![],
            authority_key_id: Some("aa".into()),
            subject_key_id: None,
        }
    }

    fn existing(c: CertInfo, server: &str) -> Existing {
        Existing {
            present: vec![PathBuf::new(); 4],
            cert: Some(c),
            server: Some(server.into()),
        }
    }

    fn want<'a>(groups: &'a [String]) -> Wanted<'a> {
        Wanted {
            server: "https://127.0.0.1:1",
            common_name: "gitlab-runner",
            groups,
            client_ca_key_id: Some("aa"),
        }
    }

    #[test]
    fn decisions() {
        let g = vec!["gitlab-runner".to_string()];
        let now = OffsetDateTime::now_utc();
        let dir = Path::new("/c");
        let fresh = existing(
            cert("gitlab-runner", &["gitlab-runner"], 1, 30),
            "https://127.0.0.1:1",
        );
        assert_eq!(
            decide(&fresh, &want(&g), now, false, dir).unwrap(),
            Decision::Keep
        );
        assert!(matches!(
            decide(&fresh, &want(&g), now, true, dir).unwrap(),
            Decision::Rotate { .. }
        ));
        let old = existing(
            cert("gitlab-runner", &["gitlab-runner"], 25, 30),
            "https://127.0.0.1:1",
        );
        assert!(matches!(
            decide(&old, &want(&g), now, false, dir).unwrap(),
            Decision::Rotate { .. }
        ));
        let empty = Existing {
            present: vec![],
            cert: None,
            server: None,
        };
        assert_eq!(
            decide(&empty, &want(&g), now, false, dir).unwrap(),
            Decision::Mint
        );
        for bad in [
            existing(
                cert("gitlab-runner", &["gitlab-runner"], 1, 30),
                "https://127.0.0.1:2",
            ),
            existing(
                cert("other", &["gitlab-runner"], 1, 30),
                "https://127.0.0.1:1",
            ),
            existing(
                cert("gitlab-runner", &["team"], 1, 30),
                "https://127.0.0.1:1",
            ),
        ] {
            let e = decide(&bad, &want(&g), now, false, dir).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.hint_text().unwrap().contains("--rotate"));
        }
        // Two CNs: kube-apiserver's user is the last, so the wanted one in either place is
        // never kept.
        for cns in [
            ["gitlab-runner", "tenant-admin"],
            ["tenant-admin", "gitlab-runner"],
        ] {
            let two = existing(
                cert_with(&cns, &["gitlab-runner"], 1, 30),
                "https://127.0.0.1:1",
            );
            let e = decide(&two, &want(&g), now, false, dir).unwrap_err();
            assert!(e.message().contains("2 CNs"), "{}", e.message());
        }
        let mut other_ca = fresh.clone();
        other_ca.cert.as_mut().unwrap().authority_key_id = Some("bb".into());
        assert!(decide(&other_ca, &want(&g), now, false, dir).is_err());
    }
}
