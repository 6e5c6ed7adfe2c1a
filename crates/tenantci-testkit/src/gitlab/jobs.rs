//! What an operator's read-only view of a runner needs, as GitLab's REST API answers it:
//! `GET /runners/:id` (the runner's details: paused, tags, run-untagged, locked, access level,
//! maximum timeout, projects, status and last contact), `GET /runners/:id/managers` (GitLab
//! 16+: each manager's version and last contact), `GET /runners/:id/jobs` (`status` filter),
//! `GET /projects/:id/jobs/:job_id` (status, tags, the runner it went to, queued duration,
//! `web_url`), `GET /projects/:id/protected_branches` and `/:name`. Every read takes an access
//! token with `read_api` or `api` (401 for an unknown token, 403 `insufficient_scope` for one
//! without); a project is its numeric id or its URL-encoded path, as GitLab accepts both.
//!
//! A runner's contact is what gitlab-runner's job request leaves behind
//! (`POST /api/v4/jobs/request` with the runner token and `system_id`: the manager's last
//! contact and version; answered 204, no job), so a test plays gitlab-runner by asking.
//! Online means a contact in the last 2 hours, stale none for 7 days, as GitLab decides.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::list::refuse_scope;
use super::{CreatedRunner, GitlabState, Shared, error};

/// The scopes GitLab's read endpoints accept.
const READ_SCOPES: &[&str] = &["api", "read_api"];

/// A runner manager: one gitlab-runner process (its `system_id`) that asked for jobs.
#[derive(Debug, Clone)]
pub struct Manager {
    /// gitlab-runner's `system_id` (`s_` and 12 hex digits).
    pub system_id: String,
    /// The version gitlab-runner reported.
    pub version: String,
    /// Its first request.
    pub created_at: OffsetDateTime,
    /// Its last request.
    pub contacted_at: OffsetDateTime,
}

/// A CI job as GitLab keeps it.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job's id (unique in the instance).
    pub id: u64,
    /// Its project's id.
    pub project_id: u64,
    /// The job's name (`build`).
    pub name: String,
    /// The branch or tag it runs for.
    pub git_ref: String,
    /// Whether `git_ref` is a tag.
    pub tag: bool,
    /// The commit.
    pub sha: String,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `manual`, ...
    pub status: String,
    /// The job's `tags:`.
    pub tag_list: Vec<String>,
    /// The runner it went to; `None` while pending.
    pub runner_id: Option<u64>,
    /// When it was queued.
    pub created_at: OffsetDateTime,
    /// When a runner picked it; `None` while pending.
    pub started_at: Option<OffsetDateTime>,
}

impl Job {
    /// A pending job of `project` for branch `git_ref` with `tags`, queued now.
    pub fn pending(id: u64, project_id: u64, name: &str, git_ref: &str, tags: &[&str]) -> Job {
        Job {
            id,
            project_id,
            name: name.into(),
            git_ref: git_ref.into(),
            tag: false,
            sha: format!("{id:040x}"),
            status: "pending".into(),
            tag_list: tags.iter().map(|t| t.to_string()).collect(),
            runner_id: None,
            created_at: OffsetDateTime::now_utc(),
            started_at: None,
        }
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// GitLab's runner status from its last contact (`online` within 2 hours; `stale` after 7 days
/// without, or never contacted and created more than 7 days ago: the double's runners are new).
fn status(r: &CreatedRunner) -> &'static str {
    let Some(last) = last_contact(r) else {
        return "never_contacted";
    };
    let age = OffsetDateTime::now_utc() - last;
    if age < time::Duration::hours(2) {
        "online"
    } else if age < time::Duration::days(7) {
        "offline"
    } else {
        "stale"
    }
}

fn last_contact(r: &CreatedRunner) -> Option<OffsetDateTime> {
    r.managers.iter().map(|m| m.contacted_at).max()
}

/// The fields of a runner in GitLab's lists.
pub(super) fn summary(r: &CreatedRunner) -> Value {
    let status = status(r);
    json!({
        "id": r.id,
        "description": r.description.clone().unwrap_or_default(),
        "ip_address": null,
        "active": !r.paused,
        "paused": r.paused,
        "is_shared": r.runner_type == "instance_type",
        "runner_type": r.runner_type,
        "name": null,
        "online": status == "online",
        "status": status,
    })
}

fn details(s: &GitlabState, r: &CreatedRunner) -> Value {
    let mut v = summary(r);
    let newest = r.managers.iter().max_by_key(|m| m.contacted_at);
    let projects: Vec<Value> = r
        .project_id
        .iter()
        .map(|id| {
            let path = s.project_paths.get(id).cloned().unwrap_or_default();
            json!({"id": id, "name": path.rsplit('/').next(), "path_with_namespace": path})
        })
        .collect();
    let extra = json!({
        "contacted_at": last_contact(r).map(rfc3339),
        "version": newest.map(|m| m.version.clone()),
        "revision": null, "platform": null, "architecture": null,
        "tag_list": r.tag_list,
        "run_untagged": r.run_untagged,
        "locked": r.locked,
        "maximum_timeout": r.maximum_timeout,
        "access_level": r.access_level,
        "maintenance_note": null,
        "projects": projects,
        "groups": [],
    });
    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
        v.extend(extra);
    }
    v
}

fn not_found(what: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        json!({"message": format!("404 {what} Not Found")}),
    )
}

/// Locks the state, records the request and checks the token's read scope.
fn read<'a>(
    state: &'a Shared,
    headers: &HeaderMap,
    path: String,
) -> Result<std::sync::MutexGuard<'a, GitlabState>, Box<Response>> {
    let mut s = state.lock().unwrap();
    s.requests.push(format!("GET {path}"));
    match refuse_scope(&s, headers, READ_SCOPES) {
        Some(refused) => Err(Box::new(refused)),
        None => Ok(s),
    }
}

/// `GET /api/v4/runners/:id`.
pub(super) async fn runner_details(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let s = match read(&state, &headers, format!("/api/v4/runners/{id}")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    match s.runners.iter().find(|r| r.id == id) {
        Some(r) => axum::Json(details(&s, r)).into_response(),
        None => not_found("Runner"),
    }
}

/// `GET /api/v4/runners/:id/managers`.
pub(super) async fn runner_managers(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let s = match read(&state, &headers, format!("/api/v4/runners/{id}/managers")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let Some(r) = s.runners.iter().find(|r| r.id == id) else {
        return not_found("Runner");
    };
    let now = OffsetDateTime::now_utc();
    let managers: Vec<Value> = r
        .managers
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let age: time::Duration = now - m.contacted_at;
            let online = age < time::Duration::hours(2);
            json!({
                "id": i + 1, "system_id": m.system_id, "version": m.version,
                "revision": null, "platform": "linux", "architecture": "amd64",
                "created_at": rfc3339(m.created_at), "contacted_at": rfc3339(m.contacted_at),
                "ip_address": "127.0.0.1", "status": if online { "online" } else { "offline" },
            })
        })
        .collect();
    axum::Json(managers).into_response()
}

#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct JobsQuery {
    status: Option<String>,
}

/// `GET /api/v4/runners/:id/jobs` (one page: the double's lists are short).
pub(super) async fn runner_jobs(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    Query(q): Query<JobsQuery>,
    headers: HeaderMap,
) -> Response {
    let s = match read(&state, &headers, format!("/api/v4/runners/{id}/jobs")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if !s.runners.iter().any(|r| r.id == id) {
        return not_found("Runner");
    }
    let jobs: Vec<Value> = s
        .jobs
        .iter()
        .filter(|j| j.runner_id == Some(id))
        .filter(|j| q.status.as_deref().is_none_or(|st| j.status == st))
        .map(|j| job_json(&s, j))
        .collect();
    (StatusCode::OK, [("x-next-page", "")], axum::Json(jobs)).into_response()
}

/// A project by numeric id or path (axum has decoded `%2F`).
fn project(s: &GitlabState, raw: &str) -> Option<u64> {
    match raw.parse::<u64>() {
        Ok(id) => s.projects.contains(&id).then_some(id),
        Err(_) => s
            .project_paths
            .iter()
            .find(|(_, path)| path.as_str() == raw)
            .map(|(id, _)| *id),
    }
}

fn job_json(s: &GitlabState, j: &Job) -> Value {
    let path = s
        .project_paths
        .get(&j.project_id)
        .cloned()
        .unwrap_or_default();
    let until = j.started_at.unwrap_or_else(OffsetDateTime::now_utc);
    let queued = (until - j.created_at).as_seconds_f64().max(0.0);
    let runner = j
        .runner_id
        .and_then(|id| s.runners.iter().find(|r| r.id == id))
        .map(summary);
    json!({
        "id": j.id, "status": j.status, "stage": "test", "name": j.name,
        "ref": j.git_ref, "tag": j.tag, "coverage": null, "allow_failure": false,
        "created_at": rfc3339(j.created_at), "started_at": j.started_at.map(rfc3339),
        "finished_at": null, "erased_at": null, "duration": null,
        "queued_duration": queued,
        "commit": {"id": j.sha, "short_id": &j.sha[..8.min(j.sha.len())]},
        "pipeline": {"id": j.id, "project_id": j.project_id, "ref": j.git_ref, "sha": j.sha, "status": j.status},
        "web_url": format!("{}/{path}/-/jobs/{}", s.base_url, j.id),
        "project": {"ci_job_token_scope_enabled": false},
        "artifacts": [], "runner": runner, "runner_manager": null,
        "tag_list": j.tag_list, "archived": false, "failure_reason": null,
    })
}

/// `GET /api/v4/projects/:id/jobs/:job_id`.
pub(super) async fn project_job(
    State(state): State<Shared>,
    Path((raw, job_id)): Path<(String, u64)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/api/v4/projects/{raw}/jobs/{job_id}");
    let s = match read(&state, &headers, path) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let Some(project) = project(&s, &raw) else {
        return not_found("Project");
    };
    match s
        .jobs
        .iter()
        .find(|j| j.id == job_id && j.project_id == project)
    {
        Some(j) => axum::Json(job_json(&s, j)).into_response(),
        None => not_found("Job"),
    }
}

fn protected_json(i: usize, name: &str) -> Value {
    let maintainers = json!([{"access_level": 40, "access_level_description": "Maintainers"}]);
    json!({
        "id": i + 1, "name": name, "push_access_levels": maintainers,
        "merge_access_levels": maintainers, "allow_force_push": false,
        "code_owner_approval_required": false,
    })
}

/// `GET /api/v4/projects/:id/protected_branches`.
pub(super) async fn protected_branches(
    State(state): State<Shared>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/api/v4/projects/{raw}/protected_branches");
    let s = match read(&state, &headers, path) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let Some(project) = project(&s, &raw) else {
        return not_found("Project");
    };
    let names = s
        .protected_branches
        .get(&project)
        .cloned()
        .unwrap_or_default();
    let list: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| protected_json(i, n))
        .collect();
    (StatusCode::OK, [("x-next-page", "")], axum::Json(list)).into_response()
}

/// `GET /api/v4/projects/:id/protected_branches/:name`: the protection named exactly so.
pub(super) async fn protected_branch(
    State(state): State<Shared>,
    Path((raw, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/api/v4/projects/{raw}/protected_branches/{name}");
    let s = match read(&state, &headers, path) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let Some(project) = project(&s, &raw) else {
        return not_found("Project");
    };
    let names = s
        .protected_branches
        .get(&project)
        .cloned()
        .unwrap_or_default();
    match names.iter().position(|n| *n == name) {
        Some(i) => axum::Json(protected_json(i, &name)).into_response(),
        None => not_found("Protected Branch"),
    }
}

/// `POST /api/v4/jobs/request`, gitlab-runner's poll: the manager's contact is recorded
/// (`system_id`, `info.version`); 403 for a token GitLab does not know; no job is handed out
/// (204).
pub(super) async fn request_job(State(state): State<Shared>, body: String) -> Response {
    let mut s = state.lock().unwrap();
    s.requests.push("POST /api/v4/jobs/request".into());
    let params: Value = serde_json::from_str(&body).unwrap_or_default();
    let token = params.get("token").and_then(Value::as_str).unwrap_or("");
    let system_id = params
        .get("system_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = params
        .pointer("/info/version")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(r) = s.runners.iter_mut().find(|r| r.token == token) else {
        return error(StatusCode::FORBIDDEN, json!({"message": "403 Forbidden"}));
    };
    let now = OffsetDateTime::now_utc();
    match r.managers.iter_mut().find(|m| m.system_id == system_id) {
        Some(m) => {
            m.contacted_at = now;
            m.version = version;
        }
        None => r.managers.push(Manager {
            system_id: system_id.to_string(),
            version,
            created_at: now,
            contacted_at: now,
        }),
    }
    StatusCode::NO_CONTENT.into_response()
}
