//! The Lifecycle API's HTTP surface over [`Sandboxes`](super::sandboxes::Sandboxes): routes at
//! the root and under `/v1`, the `OPEN-SANDBOX-API-KEY` header on every call but `/health`,
//! `{code, message}` errors, an `X-Request-ID` on every response, and the injected outage (a
//! status answered to every API call until a deadline). The admin routes (`/admin/...`, no key: a loopback test double)
//! show what the API hides (a sandbox's env, why it is gone) and inject faults.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::{MatchedPath, Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use super::OpenSandboxDouble;
use super::sandboxes::{ApiError, ListQuery};

/// The header that carries the API key.
pub const API_KEY_HEADER: &str = "OPEN-SANDBOX-API-KEY";
const REQUEST_ID: &str = "x-request-id";
const DEFAULT_PAGE_SIZE: usize = 20;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            Json(json!({"code": self.code, "message": self.message})),
        )
            .into_response()
    }
}

type Double = State<Arc<OpenSandboxDouble>>;

/// The double's routes: the Lifecycle API (behind the key check, under `/v1` and at the root), the
/// admin view and faults, and `/health`.
pub fn router(double: Arc<OpenSandboxDouble>) -> Router {
    let api = Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(read).delete(delete))
        .route(
            "/sandboxes/{id}/metadata",
            axum::routing::patch(patch_metadata),
        )
        .route("/sandboxes/{id}/renew-expiration", post(renew))
        .route_layer(middleware::from_fn_with_state(double.clone(), guard));
    let admin = Router::new()
        .route("/admin/sandboxes", get(admin_all))
        .route("/admin/sandboxes/{id}", get(admin_one))
        .route("/admin/sandboxes/{id}/fail", post(admin_fail))
        .route("/admin/faults", post(admin_fault).delete(admin_clear))
        .route("/admin/stats", get(admin_stats));
    Router::new()
        .route(
            "/health",
            get(|| async { Json(json!({"status": "healthy"})) }),
        )
        .merge(api.clone())
        .nest("/v1", api)
        .merge(admin)
        .with_state(double)
        .layer(middleware::from_fn(request_id))
}

/// Every response carries an `X-Request-ID`: the caller's, else a fresh one.
async fn request_id(req: Request, next: Next) -> Response {
    let id = req.headers().get(REQUEST_ID).cloned().unwrap_or_else(|| {
        HeaderValue::from_str(&format!("{:032x}", rand::random::<u128>()))
            .expect("hex is a header value")
    });
    let mut resp = next.run(req).await;
    resp.headers_mut().insert(REQUEST_ID, id);
    resp
}

/// The outage first (a proxy in front answers before the server checks anything), then the key.
async fn guard(State(d): Double, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_string(), |m| m.as_str().to_string());
    d.count_request(req.method().as_str(), &route);
    if let Some(fault) = d.outage(req.method().as_str()) {
        let status = fault.status;
        if let Some(body) = fault.body {
            let code = axum::http::StatusCode::from_u16(status)
                .unwrap_or(axum::http::StatusCode::SERVICE_UNAVAILABLE);
            return (
                code,
                [(axum::http::header::CONTENT_TYPE, "text/html")],
                body,
            )
                .into_response();
        }
        let (code, message) = match status {
            400 => ("INVALID_REQUEST", "the request is not valid (simulated)"),
            409 => ("CONFLICT", "the sandbox is changing (simulated)"),
            _ => (
                "SERVICE_UNAVAILABLE",
                "the sandbox service is unavailable (simulated)",
            ),
        };
        return ApiError::new(status, code, message).into_response();
    }
    let key = req.headers().get(API_KEY_HEADER).map(HeaderValue::as_bytes);
    match key {
        None => ApiError::new(
            401,
            "MISSING_API_KEY",
            format!("the {API_KEY_HEADER} header is required"),
        )
        .into_response(),
        Some(k) if !bool::from(k.ct_eq(d.api_key.as_bytes())) => {
            ApiError::new(401, "INVALID_API_KEY", "the API key is not valid").into_response()
        }
        Some(_) => next.run(req).await,
    }
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(400, "INVALID_REQUEST", format!("the body is not JSON: {e}")))
}

async fn create(State(d): Double, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let created = d.sandboxes().create(&body, d.boot, now())?;
    let location = format!(
        "/v1/sandboxes/{}",
        created["id"].as_str().unwrap_or_default()
    );
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert(axum::http::header::LOCATION, v);
    }
    Ok((StatusCode::ACCEPTED, headers, Json(created)).into_response())
}

async fn read(State(d): Double, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let t = now();
    Ok(Json(d.sandboxes().get(&id, t)?.to_api(t)))
}

async fn list(State(d): Double, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let q = parse_list_query(q.as_deref().unwrap_or(""))?;
    let page = d.sandboxes().list(&q, now());
    d.count_listed(page["items"].as_array().map_or(0, Vec::len));
    Ok(Json(page))
}

async fn patch_metadata(
    State(d): Double,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let patch = json_body(&body)?;
    Ok(Json(d.sandboxes().patch_metadata(&id, &patch, now())?))
}

async fn renew(
    State(d): Double,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body = json_body(&body)?;
    Ok(Json(d.sandboxes().renew(&id, &body, now())?))
}

async fn delete(State(d): Double, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    d.sandboxes().delete(&id, now())?;
    Ok(StatusCode::NO_CONTENT)
}

/// `state` repeatable, `metadata` one url-encoded `k=v&k2=v2`, `page` and `pageSize`.
pub fn parse_list_query(raw: &str) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        page: 1,
        page_size: DEFAULT_PAGE_SIZE,
        ..Default::default()
    };
    let number = |k: &str, v: &str| {
        v.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            ApiError::new(
                400,
                "INVALID_REQUEST",
                format!("{k} must be a positive integer"),
            )
        })
    };
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match k.as_ref() {
            "state" => q.states.push(v.into_owned()),
            "metadata" => q.metadata.extend(parse_metadata_filter(&v)?),
            "page" => q.page = number("page", &v)?,
            "pageSize" => q.page_size = number("pageSize", &v)?.min(200),
            _ => {}
        }
    }
    Ok(q)
}

fn parse_metadata_filter(v: &str) -> Result<Vec<(String, String)>, ApiError> {
    v.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ApiError::new(
                400,
                "INVALID_METADATA_FORMAT",
                format!("metadata filter `{pair}` is not key=value"),
            )),
        })
        .collect()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AllQuery {
    /// `id`: the live sandboxes' ids only (a player of a thousand executors polls this, not
    /// every env).
    fields: Option<String>,
}

async fn admin_all(State(d): Double, Query(q): Query<AllQuery>) -> Response {
    let all = d.sandboxes().all(now());
    match q.fields.as_deref() {
        None => Json(json!(all)).into_response(),
        Some("id") => Json(all.iter().map(|s| s.id.clone()).collect::<Vec<_>>()).into_response(),
        Some(other) => ApiError::new(
            400,
            "INVALID_REQUEST",
            format!("fields `{other}` is not known; the admin list takes `fields=id` or nothing"),
        )
        .into_response(),
    }
}

/// One sandbox with its env and entrypoint (how a test plays its executor), or why it is gone.
async fn admin_one(State(d): Double, Path(id): Path<String>) -> Response {
    let t = now();
    let mut s = d.sandboxes();
    match s.get(&id, t) {
        Ok(rec) => {
            let mut v = json!(rec);
            v["state"] = rec.state(t).into();
            Json(v).into_response()
        }
        Err(e) => match s.gone(&id) {
            Some(g) => (StatusCode::NOT_FOUND, Json(json!({"id": id, "gone": g}))).into_response(),
            None => e.into_response(),
        },
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FailBody {
    reason: Option<String>,
    message: Option<String>,
}

async fn admin_fail(
    State(d): Double,
    Path(id): Path<String>,
    body: Option<Json<FailBody>>,
) -> Result<StatusCode, ApiError> {
    let Json(b) = body.unwrap_or_default();
    d.sandboxes().fail(&id, b.reason, b.message, now())?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct FaultBody {
    status: u16,
    seconds: f64,
    /// Only calls of these methods fail (e.g. `["POST"]`: creates); absent: every call.
    #[serde(default)]
    methods: Vec<String>,
    /// Answer this (as `text/html`, may be empty) instead of the API's JSON error: what a
    /// proxy in front of the API says.
    #[serde(default)]
    body: Option<String>,
}

/// Every API call (or those of `methods`) answers `status` for `seconds` from now.
async fn admin_fault(State(d): Double, Json(b): Json<FaultBody>) -> Result<StatusCode, ApiError> {
    let status_ok = (500..=599).contains(&b.status) || matches!(b.status, 400 | 409);
    if !status_ok || !b.seconds.is_finite() || b.seconds < 0.0 {
        return Err(ApiError::new(
            400,
            "INVALID_REQUEST",
            "a fault is a 5xx, 409 or 400 status for a non-negative number of seconds",
        ));
    }
    let methods = b.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    d.set_outage(
        b.status,
        Duration::from_secs_f64(b.seconds),
        methods,
        b.body,
    );
    Ok(StatusCode::NO_CONTENT)
}

async fn admin_clear(State(d): Double) -> StatusCode {
    d.set_outage(503, Duration::ZERO, Vec::new(), None);
    StatusCode::NO_CONTENT
}

async fn admin_stats(State(d): Double) -> Json<Value> {
    let mut v = json!(d.sandboxes().stats(now()));
    v["requests"] = d.requests().into();
    v["calls"] = json!(d.calls());
    v["listed"] = d.listed().into();
    v["connections"] = d.connections().into();
    Json(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_repeats_states_and_decodes_metadata_once() {
        let q = parse_list_query("state=Running&state=Pending&metadata=tenantci.io%2Ftask-id%3D12%26a%3Db&page=2&pageSize=5").unwrap();
        assert_eq!(q.states, ["Running", "Pending"]);
        assert_eq!(
            q.metadata.get("tenantci.io/task-id").map(String::as_str),
            Some("12")
        );
        assert_eq!(q.metadata.get("a").map(String::as_str), Some("b"));
        assert_eq!((q.page, q.page_size), (2, 5));
        assert_eq!(parse_list_query("").unwrap().page_size, DEFAULT_PAGE_SIZE);
        assert_eq!(
            parse_list_query("metadata=novalue").unwrap_err().code,
            "INVALID_METADATA_FORMAT"
        );
        assert_eq!(parse_list_query("page=0").unwrap_err().status, 400);
    }
}
