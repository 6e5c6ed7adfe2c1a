//! What more than one side of the Gitea double puts on or reads off the wire: a job's status
//! and view (the admin API, Forgejo's waiting-jobs rows), the token a request presents (the
//! web side, the waiting-jobs API) and Forgejo's `ActionRunJob` JSON (the waiting-jobs API,
//! Forgejo's webhooks). Kept here, below the double and its sides, so no side imports another.
//!
//! Imports nothing from the double. Never used in production paths.

use axum::http::{HeaderMap, header};
use base64::Engine;
use serde::Serialize;

/// Where a job is: waiting for a runner, running, done or cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Enqueued, no task yet.
    Waiting,
    /// Claimed: a task runs it.
    Running,
    /// Its task finished.
    Done,
    /// Cancelled through the admin API.
    Cancelled,
}

/// A job as the admin API and Forgejo's waiting-jobs rows show it.
#[derive(Clone, Debug, Serialize)]
pub struct JobView {
    /// The job's id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// The `runs-on` labels a runner must all carry.
    pub runs_on: Vec<String>,
    /// Where it is.
    pub status: JobStatus,
    /// The task running it, once claimed.
    pub task_id: Option<i64>,
    /// When the job was enqueued (microseconds; the pickup benchmark measures from here).
    pub created_at: String,
    /// Its repository (`owner/name`): the context's `repository`, else the double's one.
    pub repository: String,
    /// Its run's number: the context's `run_number`, else its id (each job its own run).
    pub run_number: i64,
}

/// The job token an `Authorization` header carries: `token T`, `Bearer T`, or basic auth with
/// T as the password (git's way).
pub(crate) fn presented_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    match scheme.to_ascii_lowercase().as_str() {
        "token" | "bearer" => Some(rest.trim().to_string()),
        "basic" => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()?;
            let text = String::from_utf8(raw).ok()?;
            Some(text.split_once(':')?.1.to_string())
        }
        _ => None,
    }
}

/// Forgejo's `ActionRunJob` JSON, as its waiting-jobs API lists it and its `workflow_job_*`
/// webhooks carry it under `job` (the double has one repository and one owner; a job's run
/// id is its id, and its handle a fixed UUID made from it).
pub fn action_run_job(
    id: i64,
    name: &str,
    runs_on: &[String],
    status: &str,
    task_id: i64,
) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "repo_id": 1,
        "owner_id": 1,
        "name": name,
        "needs": [],
        "runs_on": runs_on,
        "task_id": task_id,
        "status": status,
        "attempt": 1,
        "handle": format!("00000000-0000-4000-8000-{id:012x}"),
        "run_id": id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_token_bearer_and_basic_auth() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_token(&h), None);
        h.insert(header::AUTHORIZATION, "token abc".parse().unwrap());
        assert_eq!(presented_token(&h).as_deref(), Some("abc"));
        h.insert(header::AUTHORIZATION, "Bearer def".parse().unwrap());
        assert_eq!(presented_token(&h).as_deref(), Some("def"));
        let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:ghi");
        h.insert(
            header::AUTHORIZATION,
            format!("basic {basic}").parse().unwrap(),
        );
        assert_eq!(presented_token(&h).as_deref(), Some("ghi"));
    }
}
