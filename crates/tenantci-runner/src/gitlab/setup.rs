//! `runner gitlab-config`: one Kubernetes-executor entry merged into gitlab-runner's
//! config.toml, its token given, reused or created through GitLab's API ([`super::token`],
//! shared with `bootstrap runner`). Takes plain inputs (the CLI parses flags) and returns the
//! report; prints nothing.
//!
//! The merge is planned with a placeholder token before the token is obtained, so a broken
//! config.toml or a refused entry fails before a runner is created in GitLab. On any error the
//! file is untouched; a dry run writes nothing and creates no runner.

use std::path::PathBuf;

use serde::Serialize;

use super::ca::{self, GitlabCa};
use super::config::{
    self, Action, KubernetesSettings, MergeOptions, Plan, RunnerEntry, RunnerToken, merge, write,
};
use super::config_lock;
use super::token::{self, Origin, PENDING_TOKEN, Prepared, TokenSource};
use tenantci_core::Result;

/// What `runner gitlab-config` needs, from its flags; [`run`] takes it.
pub struct Inputs {
    /// gitlab-runner's config.toml.
    pub config: PathBuf,
    /// How tenantci finds its `[[runners]]` entry.
    pub name: String,
    /// The GitLab URL the entry names (or a `$VAR` reference).
    pub url: String,
    /// Where the runner token comes from: given, in a file, or created through GitLab's API.
    pub token: TokenSource,
    /// The entry's `limit`: jobs this runner runs at once (0: bounded by `concurrent` only).
    pub limit: u32,
    /// The entry's `request_concurrency`: job requests to GitLab at once (at least 1).
    pub request_concurrency: u32,
    /// The entry's `[runners.kubernetes]` table.
    pub kubernetes: KubernetesSettings,
    /// GitLab's CA, handed on as `tls-ca-file` ([`ca`](mod@super::ca)).
    pub gitlab_ca: Option<GitlabCa>,
    /// Take over an entry of our name that uses another executor.
    pub force: bool,
    /// Plan and report without writing a file or creating a runner.
    pub dry_run: bool,
}

/// The `-o json` shape of `runner gitlab-config` (stable; docs/runbooks/gitlab-runner-config.md).
#[derive(Debug, Serialize)]
pub struct GitlabConfigReport {
    /// The config.toml merged into.
    pub config: PathBuf,
    /// What the merge did (in a dry run: would do).
    pub action: Action,
    /// Whether the file was written (false when nothing changed, and in a dry run).
    pub written: bool,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The entry, its token redacted.
    pub runner: RunnerSummary,
    /// The runner at GitLab; `None` for a given token (GitLab was not involved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<GitlabRunnerSummary>,
}

/// The config.toml entry as the report shows it, with no secret.
#[derive(Debug, Serialize)]
pub struct RunnerSummary {
    /// The entry's `name`.
    pub name: String,
    /// The GitLab URL the entry names.
    pub url: String,
    /// `[redacted]` for a literal token, the reference for `$VAR`.
    pub token: String,
    /// Always `kubernetes`.
    pub executor: &'static str,
    /// The namespace job pods run in.
    pub namespace: String,
    /// The tenant apiserver's URL; `None` when the entry names none.
    pub host: Option<String>,
}

/// The runner at GitLab, for a token created or reused through GitLab's API.
#[derive(Debug, Serialize)]
pub struct GitlabRunnerSummary {
    /// `created`, `reused` (config.toml already had a token, or an interrupted run's recorded
    /// runner was verified), `replaced` (an interrupted run's unrecorded runner deleted, a new
    /// one created) or `would-create` (dry run).
    pub token_source: &'static str,
    /// The runner's id at GitLab; `None` when its token was reused from config.toml or a dry run
    /// only planned it.
    pub id: Option<u64>,
    /// When the token expires (RFC 3339); `None` when it does not, or it is not known.
    pub token_expires_at: Option<String>,
}

impl GitlabRunnerSummary {
    /// `None` for a given token: GitLab was not involved.
    fn of(origin: Origin) -> Option<Self> {
        let (token_source, id, token_expires_at) = match origin {
            Origin::Given => return None,
            Origin::Reused => ("reused", None, None),
            Origin::WouldCreate => ("would-create", None, None),
            Origin::Created { id, expires_at } => ("created", Some(id), expires_at),
            Origin::Resumed { id, expires_at } => ("reused", Some(id), expires_at),
            Origin::Replaced { id, expires_at, .. } => ("replaced", Some(id), expires_at),
        };
        Some(GitlabRunnerSummary {
            token_source,
            id,
            token_expires_at,
        })
    }
}

/// What [`run`] did.
#[derive(Debug)]
pub struct Configured {
    /// The report, `-o json`'s shape.
    pub report: GitlabConfigReport,
    /// The planned file with the token redacted: what a dry run that changes something shows.
    pub preview: Option<String>,
}

/// Checks everything (config.toml parses and takes the entry, its directory is writable, the
/// token's files, GitLab reached) without the lock, so bad input or an unreachable GitLab leaves
/// no lock file; then takes config.toml's lock ([`config_lock`], not in a dry run) and checks
/// again, since another run may have written these files while this one waited. Obtains the
/// token, plans again with it and writes (unless a dry run).
pub async fn run(inputs: &Inputs) -> Result<Configured> {
    let checked = check(inputs).await?;
    let lock = config_lock::acquire_unless_dry_run(&inputs.config, inputs.dry_run).await?;
    let Checked {
        ca,
        mut entry,
        existing,
        prepared,
    } = match lock {
        Some(_) => check(inputs).await?,
        None => checked,
    };
    let obtained = prepared.obtain().await?;
    entry.token = obtained.token;
    entry.registration = obtained.registration;
    let plan = merge::plan(&inputs.config, existing.as_deref(), &entry, options(inputs))?;
    let written = !inputs.dry_run && {
        ca::apply(&ca)?;
        let written = write::write_plan(&inputs.config, &plan)?;
        token::finish(&inputs.token, &inputs.config, &inputs.name)?;
        written
    };
    drop(lock);
    Ok(configured(inputs, &entry, plan, written, obtained.origin))
}

/// What [`check`] found: the CA plan, the entry with a placeholder token, config.toml's
/// text, and the token decided.
struct Checked<'a> {
    ca: ca::Plan,
    entry: RunnerEntry,
    existing: Option<String>,
    prepared: Prepared<'a>,
}

/// Everything before a change: the CA file, config.toml (refused when it cannot take our entry
/// or, unless a dry run, cannot be written: before GitLab creates a runner that a config we
/// cannot write would never name), the token decided, and GitLab reached with an access token
/// that fits before an intent is recorded on disk.
async fn check(inputs: &Inputs) -> Result<Checked<'_>> {
    let ca = ca::plan(inputs.gitlab_ca.as_ref(), &managed_ca_dir(inputs))?;
    let mut entry = pending_entry(inputs);
    entry.tls_ca_file = ca.tls_ca_file.clone();
    let existing = write::read_existing(&inputs.config)?;
    merge::plan(&inputs.config, existing.as_deref(), &entry, options(inputs))?;
    if !inputs.dry_run {
        tenantci_core::input::check_writable("the gitlab-runner config", &inputs.config)?;
    }
    let prepared = token::prepare(
        &inputs.token,
        existing.as_deref(),
        &inputs.config,
        &inputs.name,
        inputs.dry_run,
    )?;
    prepared.check_access().await?;
    Ok(Checked {
        ca,
        entry,
        existing,
        prepared,
    })
}

fn options(inputs: &Inputs) -> MergeOptions {
    MergeOptions {
        force: inputs.force,
    }
}

/// Where the managed copy of GitLab's CA lives: beside the Kubernetes credential when the
/// entry has one, else beside config.toml.
fn managed_ca_dir(inputs: &Inputs) -> std::path::PathBuf {
    let beside = |p: &std::path::Path| p.parent().map(std::path::Path::to_path_buf);
    inputs
        .kubernetes
        .cert_file
        .as_deref()
        .and_then(beside)
        .or_else(|| beside(&inputs.config))
        .unwrap_or_default()
}

/// The entry as asked for, with [`PENDING_TOKEN`] until the token is known.
fn pending_entry(inputs: &Inputs) -> RunnerEntry {
    RunnerEntry {
        name: inputs.name.clone(),
        url: inputs.url.clone(),
        token: RunnerToken::EnvRef(PENDING_TOKEN.into()),
        limit: inputs.limit,
        request_concurrency: inputs.request_concurrency,
        kubernetes: inputs.kubernetes.clone(),
        registration: None,
        tls_ca_file: Default::default(),
    }
}

fn configured(
    inputs: &Inputs,
    entry: &RunnerEntry,
    plan: Plan,
    written: bool,
    origin: Origin,
) -> Configured {
    let preview =
        (inputs.dry_run && plan.changed()).then(|| config::redact(&plan.text, &entry.token));
    let report = GitlabConfigReport {
        config: inputs.config.clone(),
        action: plan.action,
        written,
        dry_run: inputs.dry_run,
        runner: RunnerSummary {
            name: entry.name.clone(),
            url: entry.url.clone(),
            token: entry.token.redacted(),
            executor: config::entry::EXECUTOR_KUBERNETES,
            namespace: entry.kubernetes.namespace.clone(),
            host: entry.kubernetes.host.clone(),
        },
        gitlab: GitlabRunnerSummary::of(origin),
    };
    Configured { report, preview }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gitlab_summary_names_where_the_token_came_from() {
        assert!(GitlabRunnerSummary::of(Origin::Given).is_none());
        let json = |o| serde_json::to_value(GitlabRunnerSummary::of(o)).unwrap();
        assert_eq!(json(Origin::Reused)["token_source"], "reused");
        assert_eq!(json(Origin::WouldCreate)["token_source"], "would-create");
        let created = json(Origin::Created {
            id: 7,
            expires_at: None,
        });
        assert_eq!(created["token_source"], "created");
        assert_eq!(created["id"], 7);
    }
}
