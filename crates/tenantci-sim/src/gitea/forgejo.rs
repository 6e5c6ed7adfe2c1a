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
//! - A FetchTask whose request key another call is still working on is refused with Connect
//!   code `internal` and "request key is currently locked; retry soon" (Forgejo holds a
//!   per-key lock for the whole call).
//! - Forgejo 14.0.0 and 14.0.1 (a version answer set with `POST /admin/version`) put every
//!   task of an answer in `additional_tasks` and leave `task` empty, as those releases could.
//!
//! The fault switch `POST /admin/drop-fetch {"count": N}` makes the next N FetchTask answers
//! that assign tasks never reach the runner: the tasks stay claimed (and, with a key,
//! recorded), and the runner gets `unavailable` instead, as from a proxy whose upstream
//! connection broke after the forge had answered. With `"while_working": true` the connection
//! breaks while Forgejo is still working on the call: its key stays locked until a repeat of it
//! has been refused as locked, and only the call after that gets the tasks back. That order
//! (lost, refused as locked, recovered) is the one the request key exists for.
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
use tenantci_core::forge::gitea::ConnectError;
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

/// Whether Forgejo's answer under `version` leaves `task` empty and puts every task in
/// `additional_tasks` (pure): Forgejo 14.0.0 and 14.0.1 could; forgejo-runner treats a task in
/// either field as assigned.
pub fn first_task_left_out(version: &str) -> bool {
    ["14.0.0", "14.0.1"]
        .iter()
        .any(|v| version == *v || version.starts_with(&format!("{v}+")))
}

/// How an answer is lost (`POST /admin/drop-fetch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// After Forgejo answered: the key is free, its next use recovers the tasks.
    Answered,
    /// While Forgejo still works on the call: the key stays locked until a repeat is refused.
    WhileWorking,
}

/// A request key some call holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyLock {
    /// A call with the key is in progress.
    InCall,
    /// The call's answer was lost while it still worked; it ends as a repeat is refused.
    UntilRefused,
}

#[derive(Default)]
struct Inner {
    /// (runner, request key) -> the tasks that key's answer assigned.
    by_key: BTreeMap<(i64, String), Vec<Task>>,
    locked: BTreeMap<(i64, String), KeyLock>,
    drop_next: u64,
    drop_while_working: u64,
    dropped: u64,
    recovered: u64,
    refused_locked: u64,
}

/// The Forgejo-only counters `GET /admin/stats` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Answers lost on their way back (`take_drop`).
    pub answers_dropped: u64,
    /// Tasks an answer under a known request key handed out again (`recover`).
    pub tasks_recovered: u64,
    /// Calls refused because another call held their key (`enter`).
    pub refused_locked: u64,
}

/// Forgejo's answer to a key another call holds.
pub const KEY_LOCKED: &str = "request key is currently locked; retry soon";

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

    /// Drops the next `count` answers that assign tasks, in the way `how` says.
    pub fn drop_next(&self, count: u64, how: Drop) {
        let mut g = self.lock();
        let n = match how {
            Drop::Answered => &mut g.drop_next,
            Drop::WhileWorking => &mut g.drop_while_working,
        };
        *n = n.saturating_add(count);
    }

    /// Whether this answer (assigning tasks) is to be lost on its way back, and how.
    pub fn take_drop(&self) -> Option<Drop> {
        let mut g = self.lock();
        let how = if g.drop_while_working > 0 {
            g.drop_while_working -= 1;
            Drop::WhileWorking
        } else if g.drop_next > 0 {
            g.drop_next -= 1;
            Drop::Answered
        } else {
            return None;
        };
        g.dropped += 1;
        Some(how)
    }

    /// A call with `key` begins: Err (Forgejo's `internal` answer) while another holds it. A
    /// call whose answer was lost while it still worked ends as this refusal goes out.
    pub fn enter(&self, runner: i64, key: &str) -> Result<(), ConnectError> {
        let mut g = self.lock();
        let id = (runner, key.to_string());
        match g.locked.get(&id).copied() {
            None => {
                g.locked.insert(id, KeyLock::InCall);
                Ok(())
            }
            Some(held) => {
                if held == KeyLock::UntilRefused {
                    g.locked.remove(&id);
                }
                g.refused_locked += 1;
                Err(ConnectError::internal(KEY_LOCKED))
            }
        }
    }

    /// The call with `key` has answered (or its answer was lost after it ended).
    pub fn leave(&self, runner: i64, key: &str) {
        let mut g = self.lock();
        let id = (runner, key.to_string());
        if g.locked.get(&id) == Some(&KeyLock::InCall) {
            g.locked.remove(&id);
        }
    }

    /// The call with `key` lost its answer while it still works: the key stays locked until a
    /// repeat has been refused.
    pub fn still_working(&self, runner: i64, key: &str) {
        self.lock()
            .locked
            .insert((runner, key.to_string()), KeyLock::UntilRefused);
    }

    /// The counters so far.
    pub fn counts(&self) -> Counts {
        let g = self.lock();
        Counts {
            answers_dropped: g.dropped,
            tasks_recovered: g.recovered,
            refused_locked: g.refused_locked,
        }
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
        assert_eq!(s.take_drop(), None);
        s.drop_next(1, Drop::Answered);
        s.drop_next(1, Drop::WhileWorking);
        assert_eq!(s.take_drop(), Some(Drop::WhileWorking));
        assert_eq!(s.take_drop(), Some(Drop::Answered));
        assert_eq!(s.take_drop(), None);
        let c = s.counts();
        assert_eq!((c.answers_dropped, c.tasks_recovered), (2, 1));
    }

    #[test]
    fn a_key_in_use_is_refused_as_forgejo_refuses_it() {
        let s = ForgejoState::default();
        s.enter(1, "k").unwrap();
        let e = s.enter(1, "k").unwrap_err();
        assert_eq!(e.message, KEY_LOCKED);
        assert_eq!(e.code, tenantci_core::forge::gitea::Code::Internal);
        s.enter(2, "k").expect("keys are per runner");
        s.leave(1, "k");
        s.enter(1, "k").expect("free again once the call answered");
    }

    #[test]
    fn a_call_lost_while_working_holds_its_key_until_one_repeat_is_refused() {
        let s = ForgejoState::default();
        s.enter(1, "k").unwrap();
        s.still_working(1, "k");
        s.leave(1, "k");
        assert!(s.enter(1, "k").is_err(), "the lost call still works");
        s.enter(1, "k").expect("and has ended by the next repeat");
        assert_eq!(s.counts().refused_locked, 1);
    }

    #[test]
    fn only_forgejo_14_0_0_and_14_0_1_leave_the_first_task_out() {
        for v in ["14.0.0", "14.0.1+gitea-1.22.0", "14.0.0+gitea-1.22.0"] {
            assert!(first_task_left_out(v), "{v}");
        }
        for v in [
            "14.0.2+gitea-1.22.0",
            "11.0.1+gitea-1.22.0",
            "14.0.10",
            "1.24.3",
        ] {
            assert!(!first_task_left_out(v), "{v}");
        }
    }
}
