//! Step 2: keep, mint or rotate the runner's credential (the decision is
//! `credential::decision`'s; this step carries it out and reports it).

use std::path::Path;

use time::OffsetDateTime;

use super::Run;
use crate::credential::decision::{self as cred, Decision, Existing, Wanted};
use crate::credential::{CredentialFiles, MintRequest};
use crate::steps::Outcome;
use tenantci_core::pki::KeyType;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::{Error, Result};

/// The credential the later steps use.
pub(super) struct Credential {
    /// Absolute paths (config.toml names them).
    pub files: CredentialFiles,
    /// Minted in this run: verification then expects access to be granted, not just kept.
    pub minted: bool,
}

/// A PEM certificate file, with errors that name `what` it is.
pub(super) fn read_cert(what: &str, path: &Path) -> Result<CertInfo> {
    let pem = tenantci_core::input::read_text(what, path, tenantci_core::input::MAX_PEM)?;
    CertInfo::from_pem(&pem).map_err(|e| {
        Error::bad_input(format!("{what} `{}` is not a certificate", path.display())).caused_by(e)
    })
}

/// Phase one's decision about the credential, carried out in phase two.
pub(super) struct CredentialPlan {
    existing: Existing,
    decision: Decision,
    now: OffsetDateTime,
    files: CredentialFiles,
}

impl CredentialPlan {
    /// The files config.toml will name (absolute).
    pub fn files(&self) -> &CredentialFiles {
        &self.files
    }
}

impl Run<'_> {
    /// Phase one: reads the credential directory and decides; when the decision mints, checks
    /// the ClientCA (key matches certificate, outlasts the validity) and the serving CA file
    /// now, so a bad CA is refused before the old files are moved aside or anything applied.
    pub(super) fn plan_credential(&self) -> Result<CredentialPlan> {
        let dir = &self.inputs.credential_dir;
        let now = OffsetDateTime::now_utc();
        let client_ca = read_cert("the ClientCA", &self.cluster.client_ca_cert)?;
        let existing = cred::inspect(dir)?;
        let wanted = Wanted {
            server: &self.cluster.server,
            common_name: &self.inputs.common_name,
            groups: &self.groups,
            client_ca_key_id: client_ca.subject_key_id.as_deref(),
        };
        let decision = cred::decide(&existing, &wanted, now, self.inputs.rotate, dir)?;
        if decision != Decision::Keep {
            crate::credential::check(&self.mint_request())?;
        }
        let files = CredentialFiles::in_dir(&std::path::absolute(dir).unwrap_or(dir.clone()));
        Ok(CredentialPlan {
            existing,
            decision,
            now,
            files,
        })
    }

    /// Whether the credential directory holds some but not all of its files, as it does while
    /// another run writes it (one file after the other): seen without the lock, that is not
    /// yet a refusal.
    pub(super) fn credential_being_written(&self) -> bool {
        cred::inspect(&self.inputs.credential_dir)
            .is_ok_and(|e| (1..CredentialFiles::COUNT).contains(&e.present.len()))
    }

    /// Phase two: keeps, or (after moving the old files aside when rotating) mints.
    pub(super) fn credential(&mut self, plan: CredentialPlan) -> Result<Credential> {
        let dir = &self.inputs.credential_dir;
        let minted = match (&plan.decision, self.inputs.dry_run) {
            (Decision::Keep, _) => {
                self.keep(&plan.existing);
                false
            }
            (d, true) => {
                let detail = format!("{} ({d:?})", dir.display());
                self.steps.act("credential", Outcome::Minted, detail);
                false
            }
            (d, false) => {
                self.mint(d, plan.now)?;
                true
            }
        };
        Ok(Credential {
            files: plan.files,
            minted,
        })
    }

    fn mint_request(&self) -> MintRequest {
        let inputs = self.inputs;
        MintRequest {
            ca: self.cluster.ca.clone(),
            server: self.cluster.server.clone(),
            common_name: inputs.common_name.clone(),
            organizations: self.groups.clone(),
            out_dir: inputs.credential_dir.clone(),
            valid_for: inputs.valid_for.clone(),
            key_type: KeyType::EcdsaP256,
        }
    }

    fn keep(&mut self, existing: &Existing) {
        let cert = existing
            .cert
            .as_ref()
            .expect("kept credentials have a cert");
        let detail = format!(
            "{} (valid until {})",
            self.inputs.credential_dir.display(),
            rfc3339(cert.not_after)
        );
        self.steps.record("credential", Outcome::Kept, detail);
    }

    /// Mints (after moving the old files aside when rotating).
    fn mint(&mut self, decision: &Decision, now: OffsetDateTime) -> Result<()> {
        let inputs = self.inputs;
        if let Decision::Rotate { why } = decision {
            let moved = cred::move_aside(&inputs.credential_dir, now)?;
            let detail = format!("{why}; moved aside {} file(s)", moved.len());
            self.steps.act("credential", Outcome::Rotated, detail);
        }
        let minted = crate::credential::mint(&self.mint_request())?;
        let detail = format!(
            "{} (valid until {})",
            inputs.credential_dir.display(),
            minted.not_after
        );
        self.steps.act("credential", Outcome::Minted, detail);
        Ok(())
    }
}
