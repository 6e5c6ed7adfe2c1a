//! The forges' runs API, as `dispatch explain` reads it (docs/gitea-protocol.md and
//! docs/forgejo-protocol.md have the sources): `GET /api/v1/repos/{owner}/{repo}/actions/runs`
//! and `.../actions/runs/{run}/jobs`, with the double's API token. Each job of the double is
//! its own run (run id = job id; its number the context's `run_number`, else its id).
//!
//! Gitea (1.25 on): runs newest first, paged, `run_number` ignored (Gitea has no such
//! filter), `{"workflow_runs", "total_count"}`; jobs `{"jobs", "total_count"}` with `labels`,
//! `status` (`queued`, `in_progress`, `completed`) and `created_at`. An older Gitea answers
//! 404, as the routes did not exist. Forgejo: runs filtered by `run_number`, with
//! `index_in_repo` and `created`; jobs a bare array of `ActionRunJob` (`runs_on`, `status`:
//! `waiting`, `running`, `success`, ...).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use tenantci_core::forge::Forge;

use super::GiteaDouble;
use super::wire::{JobStatus, JobView, action_run_job, presented_token};

pub fn router() -> Router<Arc<GiteaDouble>> {
    Router::new()
        .route("/api/v1/repos/{owner}/{repo}/actions/runs", get(runs))
        .route(
            "/api/v1/repos/{owner}/{repo}/actions/runs/{run}/jobs",
            get(jobs),
        )
}

#[derive(Deserialize)]
struct RunsQuery {
    run_number: Option<i64>,
    page: Option<usize>,
    limit: Option<usize>,
}

/// Gitea before 1.25 has no runs API.
fn has_runs_api(d: &GiteaDouble) -> bool {
    if d.forge() == Forge::Forgejo {
        return true;
    }
    let version = d.version();
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(major)), Some(Some(minor))) if (major, minor) >= (1, 25))
}

/// The refusal before any answer: no such API (404), no or a wrong token (401).
fn refused(d: &GiteaDouble, headers: &HeaderMap) -> Option<Response> {
    let message =
        |status, text: &str| Some((status, Json(json!({ "message": text }))).into_response());
    if !has_runs_api(d) {
        return message(StatusCode::NOT_FOUND, "Not Found");
    }
    match presented_token(headers) {
        None => message(StatusCode::UNAUTHORIZED, "token is required"),
        Some(t) if !d.is_api_token(&t) => message(StatusCode::UNAUTHORIZED, "user does not exist"),
        Some(_) => None,
    }
}

fn of_repository(d: &GiteaDouble, owner: &str, repo: &str) -> Vec<JobView> {
    let name = format!("{owner}/{repo}");
    d.all_jobs()
        .into_iter()
        .filter(|j| j.repository.eq_ignore_ascii_case(&name))
        .collect()
}

async fn runs(
    State(d): State<Arc<GiteaDouble>>,
    headers: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<RunsQuery>,
) -> Response {
    if let Some(r) = refused(&d, &headers) {
        return r;
    }
    let forgejo = d.forge() == Forge::Forgejo;
    let mut all = of_repository(&d, &owner, &repo);
    all.reverse();
    if forgejo && let Some(n) = q.run_number {
        all.retain(|j| j.run_number == n);
    }
    let total = all.len();
    let limit = q.limit.unwrap_or(30).clamp(1, 50);
    let skip = q
        .page
        .unwrap_or(1)
        .max(1)
        .saturating_sub(1)
        .saturating_mul(limit);
    let rows: Vec<Value> = all
        .iter()
        .skip(skip)
        .take(limit)
        .map(|j| match forgejo {
            true => json!({"id": j.id, "index_in_repo": j.run_number, "status": forgejo_status(&d, j), "created": j.created_at}),
            false => json!({"id": j.id, "run_number": j.run_number, "status": gitea_status(&d, j).0, "created_at": j.created_at}),
        })
        .collect();
    Json(json!({"workflow_runs": rows, "total_count": total})).into_response()
}

async fn jobs(
    State(d): State<Arc<GiteaDouble>>,
    headers: HeaderMap,
    Path((owner, repo, run)): Path<(String, String, i64)>,
) -> Response {
    if let Some(r) = refused(&d, &headers) {
        return r;
    }
    let Some(j) = of_repository(&d, &owner, &repo)
        .into_iter()
        .find(|j| j.id == run)
    else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "run not found"})),
        )
            .into_response();
    };
    if d.forge() == Forge::Forgejo {
        let row = action_run_job(
            j.id,
            &j.name,
            &j.runs_on,
            forgejo_status(&d, &j),
            j.task_id.unwrap_or(0),
        );
        return Json(json!([row])).into_response();
    }
    let (status, conclusion) = gitea_status(&d, &j);
    let row = json!({
        "id": j.id, "run_id": j.id, "name": j.name, "labels": j.runs_on,
        "status": status, "conclusion": conclusion, "created_at": j.created_at, "steps": [],
    });
    Json(json!({"jobs": [row], "total_count": 1})).into_response()
}

/// A finished job's result word (both forges use the same), from its task's result.
fn outcome(d: &GiteaDouble, j: &JobView) -> &'static str {
    if j.status == JobStatus::Cancelled {
        return "cancelled";
    }
    match j.task_id.and_then(|t| d.task(t)).map(|t| t.result) {
        Some("RESULT_SUCCESS") => "success",
        Some("RESULT_SKIPPED") => "skipped",
        Some("RESULT_CANCELLED") => "cancelled",
        _ => "failure",
    }
}

/// Gitea's `ToActionsStatus`: waiting is `queued`, running `in_progress`, done `completed`
/// with its conclusion.
fn gitea_status(d: &GiteaDouble, j: &JobView) -> (&'static str, Option<&'static str>) {
    match j.status {
        JobStatus::Waiting => ("queued", None),
        JobStatus::Running => ("in_progress", None),
        JobStatus::Done | JobStatus::Cancelled => ("completed", Some(outcome(d, j))),
    }
}

fn forgejo_status(d: &GiteaDouble, j: &JobView) -> &'static str {
    match j.status {
        JobStatus::Waiting => "waiting",
        JobStatus::Running => "running",
        JobStatus::Done | JobStatus::Cancelled => outcome(d, j),
    }
}
