//! Step 6, last: the runner token (created through GitLab's API only now, when every earlier
//! step held, or an interrupted run's creation finished: `gitlab::pending`) and the runner's
//! config.toml entry, after which the creation's record is removed.

use super::{Inputs, PausePods, Run};
use crate::credential::CredentialFiles;
use crate::gitlab;
use crate::gitlab::config::RunnerToken;
use crate::gitlab::config::entry::Autoscaler;
use crate::gitlab::config::{KubernetesSettings, MergeOptions, RunnerEntry};
use crate::gitlab::token::{self, Obtained, Origin, PENDING_TOKEN, Prepared};
use crate::steps::Outcome;
use tenantci_core::Result;

impl Run<'_> {
    /// Phase one: config.toml as the last step will find it (a regular file of bounded size,
    /// valid TOML, no entry of ours the merge would refuse) and a directory this user can
    /// write, so a config that cannot take our entry is refused before anything is minted or
    /// applied. The token is a placeholder: the merge's refusals do not depend on it.
    pub(super) fn check_config(
        &self,
        files: &CredentialFiles,
        ca: &gitlab::ca::Plan,
    ) -> Result<()> {
        let inputs = self.inputs;
        let token = Obtained {
            token: RunnerToken::EnvRef(PENDING_TOKEN.into()),
            registration: None,
            origin: Origin::WouldCreate,
        };
        let mut entry = runner_entry(inputs, &self.cluster.server, files, token);
        entry.tls_ca_file = ca.tls_ca_file.clone();
        let existing = gitlab::config::write::read_existing(&inputs.config_path)?;
        let options = MergeOptions {
            force: inputs.force,
        };
        gitlab::config::merge::plan(&inputs.config_path, existing.as_deref(), &entry, options)?;
        if !inputs.dry_run {
            tenantci_core::input::check_writable("the gitlab-runner config", &inputs.config_path)?;
            tenantci_core::input::check_writable("the credential directory", &files.ca)?;
        }
        Ok(())
    }

    /// The token prepared by [`super::check`]; a runner created now (or an interrupted
    /// run's, finished) is its own step.
    pub(super) async fn runner_token(&mut self, prepared: Prepared<'_>) -> Result<Obtained> {
        let obtained = prepared.obtain().await?;
        if let Some((outcome, detail)) = gitlab_step(&obtained.origin) {
            self.steps.act("gitlab", outcome, detail);
        }
        Ok(obtained)
    }

    /// Merges our entry into config.toml; written only when it changed (and not in a dry run).
    /// GitLab's CA copy ([`gitlab::ca`]) is written just before, so the entry never names a
    /// missing file.
    pub(super) fn write_config(
        &mut self,
        files: &CredentialFiles,
        token: Obtained,
        ca: &gitlab::ca::Plan,
    ) -> Result<()> {
        let inputs = self.inputs;
        let mut entry = runner_entry(inputs, &self.cluster.server, files, token);
        entry.tls_ca_file = ca.tls_ca_file.clone();
        let options = MergeOptions {
            force: inputs.force,
        };
        let mut changed = false;
        if !inputs.dry_run {
            // Planned first: a refused merge leaves the CA copy as it was.
            let existing = gitlab::config::write::read_existing(&inputs.config_path)?;
            gitlab::config::merge::plan(&inputs.config_path, existing.as_deref(), &entry, options)?;
            changed |= gitlab::ca::apply(ca)?;
        }
        let outcome =
            gitlab::config::configure(&inputs.config_path, &entry, options, inputs.dry_run)?;
        if !inputs.dry_run {
            token::finish(&inputs.token, &inputs.config_path, &inputs.runner_name)?;
        }
        changed |= outcome.written || outcome.plan.changed();
        self.steps.act(
            "config",
            if changed {
                Outcome::Written
            } else {
                Outcome::Unchanged
            },
            inputs.config_path.display().to_string(),
        );
        Ok(())
    }
}

/// The `gitlab` step's line, for a runner this run created or finished at GitLab.
fn gitlab_step(origin: &Origin) -> Option<(Outcome, String)> {
    Some(match origin {
        Origin::Created { id, .. } => (Outcome::Created, format!("runner id {id}")),
        Origin::Resumed { id, .. } => (
            Outcome::Reused,
            format!(
                "runner id {id} reused: an interrupted run created and recorded it, and GitLab verified its token"
            ),
        ),
        Origin::Replaced { id, deleted, .. } => (
            Outcome::Replaced,
            format!(
                "runner id {id}; runner id {} deleted and replaced: an interrupted run created it without recording its token",
                ids(deleted)
            ),
        ),
        _ => return None,
    })
}

fn ids(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    ids.join(", ")
}

/// The entry: this cluster's server and the credential's files; one job request at a time,
/// no limit of its own (`concurrent` bounds it).
fn runner_entry(
    inputs: &Inputs,
    server: &str,
    files: &CredentialFiles,
    token: Obtained,
) -> RunnerEntry {
    RunnerEntry {
        name: inputs.runner_name.clone(),
        url: inputs.gitlab_url.clone(),
        token: token.token,
        registration: token.registration,
        tls_ca_file: Default::default(),
        limit: 0,
        request_concurrency: 1,
        kubernetes: KubernetesSettings {
            host: Some(server.to_string()),
            cert_file: Some(files.cert.clone()),
            key_file: Some(files.key.clone()),
            ca_file: Some(files.ca.clone()),
            namespace: inputs.namespace.clone(),
            resources: inputs.resources.clone(),
            autoscaler: autoscaler(&inputs.pause_pods),
            ..Default::default()
        },
    }
}

/// With tenantci's Deployment the autoscaler table is not ours to touch.
fn autoscaler(pause_pods: &PausePods) -> Autoscaler {
    match pause_pods {
        PausePods::Deployment => Autoscaler::LeaveAlone,
        PausePods::GitlabNative(native) => Autoscaler::Native(native.clone()),
        PausePods::LeaveGitlabNative => Autoscaler::Remove,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitlab::config::entry::NativePausePods;

    #[test]
    fn only_native_and_leaving_native_touch_the_autoscaler_table() {
        assert_eq!(autoscaler(&PausePods::Deployment), Autoscaler::LeaveAlone);
        assert_eq!(
            autoscaler(&PausePods::LeaveGitlabNative),
            Autoscaler::Remove
        );
        let native = NativePausePods::new(2);
        assert_eq!(
            autoscaler(&PausePods::GitlabNative(native.clone())),
            Autoscaler::Native(native)
        );
    }
}
