//! `tenantci runner status`: a gitlab-runner entry of this host as an operator sees it. GitLab's
//! view of the runner (id, status and last contact, paused, tags, run-untagged, locked, access
//! level, maximum timeout, the version its managers reported) through GitLab's REST API with an
//! access token holding `read_api` ([`crate::gitlab::rest`]); the entry's concurrency
//! (`concurrent`, `limit`, `request_concurrency`) against the job Pods that hold slots; and the
//! job Pods of its namespace with their GitLab jobs ([`pods`], read by [`cluster`] with the
//! entry's own credential). Read-only everywhere; without an access token, the cluster's view
//! and one line saying what a token would add. No token is ever part of the model.
//!
//! [`open`] (the entry, the access token, the GitLab client) and [`runner_id`] are shared with
//! `runner explain` ([`crate::gitlab::explain`]), which stands on this module.

pub mod cluster;
pub mod pods;
pub mod table;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::api::Client;
use super::entry::{self, EntryView};
use super::rest::{self, RunnerDetails, RunnerManager};
use pods::JobPod;
use tenantci_core::{Error, Result, Secret};

/// The `version` of `runner status -o json` and `runner explain -o json`.
pub const VIEW_VERSION: u32 = 1;
/// The scope the access token needs; `api` also serves.
pub const SCOPE: &str = "read_api";
const TIMEOUT: Duration = Duration::from_secs(15);
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Which entry, and the access token's file.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// gitlab-runner's config.toml, read and never written.
    pub config: PathBuf,
    /// The entry's name; `None`: the only kubernetes entry in the file.
    pub name: Option<String>,
    /// A file (0600) holding an access token with `read_api`; `None`: the cluster's view only.
    pub api_token_file: Option<PathBuf>,
}

/// The entry, and GitLab's client when an access token was given.
pub struct Sources {
    /// The entry as config.toml holds it.
    pub view: EntryView,
    /// GitLab at the entry's `url` with its `tls-ca-file` and the access token.
    pub gitlab: Option<Client>,
    /// The config.toml read.
    pub config: PathBuf,
}

/// Reads the entry and the access token; bad input (exit 2) for a missing entry, a token file
/// open to other accounts or empty, an entry without a GitLab url.
pub fn open(inputs: &Inputs) -> Result<Sources> {
    let what = "gitlab-runner's config.toml";
    let text = tenantci_core::input::read_text(what, &inputs.config, MAX_CONFIG_BYTES)?;
    let view = entry::find(&inputs.config, &text, inputs.name.as_deref())
        .map_err(|line| Error::bad_input(line.detail).hint(line.fix.unwrap_or_default()))?;
    let gitlab = match &inputs.api_token_file {
        None => None,
        Some(file) => Some(client(&view, file)?),
    };
    Ok(Sources {
        view,
        gitlab,
        config: inputs.config.clone(),
    })
}

fn client(view: &EntryView, file: &Path) -> Result<Client> {
    let what = "the GitLab API token file";
    tenantci_core::input::check_private(what, file)?;
    let token = tenantci_core::secret::read_file(what, file, None)?;
    let Some(url) = view.url.as_deref().filter(|u| !u.starts_with('$')) else {
        return Err(Error::bad_input(format!(
            "the entry `{}` has no GitLab url (or a $VAR one)",
            view.name
        ))
        .hint("write the url into the entry (`tenantci bootstrap runner --gitlab-url`)"));
    };
    Client::new(
        url,
        Secret::new(token),
        view.tls_ca_file.as_deref(),
        TIMEOUT,
    )
}

/// The runner's id at GitLab: the entry's `id` (gitlab-runner writes it when it registers,
/// `bootstrap runner` when it creates the runner). Never asked of GitLab with the runner's
/// token: `POST /runners/verify` may add a runner manager and counts as a contact, which would
/// hide the very "not contacted" reason `explain` looks for; these commands only read.
pub fn runner_id(sources: &Sources) -> Result<u64> {
    sources
        .view
        .id
        .and_then(|id| u64::try_from(id).ok())
        .ok_or_else(|| {
            Error::bad_input(format!(
                "the entry `{}` has no runner `id`, so GitLab cannot be asked about it",
                sources.view.name
            ))
            .hint("add `id = N` to the entry (the runner's id, on its page at GitLab); gitlab-runner writes it when it registers")
        })
}

/// GitLab's view of the runner.
#[derive(Debug, Clone, Serialize)]
pub struct GitlabRunner {
    /// `GET /runners/:id`.
    pub runner: RunnerDetails,
    /// `GET /runners/:id/managers`: each gitlab-runner process's version and last contact.
    pub managers: Vec<RunnerManager>,
}

/// The entry's concurrency against the job Pods holding slots.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Concurrency {
    /// The file's `concurrent` (all entries together; gitlab-runner reads a missing one as 1).
    pub concurrent: Option<i64>,
    /// The entry's `limit` (0: only `concurrent`).
    pub limit: Option<i64>,
    /// The entry's `request_concurrency`.
    pub request_concurrency: Option<i64>,
    /// Job Pods Pending or Running: each holds a slot.
    pub active: usize,
    /// The slots: the smaller of a positive `limit` and `concurrent`.
    pub slots: Option<i64>,
    /// Whether every slot is held.
    pub full: bool,
}

impl Concurrency {
    /// From the entry and the job Pods.
    pub fn of(view: &EntryView, pods: &[JobPod]) -> Concurrency {
        let active = pods.iter().filter(|p| holds_slot(p)).count();
        let limit = view.limit.filter(|l| *l > 0);
        // gitlab-runner reads a missing `concurrent` as 1.
        let concurrent = view.concurrent.unwrap_or(1);
        let slots = Some(limit.map_or(concurrent, |l| l.min(concurrent)));
        Concurrency {
            concurrent: view.concurrent,
            limit: view.limit,
            request_concurrency: view.request_concurrency,
            active,
            slots,
            full: slots.is_some_and(|s| i64::try_from(active).unwrap_or(i64::MAX) >= s),
        }
    }
}

/// Whether a job Pod holds one of the runner's slots (it has not ended).
pub fn holds_slot(p: &JobPod) -> bool {
    p.phase == "Pending" || p.phase == "Running"
}

/// `runner status -o json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// [`VIEW_VERSION`].
    pub version: u32,
    /// The config.toml read.
    pub config: PathBuf,
    /// The entry's name.
    pub runner: String,
    /// The job Pods' namespace.
    pub namespace: String,
    /// GitLab's view; `None` without an access token.
    pub gitlab: Option<GitlabRunner>,
    /// What is missing and why (no access token given).
    pub note: Option<String>,
    /// The entry's concurrency.
    pub concurrency: Concurrency,
    /// The job Pods.
    pub pods: Vec<JobPod>,
    /// Pause pods running (warm slots).
    pub warm: usize,
    /// Pause pods in all.
    pub pause: usize,
}

/// The line `runner status` prints without an access token.
pub fn no_token_note() -> String {
    format!(
        "GitLab's view (online and last contact, paused, tags, run-untagged, locked, version) needs --gitlab-api-token-file with a `{SCOPE}` access token"
    )
}

/// Gathers the status; `now` is Unix seconds.
pub async fn run(inputs: &Inputs, now: i64) -> Result<Status> {
    let sources = open(inputs)?;
    let gitlab = match &sources.gitlab {
        None => None,
        Some(client) => {
            let id = runner_id(&sources)?;
            let runner = rest::runner(client, id).await?;
            let managers = rest::managers(client, id).await?;
            Some(GitlabRunner { runner, managers })
        }
    };
    let cluster = cluster::read(&sources.view, now).await?;
    Ok(Status {
        version: VIEW_VERSION,
        config: sources.config.clone(),
        runner: sources.view.name.clone(),
        namespace: sources.view.namespace.clone(),
        note: gitlab.is_none().then(no_token_note),
        gitlab,
        concurrency: Concurrency::of(&sources.view, &cluster.pods),
        pods: cluster.pods,
        warm: cluster.warm,
        pause: cluster.pause,
    })
}
