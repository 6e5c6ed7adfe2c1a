//! GitLab's CA, handed on to gitlab-runner as `tls-ca-file`.
//!
//! When tenantci needs a CA to reach GitLab (`--gitlab-ca-file`), gitlab-runner needs the same
//! one: without it every request of the runner fails with "x509: certificate signed by unknown
//! authority". By default tenantci keeps a 0600 copy beside the credential
//! ([`MANAGED_FILE_NAME`]) and writes its absolute path, so a later edit or removal of the
//! operator's file cannot break a running runner; `--gitlab-ca-in-place` writes the operator's
//! own path instead. A run without `--gitlab-ca-file` removes the managed copy and the key
//! when it names that copy, and nothing else ([`TlsCaFile::RemoveIfManaged`]).
//! [`plan`] reads and checks; [`apply`] is the only write.

use std::path::{Path, PathBuf};

use super::config::entry::TlsCaFile;
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::{Error, Result};

/// The managed copy's name in its directory.
pub const MANAGED_FILE_NAME: &str = "gitlab-ca.crt";

/// `--gitlab-ca-file` and how to hand it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitlabCa {
    /// The CA bundle (PEM) that verifies GitLab's HTTPS certificate, as the operator gave it.
    pub file: PathBuf,
    /// Write this path itself as `tls-ca-file` rather than a managed copy.
    pub in_place: bool,
}

/// What a run does with `tls-ca-file` and the managed copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// What the entry's `tls-ca-file` becomes: the managed copy, the operator's file, or removed
    /// when it names the managed copy.
    pub tls_ca_file: TlsCaFile,
    /// The managed copy and its contents, to write when they differ.
    pub copy: Option<(PathBuf, Vec<u8>)>,
    /// A managed copy no run needs any more.
    pub remove: Option<PathBuf>,
}

/// Decides, after reading and checking the CA file; writes nothing. `managed_dir` is where
/// the copy lives (the credential directory), an absolute path.
pub fn plan(ca: Option<&GitlabCa>, managed_dir: &Path) -> Result<Plan> {
    let managed = std::path::absolute(managed_dir.join(MANAGED_FILE_NAME))
        .map_err(|e| Error::unreadable("the credential directory", managed_dir, e))?;
    let Some(ca) = ca else {
        return Ok(Plan {
            remove: managed.exists().then(|| managed.clone()),
            tls_ca_file: TlsCaFile::RemoveIfManaged(managed),
            copy: None,
        });
    };
    let pem = tenantci_core::input::read_bytes(
        "the GitLab CA file",
        &ca.file,
        tenantci_core::tls::MAX_CA_BUNDLE_BYTES,
    )?;
    tenantci_core::tls::parse_ca_bundle("the GitLab CA file", &ca.file, &pem)?;
    if ca.in_place {
        let own = std::path::absolute(&ca.file)
            .map_err(|e| Error::unreadable("the GitLab CA file", &ca.file, e))?;
        // Our earlier copy is no longer named by the entry.
        return Ok(Plan {
            tls_ca_file: TlsCaFile::Set(own),
            copy: None,
            remove: managed.exists().then_some(managed),
        });
    }
    Ok(Plan {
        tls_ca_file: TlsCaFile::Set(managed.clone()),
        copy: Some((managed, pem)),
        remove: None,
    })
}

/// Writes the copy (0600, only when it changed) or removes the one no longer needed; returns
/// whether anything changed on disk.
pub fn apply(plan: &Plan) -> Result<bool> {
    let mut changed = false;
    if let Some((path, pem)) = &plan.copy {
        if let Some(dir) = path.parent() {
            fsutil::create_dir_all(dir, fsutil::MODE_PRIVATE_DIR)
                .map_err(|e| Error::unwritable("the GitLab CA copy's directory", dir, e))?;
        }
        changed |= fsutil::write_if_changed(path, pem, MODE_SECRET)
            .map_err(|e| Error::unwritable("the GitLab CA copy", path, e))?;
    }
    if let Some(path) = &plan.remove {
        match std::fs::remove_file(path) {
            Ok(()) => changed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::unwritable("the GitLab CA copy", path, e)),
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["gitlab.test".to_string()]).unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_copy_is_planned_beside_the_credential_and_removed_once_not_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("corp.pem");
        std::fs::write(&source, pem()).unwrap();
        let creds = dir.path().join("creds");
        let ca = GitlabCa {
            file: source.clone(),
            in_place: false,
        };
        let copy = plan(Some(&ca), &creds).unwrap();
        let managed = creds.join(MANAGED_FILE_NAME);
        assert_eq!(copy.tls_ca_file, TlsCaFile::Set(managed.clone()));
        std::fs::create_dir(&creds).unwrap();
        assert!(apply(&copy).unwrap());
        assert!(!apply(&copy).unwrap(), "an unchanged copy is not rewritten");

        let in_place = plan(
            Some(&GitlabCa {
                in_place: true,
                ..ca
            }),
            &creds,
        )
        .unwrap();
        assert_eq!(in_place.tls_ca_file, TlsCaFile::Set(source));
        assert_eq!(in_place.remove, Some(managed.clone()));

        let none = plan(None, &creds).unwrap();
        assert_eq!(
            none.tls_ca_file,
            TlsCaFile::RemoveIfManaged(managed.clone())
        );
        assert!(apply(&none).unwrap());
        assert!(!managed.exists());
    }

    #[test]
    fn a_file_without_a_certificate_is_refused_before_anything_is_planned() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("empty.pem");
        std::fs::write(&source, "not pem\n").unwrap();
        let ca = GitlabCa {
            file: source,
            in_place: false,
        };
        let err = plan(Some(&ca), dir.path()).unwrap_err();
        assert!(
            err.message().contains("holds no PEM certificate"),
            "{err:?}"
        );
    }
}
