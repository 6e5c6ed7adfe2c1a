//! Last step: `runner check` on the entry just written, so a bootstrap that reports success
//! leaves a runner that the same checks pass (one code path: [`crate::gitlab::check`]).

use super::Run;
use crate::checklist::{self, Status};
use crate::gitlab::check::{self, ClusterFiles};
use crate::steps::Outcome;
use tenantci_core::{Error, Result};

impl Run<'_> {
    /// `gitlab`: whether GitLab is called (only when this run created the runner there; a
    /// given token may be for a GitLab this host does not reach yet).
    pub(super) async fn final_check(&mut self, gitlab: bool) -> Result<()> {
        let inputs = self.inputs;
        if inputs.dry_run {
            self.steps.record(
                "check",
                Outcome::Skipped,
                "dry run: nothing written to check",
            );
            return Ok(());
        }
        let cluster = &self.cluster;
        let report = check::run(&check::Inputs {
            config: inputs.config_path.clone(),
            name: Some(inputs.runner_name.clone()),
            state_dir: None,
            cluster: Some(ClusterFiles {
                name: cluster.cluster.clone(),
                client_ca: cluster.client_ca_cert.clone(),
                node_image: cluster.node_image.clone().unwrap_or_default(),
            }),
            gitlab,
        })
        .await?;
        let failed: Vec<String> = report
            .checks
            .iter()
            .filter(|l| l.status == Status::Fail)
            .map(|l| format!("{}: {}", l.name, l.detail))
            .collect();
        if let Some(first) = failed.first() {
            return Err(Error::check_failed(format!(
                "the runner entry was written but does not pass its checks ({first})"
            ))
            .hint(format!(
                "run `tenantci runner check --config {} --name {}` for every line and its fix",
                inputs.config_path.display(),
                inputs.runner_name
            )));
        }
        let warned = checklist::count(&report.checks, Status::Warn);
        let passed = checklist::count(&report.checks, Status::Ok);
        self.steps.record(
            "check",
            Outcome::Ok,
            format!("{passed} check(s) passed, {warned} warning(s) (`tenantci runner check`)"),
        );
        Ok(())
    }
}
