//! What the Gitea double does differently when it plays Forgejo (`tenantci sim --gitea
//! --forgejo`), kept as Forgejo's server does it (docs/forgejo-protocol.md):
//!
//! - `GET /api/v1/version` answers Forgejo's own version with the Gitea version it is
//!   compatible with (`11.0.1+gitea-1.22.0`); Gitea answers a plain `1.24.3`.
//! - FetchTask picks up to `task_capacity` tasks (at least one) when the caller's tasks version
//!   differs: the first in `task`, the rest in `additional_tasks`.
//! - `x-runner-request-key`: the tasks an answer assigns are recorded under the caller and its
//!   key; a FetchTask repeated with the same key gets the same tasks back (with fresh job
//!   tokens, since Forgejo keeps only their hashes) and claims nothing new.
//!
//! The fault switch `POST /admin/drop-fetch {"count": N}` makes the next N FetchTask answers
//! that assign tasks never reach the runner: the tasks stay claimed (and, with a key,
//! recorded), and the runner gets `unavailable` instead, as from a proxy whose upstream
//! connection broke after the forge had answered.
//!
//! The waiting-jobs API, `GET /api/v1/{admin|user|orgs/{org}|repos/{owner}/{repo}}/actions/runners/jobs`
//! with `Authorization: token <api token>` (Forgejo also takes `Bearer`): the waiting and
//! running jobs as Forgejo's `ActionRunJob` rows (`null` when none), filtered by `?labels=a,b`
//! as Forgejo filters (a job whose runs-on labels are all among them). The double has no
//! scopes, so every scope lists every job. A Gitea double answers 404 there.
//!
//! Never used in production paths.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use prost_types::value::Kind;
use serde::Deserialize;
use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::proto::Task;

use super::GiteaDouble;
use super::wire::{JobStatus, JobView, action_run_job, presented_token};

/// The version the double reports for `forge`.
pub fn version_of(forge: Forge) -> &'static str {
    match forge {
        Forge::Gitea => "1.24.3",
        Forge::Forgejo => "11.0.1+gitea-1.22.0",
    }
}

/// How many tasks one FetchTask may pick on `forge` (pure): Gitea one, Forgejo up to the
/// request's capacity (absent or below one: one, as Forgejo's server does).
pub fn pick_limit(forge: Forge, task_capacity: Option<i64>) -> usize {
    match forge {
        Forge::Gitea => 1,
        Forge::Forgejo => task_capacity.unwrap_or(1).clamp(1, 1024) as usize,
    }
}

#[derive(Default)]
struct Inner {
    /// (runner, request key) -> the tasks that key's answer assigned.
    by_key: BTreeMap<(i64, String), Vec<Task>>,
    drop_next: u64,
    dropped: u64,
    recovered: u64,
}

/// The Forgejo-only state of the double: request keys, and the dropped-answer switch.
#[derive(Default)]
pub struct ForgejoState {
    inner: Mutex<Inner>,
}

impl ForgejoState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tasks an earlier answer under `key` assigned to `runner`, tokens renewed.
    pub fn recover(&self, runner: i64, key: &str) -> Option<Vec<Task>> {
        let mut g = self.lock();
        let tasks = g.by_key.get(&(runner, key.to_string()))?.clone();
        g.recovered += tasks.len() as u64;
        Some(tasks.into_iter().map(renew_tokens).collect())
    }

    /// Records the tasks an answer under `key` assigns to `runner`.
    pub fn remember(&self, runner: i64, key: &str, tasks: &[Task]) {
        if !tasks.is_empty() {
            self.lock()
                .by_key
                .insert((runner, key.to_string()), tasks.to_vec());
        }
    }

    /// Drops the next `count` answers that assign tasks.
    pub fn drop_next(&self, count: u64) {
        self.lock().drop_next += count;
    }

    /// Whether this answer (assigning tasks) is to be lost on its way back.
    pub fn take_drop(&self) -> bool {
        let mut g = self.lock();
        if g.drop_next == 0 {
            return false;
        }
        g.drop_next -= 1;
        g.dropped += 1;
        true
    }

    /// (answers dropped, tasks recovered by key).
    pub fn counts(&self) -> (u64, u64) {
        let g = self.lock();
        (g.dropped, g.recovered)
    }
}

/// The waiting-jobs API's routes (every scope answers alike).
pub fn waiting_jobs_router() -> Router<Arc<GiteaDouble>> {
    const TAIL: &str = "actions/runners/jobs";
    Router::new()
        .route(&format!("/api/v1/admin/{TAIL}"), get(waiting_jobs))
        .route(&format!("/api/v1/user/{TAIL}"), get(waiting_jobs))
        .route(&format!("/api/v1/orgs/{{org}}/{TAIL}"), get(waiting_jobs))
        .route(
            &format!("/api/v1/repos/{{owner}}/{{repo}}/{TAIL}"),
            get(waiting_jobs),
        )
}

#[derive(Deserialize)]
struct JobsQuery {
    labels: Option<String>,
}

/// Forgejo's error body: `{"message": ...}`.
fn refused(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "message": message }))).into_response()
}

async fn waiting_jobs(
    State(d): State<Arc<GiteaDouble>>,
    headers: HeaderMap,
    Query(q): Query<JobsQuery>,
) -> Response {
    if d.forge() != Forge::Forgejo {
        return refused(StatusCode::NOT_FOUND, "Not Found");
    }
    match presented_token(&headers).as_deref() {
        None => return refused(StatusCode::UNAUTHORIZED, "token is required"),
        Some(t) if !d.is_api_token(t) => {
            return refused(StatusCode::UNAUTHORIZED, "user does not exist");
        }
        Some(_) => {}
    }
    let labels: Option<Vec<String>> = q
        .labels
        .map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
    let rows: Vec<serde_json::Value> = d
        .open_jobs()
        .iter()
        .filter(|j| match &labels {
            Some(ls) => j.runs_on.iter().all(|l| ls.contains(l)),
            None => true,
        })
        .map(job_row)
        .collect();
    // Forgejo's handler encodes a nil slice: `null` when nothing matched.
    if rows.is_empty() {
        return Json(serde_json::Value::Null).into_response();
    }
    Json(rows).into_response()
}

/// A job as Forgejo's `ActionRunJob`.
fn job_row(j: &JobView) -> serde_json::Value {
    let status = if j.status == JobStatus::Waiting {
        "waiting"
    } else {
        "running"
    };
    action_run_job(j.id, &j.name, &j.runs_on, status, j.task_id.unwrap_or(0))
}

/// A recovered task with new job tokens: the old ones were never seen by the runner and
/// Forgejo cannot give them again (it stores hashes).
fn renew_tokens(mut task: Task) -> Task {
    if let Some(ctx) = task.context.as_mut() {
        for name in ["token", "gitea_runtime_token"] {
            if let Some(v) = ctx.fields.get_mut(name) {
                v.kind = Some(Kind::StringValue(crate::ids::uuid().replace('-', "")));
            }
        }
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitea_picks_one_and_forgejo_up_to_its_capacity() {
        assert_eq!(pick_limit(Forge::Gitea, Some(4)), 1);
        assert_eq!(pick_limit(Forge::Forgejo, Some(4)), 4);
        assert_eq!(pick_limit(Forge::Forgejo, None), 1);
        assert_eq!(pick_limit(Forge::Forgejo, Some(0)), 1);
        assert_eq!(
            Forge::detect(version_of(Forge::Forgejo)),
            Ok(Forge::Forgejo)
        );
        assert_eq!(Forge::detect(version_of(Forge::Gitea)), Ok(Forge::Gitea));
    }

    #[test]
    fn a_key_gets_its_tasks_back_once_recorded_and_drops_are_counted() {
        let s = ForgejoState::default();
        let t = Task {
            id: 7,
            ..Default::default()
        };
        assert!(s.recover(1, "k").is_none());
        s.remember(1, "k", std::slice::from_ref(&t));
        assert_eq!(s.recover(1, "k").unwrap()[0].id, 7);
        assert!(s.recover(2, "k").is_none(), "keys are per runner");
        assert!(!s.take_drop());
        s.drop_next(1);
        assert!(s.take_drop());
        assert!(!s.take_drop());
        assert_eq!(s.counts(), (1, 1));
    }
}
