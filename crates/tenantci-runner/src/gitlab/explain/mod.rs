//! `tenantci runner explain JOB`: why a GitLab job is pending for a gitlab-runner entry of this
//! host. GitLab's view of the job (status, tags, the runner it went to, queued duration) and of
//! the runner, through GitLab's REST API with an access token holding `read_api`
//! ([`crate::gitlab::rest`]); the protected branches when the runner takes protected refs only;
//! the namespace's job Pods and their Events with the entry's own credential
//! ([`crate::gitlab::status::cluster`]); then the reasons in order ([`plan`], pure). Read-only.
//!
//! Bad input (exit 2, nothing asked of the cluster): an entry not in config.toml, no access
//! token or one open to other accounts, a job of another GitLab ([`question`]), a job GitLab
//! does not have, a token without the scope.

pub mod plan;
pub mod question;

use std::path::PathBuf;

use serde::Serialize;

use super::api::ApiError;
use super::rest::{self, JobDetails};
use super::status::pods::JobPod;
use super::status::{self, Concurrency, Sources, VIEW_VERSION};
use plan::{Facts, Reason, Verdict};
use tenantci_core::{Error, Result};

/// How `runner explain` tells to check gitlab-runner's service (the unit `scripts/install.sh`
/// installs).
pub const SERVICE: &str = "systemctl status tenantci-gitlab-runner.service";

/// The entry, the token and the job asked about.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// gitlab-runner's config.toml.
    pub config: PathBuf,
    /// The entry's name; `None`: the only kubernetes entry.
    pub name: Option<String>,
    /// A file (0600) holding an access token with `read_api`.
    pub api_token_file: Option<PathBuf>,
    /// The job's web URL, or its id with `project`.
    pub job: String,
    /// The job's project (id or path) when `job` is an id.
    pub project: Option<String>,
}

/// `runner explain -o json`.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// [`VIEW_VERSION`].
    pub version: u32,
    /// The entry's name.
    pub runner: String,
    /// The entry's runner id at GitLab.
    pub runner_id: u64,
    /// The job as GitLab sees it.
    pub job: JobDetails,
    /// Where it stands.
    pub verdict: Verdict,
    /// Why it waits, in order; empty unless `waits`.
    pub reasons: Vec<Reason>,
    /// The job's Pod, when one exists (its Events included).
    pub pod: Option<JobPod>,
    /// The entry's concurrency.
    pub concurrency: Concurrency,
}

fn not_found(e: ApiError, what: String) -> Error {
    match e {
        ApiError::BadRequest { status: 404, .. } => Error::bad_input(what)
            .hint("check the job's URL or id and --project; the token's user must see the project"),
        other => other.into(),
    }
}

/// Gathers the facts and plans; `now` is Unix seconds.
pub async fn run(inputs: &Inputs, now: i64) -> Result<Explanation> {
    if inputs.api_token_file.is_none() {
        return Err(Error::bad_input(
            "`runner explain` reads the job at GitLab, and no --gitlab-api-token-file was given",
        )
        .hint("give --gitlab-api-token-file FILE: an access token with the `read_api` scope, in a 0600 file"));
    }
    let sources = status::open(&status::Inputs {
        config: inputs.config.clone(),
        name: inputs.name.clone(),
        api_token_file: inputs.api_token_file.clone(),
    })?;
    let client = sources.gitlab.as_ref().expect("a token was given");
    let asked = question::parse(&inputs.job, inputs.project.as_deref(), client.base()).map_err(
        |sentence| {
            Error::bad_input(sentence).hint(format!(
                "JOB is a job's web URL at {} (GROUP/PROJECT/-/jobs/ID), or its id with --project",
                client.base()
            ))
        },
    )?;
    let job = rest::job(client, &asked.project, asked.job)
        .await
        .map_err(|e| {
            not_found(
                e,
                format!(
                    "GitLab {} has no job {} in project {} (404)",
                    client.base(),
                    asked.job,
                    asked.project
                ),
            )
        })?;
    let runner_id = status::runner_id(&sources)?;
    let runner = rest::runner(client, runner_id).await?;
    let ref_protected = protected(&sources, &runner, &job).await?;
    let cluster = status::cluster::read(&sources.view, now).await?;
    let concurrency = Concurrency::of(&sources.view, &cluster.pods);
    let (verdict, reasons) = plan::plan(&Facts {
        job: &job,
        runner: &runner,
        ref_protected,
        concurrency: &concurrency,
        pods: &cluster.pods,
        warm: cluster.warm,
        service: SERVICE,
    });
    let pod = cluster.pods.iter().find(|p| p.job.id == job.id).cloned();
    Ok(Explanation {
        version: VIEW_VERSION,
        runner: sources.view.name.clone(),
        runner_id,
        job,
        verdict,
        reasons,
        pod,
        concurrency,
    })
}

/// Whether the job's branch is protected, asked only of a runner that takes protected refs
/// only; a tag's protection is not looked up (`None`: no reason is given for it).
async fn protected(
    sources: &Sources,
    runner: &rest::RunnerDetails,
    job: &JobDetails,
) -> Result<Option<bool>> {
    let client = sources.gitlab.as_ref().expect("a token was given");
    if runner.access_level != "ref_protected" || job.tag {
        return Ok(None);
    }
    let list = rest::protected_branches(client, job.pipeline.project_id).await?;
    Ok(Some(rest::is_protected(&job.git_ref, &list)))
}

/// `runner explain`'s text (pure): the job, the verdict, each reason with its fix, the Pod's
/// Events.
pub fn render(e: &Explanation) -> String {
    let j = &e.job;
    let tags = if j.tag_list.is_empty() {
        "no tags".to_string()
    } else {
        format!("tags {}", j.tag_list.join(","))
    };
    let queued = j.queued_duration.map_or_else(
        || "-".into(),
        |s| tenantci_core::kubectl_text::age(s as u64),
    );
    let went_to = j
        .runner
        .as_ref()
        .map_or_else(|| "no runner yet".into(), |r| format!("runner {}", r.id));
    let mut out = format!(
        "job {} ({}) on {}: {}, {tags}, queued {queued}, {went_to}\n  {}\n",
        j.id, j.name, j.git_ref, j.status, j.web_url
    );
    let verdict = match e.verdict {
        Verdict::Finished => "it has finished".to_string(),
        Verdict::Runs => format!("it runs on runner {} (entry {})", e.runner_id, e.runner),
        Verdict::Elsewhere => "another runner took it".to_string(),
        Verdict::WillRun => format!(
            "it will run: nothing holds it from runner {} (entry {}), which takes it at its next request",
            e.runner_id, e.runner
        ),
        Verdict::Waits => format!("it waits, for runner {} (entry {}):", e.runner_id, e.runner),
    };
    out.push_str(&verdict);
    out.push('\n');
    for r in &e.reasons {
        out.push_str(&format!("  {}: {}\n    fix: {}\n", r.kind, r.line, r.fix));
        if r.kind == "pod-pending" {
            for line in e.pod.iter().flat_map(|p| &p.events) {
                out.push_str(&format!("    event: {line}\n"));
            }
        }
    }
    out
}
