//! The runner lists and deletion, as GitLab answers them: `GET /groups/:id/runners`,
//! `GET /projects/:id/runners` (scope `api`, `read_api` or `manage_runner`), `GET /runners/all`
//! (`api` or `read_api`: `manage_runner` is not enough there) and `DELETE /runners/:id` (`api`
//! or `manage_runner`, 204; 404 for an unknown id). Lists filter by `type`, are paginated by
//! `page` and `per_page` (default 20, at most 100) and say the next page in `X-Next-Page`
//! (empty on the last one). An entry has GitLab's list fields; a runner's token never appears.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{CreatedRunner, GitlabState, Shared, access_token, error, insufficient_scope};

#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ListQuery {
    #[serde(rename = "type")]
    runner_type: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

/// None when the token has one of `scopes`; else GitLab's 401 or 403 insufficient_scope.
pub(super) fn refuse_scope(
    s: &GitlabState,
    headers: &HeaderMap,
    scopes: &[&str],
) -> Option<Response> {
    match access_token(headers).and_then(|t| s.access_tokens.get(&t)) {
        None => Some(error(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401 Unauthorized"}),
        )),
        Some(held) if !scopes.iter().any(|w| held.contains(*w)) => Some(insufficient_scope()),
        Some(_) => None,
    }
}

const LIST_SCOPES: &[&str] = &["api", "read_api", "manage_runner"];

pub(super) async fn group_runners(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let mut s = state.lock().unwrap();
    s.requests.push(format!("GET /api/v4/groups/{id}/runners"));
    if let Some(refused) = refuse_scope(&s, &headers, LIST_SCOPES) {
        return refused;
    }
    if !s.groups.contains(&id) {
        return error(
            StatusCode::NOT_FOUND,
            json!({"message": "404 Group Not Found"}),
        );
    }
    let of = |r: &CreatedRunner| r.group_id == Some(id);
    page(&s.runners, of, &q)
}

pub(super) async fn project_runners(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let mut s = state.lock().unwrap();
    s.requests
        .push(format!("GET /api/v4/projects/{id}/runners"));
    if let Some(refused) = refuse_scope(&s, &headers, LIST_SCOPES) {
        return refused;
    }
    if !s.projects.contains(&id) {
        return error(
            StatusCode::NOT_FOUND,
            json!({"message": "404 Project Not Found"}),
        );
    }
    // A project's list also shows the instance runners it may use, as GitLab's does.
    let of = |r: &CreatedRunner| r.project_id == Some(id) || r.runner_type == "instance_type";
    page(&s.runners, of, &q)
}

pub(super) async fn all_runners(
    State(state): State<Shared>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let mut s = state.lock().unwrap();
    s.requests.push("GET /api/v4/runners/all".into());
    if let Some(refused) = refuse_scope(&s, &headers, &["api", "read_api"]) {
        return refused;
    }
    page(&s.runners, |_| true, &q)
}

pub(super) async fn delete_runner(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let mut s = state.lock().unwrap();
    s.requests.push(format!("DELETE /api/v4/runners/{id}"));
    if let Some(refused) = refuse_scope(&s, &headers, &["api", "manage_runner"]) {
        return refused;
    }
    let before = s.runners.len();
    s.runners.retain(|r| r.id != id);
    if s.runners.len() == before {
        return error(
            StatusCode::NOT_FOUND,
            json!({"message": "404 Runner Not Found"}),
        );
    }
    StatusCode::NO_CONTENT.into_response()
}

/// One page of the runners `of` selects and `type` keeps, with GitLab's pagination headers.
fn page(runners: &[CreatedRunner], of: impl Fn(&CreatedRunner) -> bool, q: &ListQuery) -> Response {
    let number = |v: &Option<String>, default: usize| {
        v.as_deref()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    };
    let per_page = number(&q.per_page, 20).min(100);
    let page = number(&q.page, 1);
    let selected: Vec<&CreatedRunner> = runners
        .iter()
        .filter(|r| of(r))
        .filter(|r| q.runner_type.as_deref().is_none_or(|t| r.runner_type == t))
        .collect();
    let start = (page - 1).saturating_mul(per_page);
    let body: Vec<Value> = selected
        .iter()
        .skip(start)
        .take(per_page)
        .map(|r| entry(r))
        .collect();
    let next = if start.saturating_add(per_page) < selected.len() {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let headers = [
        ("x-next-page", next),
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-total", selected.len().to_string()),
    ];
    (StatusCode::OK, headers, axum::Json(body)).into_response()
}

/// GitLab's list entry of a runner.
fn entry(r: &CreatedRunner) -> Value {
    super::jobs::summary(r)
}
