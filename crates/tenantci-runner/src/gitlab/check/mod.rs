//! `tenantci runner check`: "check both halves before blaming the runner" (the runbook) as one
//! read-only command, for a gitlab-runner entry that already exists. It reads config.toml and
//! uses only the entry's own credential (no admin): files and modes, the client certificate
//! (validity, key, chain to the cluster's ClientCA), the apiserver's CA and answer,
//! SelfSubjectAccessReviews for what the Kubernetes executor needs and what a runner must never
//! have, GitLab with the entry's `tls-ca-file` and token, and the job pod and pause pods against
//! the node image.
//!
//! Each check is one [`Check`] with its fix; a check that cannot run because an earlier one
//! failed is `skip`, so the first failure is the one to fix. `bootstrap runner` ends with the
//! same [`run`]. Writes nothing.

pub(crate) mod cluster;
pub mod entry;
pub(crate) mod gitlab;
mod local;

use std::path::PathBuf;

use serde::Serialize;
use time::OffsetDateTime;

use crate::checklist::{self, Check};

use entry::EntryView;
pub use local::ClusterFiles;
use tenantci_core::Result;
use tenantci_core::gateway::StateDir;

/// What to check.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// gitlab-runner's config.toml, read and never written.
    pub config: PathBuf,
    /// The entry's name; `None`: the only kubernetes entry in the file.
    pub name: Option<String>,
    /// The gateway's state dir: the ClientCA and node image of the cluster at the entry's
    /// `host`, when it knows one.
    pub state_dir: Option<PathBuf>,
    /// The cluster's files when the caller resolved them already (`bootstrap runner`);
    /// otherwise they are looked up in `state_dir`.
    pub cluster: Option<ClusterFiles>,
    /// Whether to call GitLab (`bootstrap runner` skips it when it was given the token and
    /// never talked to GitLab).
    pub gitlab: bool,
}

/// `runner check -o json`'s shape.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The config.toml checked.
    pub config: PathBuf,
    /// The entry checked; `None` when none was found (the first check says why).
    pub runner: Option<String>,
    /// Whether no check failed (warnings and skips pass).
    pub passed: bool,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
}

/// config.toml is small; a bound keeps a wrong path from being read whole.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Runs every check. `Err` only for a config.toml that cannot be read (bad input, exit 2);
/// a failing runner is a report with `passed: false`.
pub async fn run(inputs: &Inputs) -> Result<Report> {
    let text = tenantci_core::input::read_text(
        "gitlab-runner's config.toml",
        &inputs.config,
        MAX_CONFIG_BYTES,
    )?;
    let mut lines = Vec::new();
    let found = entry::find(&inputs.config, &text, inputs.name.as_deref());
    let view = match found {
        Ok(view) => view,
        Err(line) => {
            lines.push(line);
            return Ok(report(inputs, None, lines));
        }
    };
    lines.push(Check::ok(
        "entry",
        format!("[[runners]] `{}` in {}", view.name, inputs.config.display()),
    ));
    check_entry(inputs, &view, &mut lines).await;
    Ok(report(inputs, Some(view.name.clone()), lines))
}

fn report(inputs: &Inputs, runner: Option<String>, checks: Vec<Check>) -> Report {
    Report {
        config: inputs.config.clone(),
        runner,
        passed: checklist::passed(&checks),
        checks,
    }
}

async fn check_entry(inputs: &Inputs, view: &EntryView, lines: &mut Vec<Check>) {
    if view.executor.as_deref() != Some(entry::EXECUTOR) {
        lines.push(Check::fail(
            "executor",
            format!(
                "the entry uses executor `{}`, not kubernetes",
                view.executor.as_deref().unwrap_or("(none)")
            ),
            "tenantci checks Kubernetes-executor entries; pass --name of one",
        ));
        return;
    }
    lines.push(Check::ok("executor", "kubernetes"));
    let files_ok = local::files(&inputs.config, view, lines);
    let cluster = inputs.cluster.clone().or_else(|| {
        let dir = inputs.state_dir.as_deref()?;
        local::cluster_at(&StateDir::new(dir), view.host.as_deref())
    });
    let now = OffsetDateTime::now_utc();
    let cert = if files_ok {
        local::certificate(view, cluster.as_ref(), now, lines)
    } else {
        lines.push(Check::skip(
            "certificate",
            "the entry's files are not usable",
        ));
        None
    };
    cluster::check(view, cert.as_ref(), cluster.as_ref(), lines).await;
    if inputs.gitlab {
        gitlab::check(&inputs.config, view, lines).await;
    } else {
        lines.push(Check::skip(
            "gitlab",
            "not contacted in this run; `tenantci runner check` calls it",
        ));
    }
}
