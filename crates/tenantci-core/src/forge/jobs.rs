//! A job as the forge's REST API shows it, for `dispatch explain` (docs/gitea-protocol.md and
//! docs/forgejo-protocol.md have the sources and versions):
//!
//! - the run of a web URL's run number: `GET /api/v1/repos/{owner}/{repo}/actions/runs`,
//!   `{"workflow_runs": [...], "total_count": N}`, each run with its database `id` and its
//!   number (Gitea `run_number`, Forgejo `index_in_repo`). Forgejo filters by `run_number`;
//!   Gitea ignores that parameter, so its pages (newest first) are read until the run shows;
//! - that run's jobs: `GET /api/v1/repos/{owner}/{repo}/actions/runs/{id}/jobs`, Gitea
//!   `{"jobs": [...]}` with `labels`, `status` and `created_at`; Forgejo a bare array of
//!   `ActionRunJob` with `runs_on` and `status`, and no time (the run's `created` stands in).
//!
//! Pure here: paths, the answers' shapes and the job a URL's index names. The calls are
//! `RunnerClient::api_get`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Runs read per page while looking for a run number (Gitea's and Forgejo's page maximum).
pub const PAGE: u32 = 50;
/// Pages read before a run number counts as not found: the 1,000 newest runs.
pub const MAX_PAGES: u32 = 20;
/// The largest answer read.
pub const MAX_ANSWER: usize = 4 << 20;

/// A job as the forge reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForgeJob {
    /// The job's database id; a web URL's job index counts jobs in id order.
    pub id: i64,
    /// The job's name as the forge shows it; empty when the answer has none.
    pub name: String,
    /// The forge's own word: Gitea `queued`/`in_progress`/`completed`/..., Forgejo
    /// `waiting`/`running`/`success`/....
    pub status: String,
    /// The job's runs-on labels (Gitea `labels`, Forgejo `runs_on`).
    pub runs_on: Vec<String>,
    /// When the job (Gitea) or its run (Forgejo) was created.
    pub since: Option<DateTime<Utc>>,
}

impl ForgeJob {
    /// Whether the forge still waits for a runner to take it.
    pub fn waits(&self) -> bool {
        matches!(self.status.as_str(), "queued" | "waiting")
    }
}

/// A run as either forge lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    /// The run's database id, which the jobs path takes ([`jobs_path`]).
    pub id: i64,
    /// The run's number in its repository, as in its web URL (Forgejo `index_in_repo`).
    #[serde(alias = "index_in_repo")]
    pub run_number: i64,
    /// Forgejo's run creation time.
    #[serde(default)]
    pub created: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
struct Runs {
    // No default: an answer that is not an object (a bare array) is refused.
    workflow_runs: Option<Vec<Run>>,
}

/// `page` of the runs of `repository` (OWNER/NAME), asking for `run_number`.
pub fn runs_path(repository: &str, run_number: i64, page: u32) -> String {
    format!(
        "/api/v1/repos/{repository}/actions/runs?run_number={run_number}&page={page}&limit={PAGE}"
    )
}

/// The jobs of the run with database id `run_id`.
pub fn jobs_path(repository: &str, run_id: i64) -> String {
    format!("/api/v1/repos/{repository}/actions/runs/{run_id}/jobs")
}

/// A page of runs: the run numbered `run_number` if it is on it, and whether the page was
/// empty (no further page to read).
pub fn find_run(body: &[u8], run_number: i64) -> Result<(Option<Run>, bool), String> {
    let runs: Runs = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let runs = runs.workflow_runs.unwrap_or_default();
    let empty = runs.is_empty();
    Ok((runs.into_iter().find(|r| r.run_number == run_number), empty))
}

#[derive(Deserialize)]
struct AnyJob {
    id: i64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
    /// Gitea's name for the runs-on labels.
    #[serde(default)]
    labels: Option<Vec<String>>,
    /// Forgejo's.
    #[serde(default)]
    runs_on: Option<Vec<String>>,
    #[serde(default)]
    created_at: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Jobs {
    Gitea { jobs: Option<Vec<AnyJob>> },
    Forgejo(Option<Vec<AnyJob>>),
}

/// The jobs of a run, in id order (the order of a URL's job index), from either forge's
/// answer; `run` gives Forgejo's stand-in time.
pub fn parse_jobs(body: &[u8], run: &Run) -> Result<Vec<ForgeJob>, String> {
    let jobs = match serde_json::from_slice(body).map_err(|e| e.to_string())? {
        Jobs::Gitea { jobs } | Jobs::Forgejo(jobs) => jobs.unwrap_or_default(),
    };
    let mut jobs: Vec<ForgeJob> = jobs
        .into_iter()
        .map(|j| ForgeJob {
            id: j.id,
            name: j.name,
            status: j.status,
            runs_on: j.labels.or(j.runs_on).unwrap_or_default(),
            since: j.created_at.or(run.created),
        })
        .collect();
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_found_by_its_number_on_either_forge() {
        let gitea = br#"{"workflow_runs":[{"id":91,"run_number":12},{"id":90,"run_number":11}],"total_count":2}"#;
        let (run, empty) = find_run(gitea, 11).unwrap();
        assert_eq!((run.unwrap().id, empty), (90, false));
        let forgejo = br#"{"workflow_runs":[{"id":7,"index_in_repo":3,"created":"2026-12-04T10:00:00Z"}],"total_count":1}"#;
        let run = find_run(forgejo, 3).unwrap().0.unwrap();
        assert_eq!((run.id, run.created.is_some()), (7, true));
        assert!(
            find_run(br#"{"workflow_runs":[],"total_count":0}"#, 3)
                .unwrap()
                .1
        );
        assert!(find_run(b"[]", 3).is_err());
    }

    #[test]
    fn jobs_read_gitea_labels_and_forgejo_runs_on_in_id_order() {
        let run = Run {
            id: 7,
            run_number: 3,
            created: Some("2026-12-04T10:00:00Z".parse().unwrap()),
        };
        let gitea = br#"{"jobs":[{"id":5,"name":"b","status":"queued","labels":["x"],"created_at":"2026-12-04T11:00:00Z"},{"id":4,"name":"a","status":"completed","labels":[]}],"total_count":2}"#;
        let jobs = parse_jobs(gitea, &run).unwrap();
        assert_eq!(jobs[0].name, "a");
        assert_eq!(jobs[1].runs_on, vec!["x"]);
        assert!(jobs[1].waits() && !jobs[0].waits());
        assert_eq!(
            jobs[1].since.unwrap().to_rfc3339(),
            "2026-12-04T11:00:00+00:00"
        );
        let forgejo = br#"[{"id":9,"name":"c","status":"waiting","runs_on":["y"]}]"#;
        let jobs = parse_jobs(forgejo, &run).unwrap();
        assert_eq!(
            (jobs[0].runs_on.clone(), jobs[0].since),
            (vec!["y".into()], run.created)
        );
        assert!(parse_jobs(b"null", &run).unwrap().is_empty());
    }
}
