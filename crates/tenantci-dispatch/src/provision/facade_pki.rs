//! The facade's own PKI: a CA (`facade-ca.crt` / `facade-ca.key`, ECDSA P-256, 10 years) whose
//! cert every executor's proxy trusts the facade by (identity off: `ca.crt` in a Pod's Secret,
//! an env variable in a sandbox), and the serving cert (`facade.crt` /
//! `facade.key`, 1 year) whose SAN is the facade URL's host (an IP SAN for an address).
//! `inspect` reads what is there, `decide` is pure, `apply` writes (each file 0600, atomically).
//!
//! The CA is kept as long as it outlives a fresh serving cert, so executors keep trusting the
//! facade across re-runs; the serving cert is re-issued from it when the host changed, it is
//! signed by another CA, its key does not match, or a third or less of its life is left.

use std::path::Path;
use std::time::Duration;

use rcgen::{KeyPair, PublicKeyData};
use time::OffsetDateTime;

use crate::config::Paths;
use crate::facade::cert::covers;
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::pki::CertificateAuthority;
use tenantci_core::pki::inspect::{CertInfo, rfc3339, subject_alt_names};
use tenantci_core::{Error, Result};

/// A new facade CA's lifetime: ten years.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// A new serving certificate's lifetime: one year.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The facade CA certificate's subject CN.
pub const CA_COMMON_NAME: &str = "tenantci dispatcher facade CA";

/// The serving cert on disk, as far as the decision needs it.
#[derive(Debug, Clone)]
pub struct Serving {
    /// Its validity, key ids and public key.
    pub info: CertInfo,
    /// Its subject alternative names.
    pub sans: Vec<String>,
    /// `facade.key` exists and is its key.
    pub key_matches: bool,
}

/// What is on disk.
#[derive(Debug)]
pub struct Existing {
    /// The facade CA with its key (None: neither file exists).
    pub ca: Option<(CertificateAuthority, CertInfo)>,
    /// The serving cert (None: absent or unreadable, so a new one is issued).
    pub serving: Option<Serving>,
}

/// What [`decide`] found to do with the facade's PKI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Both are good: nothing is written.
    Keep,
    /// No CA yet, or it would expire before a new serving cert: a new CA and serving cert.
    NewCa {
        /// Why, for init's report.
        why: String,
    },
    /// The CA stays; a new serving cert from it.
    Reissue {
        /// Why, for init's report.
        why: String,
    },
}

fn refuse(what: String, paths: &Paths) -> Error {
    Error::bad_input(what).hint(format!(
        "restore the file, or delete {} and {} to start a new facade CA (restart running dispatchers afterwards)",
        paths.facade_ca_cert.display(),
        paths.facade_ca_key.display()
    ))
}

/// Reads the four files; a CA cert without its key (or a key that does not match) is refused.
pub fn inspect(paths: &Paths) -> Result<Existing> {
    let ca = match (paths.facade_ca_cert.exists(), paths.facade_ca_key.exists()) {
        (false, false) => None,
        (true, true) => {
            let ca = CertificateAuthority::load(&paths.facade_ca_cert, &paths.facade_ca_key)
                .map_err(|e| refuse(e.message().to_string(), paths).caused_by(e))?;
            let info = CertInfo::from_pem(ca.cert_pem()).map_err(|e| {
                refuse(
                    format!("`{}` cannot be read back", paths.facade_ca_cert.display()),
                    paths,
                )
                .caused_by(e)
            })?;
            Some((ca, info))
        }
        (true, false) | (false, true) => {
            return Err(refuse(
                format!(
                    "only one of {} and {} exists",
                    paths.facade_ca_cert.display(),
                    paths.facade_ca_key.display()
                ),
                paths,
            ));
        }
    };
    let read = |p: &Path| {
        fsutil::read_bounded(p, tenantci_core::input::MAX_PEM)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    let serving = match read(&paths.facade_cert) {
        None => None,
        Some(pem) => match (CertInfo::from_pem(&pem), subject_alt_names(&pem)) {
            (Ok(info), Ok(sans)) => {
                let key_matches = read(&paths.facade_key)
                    .and_then(|k| KeyPair::from_pem(&k).ok())
                    .is_some_and(|k| k.subject_public_key_info() == info.spki_der);
                Some(Serving {
                    info,
                    sans,
                    key_matches,
                })
            }
            // Unreadable: issue a new one rather than refuse; the CA is what must persist.
            _ => None,
        },
    };
    Ok(Existing { ca, serving })
}

/// What to do for executors dialling `host` at `now`, from the CA and serving cert found
/// (pure): see the module header.
pub fn decide(
    ca: Option<&CertInfo>,
    serving: Option<&Serving>,
    host: &str,
    now: OffsetDateTime,
) -> Plan {
    let Some(ca) = ca else {
        return Plan::NewCa {
            why: "no facade CA yet".into(),
        };
    };
    if ca.not_after <= now + time::Duration::try_from(SERVING_VALIDITY).expect("fits") {
        return Plan::NewCa {
            why: format!(
                "the facade CA expires at {}, before a new serving cert would",
                rfc3339(ca.not_after)
            ),
        };
    }
    let Some(s) = serving else {
        return Plan::Reissue {
            why: "no serving cert yet".into(),
        };
    };
    let why = if s.info.authority_key_id.is_none() || s.info.authority_key_id != ca.subject_key_id {
        "it was signed by another CA".to_string()
    } else if !covers(&s.sans, host) {
        format!("it covers {:?}, not the facade host {host}", s.sans)
    } else if !s.key_matches {
        "facade.key is missing or does not match it".to_string()
    } else if s.info.remaining_fraction(now) <= 1.0 / 3.0 {
        format!(
            "it expires at {} (a third or less of its life left)",
            rfc3339(s.info.not_after)
        )
    } else {
        return Plan::Keep;
    };
    Plan::Reissue { why }
}

fn write(path: &Path, pem: &str, what: &str) -> Result<()> {
    fsutil::write_atomic(path, pem.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable(what, path, e))
}

/// Carries out `plan`; keys are written before the certs that name them.
pub fn apply(plan: &Plan, existing: &Existing, paths: &Paths, host: &str) -> Result<()> {
    let generated;
    let ca = match (plan, &existing.ca) {
        (Plan::Keep, _) => return Ok(()),
        (Plan::Reissue { .. }, Some((ca, _))) => ca,
        _ => {
            generated = CertificateAuthority::generate(CA_COMMON_NAME, CA_VALIDITY)?;
            write(
                &paths.facade_ca_key,
                generated.key_pem(),
                "the facade CA key",
            )?;
            write(&paths.facade_ca_cert, generated.cert_pem(), "the facade CA")?;
            &generated
        }
    };
    let issued =
        tenantci_core::pki::issue::server_cert(ca, host, &[host.to_string()], SERVING_VALIDITY)?;
    write(&paths.facade_key, &issued.key_pem, "the facade key")?;
    write(
        &paths.facade_cert,
        &issued.cert_pem,
        "the facade certificate",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(host: &str) -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::beside(&dir.path().join("config.toml"));
        let e = inspect(&paths).unwrap();
        let plan = decide(None, None, host, OffsetDateTime::now_utc());
        assert!(matches!(plan, Plan::NewCa { .. }));
        apply(&plan, &e, &paths, host).unwrap();
        (dir, paths)
    }

    fn plan_for(paths: &Paths, host: &str) -> Plan {
        let e = inspect(paths).unwrap();
        decide(
            e.ca.as_ref().map(|(_, i)| i),
            e.serving.as_ref(),
            host,
            OffsetDateTime::now_utc(),
        )
    }

    #[test]
    fn kept_while_valid_and_reissued_from_the_same_ca_when_the_host_changes() {
        let (_d, paths) = setup("10.0.0.7");
        let sans = subject_alt_names(&std::fs::read_to_string(&paths.facade_cert).unwrap());
        assert_eq!(sans.unwrap(), ["10.0.0.7"]);
        assert_eq!(plan_for(&paths, "10.0.0.7"), Plan::Keep);
        let ca_before = std::fs::read(&paths.facade_ca_key).unwrap();
        let plan = plan_for(&paths, "dispatch.internal");
        assert!(matches!(plan, Plan::Reissue { .. }), "{plan:?}");
        apply(
            &plan,
            &inspect(&paths).unwrap(),
            &paths,
            "dispatch.internal",
        )
        .unwrap();
        assert_eq!(std::fs::read(&paths.facade_ca_key).unwrap(), ca_before);
        assert_eq!(plan_for(&paths, "dispatch.internal"), Plan::Keep);
        assert_eq!(plan_for(&paths, "DISPATCH.internal"), Plan::Keep);
        for p in [
            &paths.facade_ca_cert,
            &paths.facade_ca_key,
            &paths.facade_cert,
            &paths.facade_key,
        ] {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }

    #[test]
    fn a_mismatched_key_or_a_foreign_ca_reissues_and_a_lone_ca_file_is_refused() {
        let (_d, paths) = setup("127.0.0.1");
        let other = tempfile::tempdir().unwrap();
        let other_paths = Paths::beside(&other.path().join("config.toml"));
        let plan = decide(None, None, "127.0.0.1", OffsetDateTime::now_utc());
        apply(
            &plan,
            &inspect(&other_paths).unwrap(),
            &other_paths,
            "127.0.0.1",
        )
        .unwrap();
        std::fs::copy(&other_paths.facade_key, &paths.facade_key).unwrap();
        assert!(
            matches!(plan_for(&paths, "127.0.0.1"), Plan::Reissue { why } if why.contains("facade.key"))
        );
        std::fs::copy(&other_paths.facade_cert, &paths.facade_cert).unwrap();
        assert!(
            matches!(plan_for(&paths, "127.0.0.1"), Plan::Reissue { why } if why.contains("another CA"))
        );
        std::fs::remove_file(&paths.facade_ca_key).unwrap();
        let e = inspect(&paths).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
