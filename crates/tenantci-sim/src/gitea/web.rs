//! The Gitea double's web side: what a job reaches on Gitea beyond the RunnerService, so the
//! executor-proxy's passthrough is tested against the real wire protocols.
//!
//! - `git` over smart HTTP, served by the real `git http-backend` (CGI) from the repositories
//!   under a root the test sets (`POST /admin/web/git-root`); `owner/repo` and `owner/repo.git`
//!   both work, as at Gitea. Authenticated as Gitea authenticates a job's checkout: HTTP basic
//!   with a live task's token as the password.
//! - `/api/v1/repos/{owner}/{repo}`: the API with the job's token (`Authorization: token T` or
//!   `Bearer T`), 401 without one.
//! - `/api/actions_pipeline/...`: an artifact sink. Any method; the body is hashed as it
//!   streams (never held whole) and the answer says its length and SHA-256.
//! - Absolute URLs and redirects, as Gitea hands them out: artifact v4's
//!   `/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact` (runtime token)
//!   answers a signed `UploadArtifact` URL, and the API's artifact download
//!   (`/api/v1/repos/{owner}/{repo}/actions/artifacts/{id}/zip`, job token) answers 302 to a
//!   signed `.../zip/raw` URL. Both URLs are absolute, on the address the request named in its
//!   `Host` (how Gitea guesses its own URL when no proxy header says otherwise), and are served
//!   with the signature alone, no token, as at Gitea.
//! - `GET /admin/web/requests`: every web request's method, path and header names, so a test
//!   can show what reached "Gitea" (no `x-runner-*`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::GiteaDouble;
use super::wire::presented_token;

/// One web request as it reached the double.
#[derive(Clone, Debug, Serialize)]
pub struct SeenRequest {
    /// The HTTP method.
    pub method: String,
    /// The URL path.
    pub path: String,
    /// The names of the headers it carried (names only, no values).
    pub headers: Vec<String>,
}

/// The web side's state.
#[derive(Default)]
pub struct Web {
    git_root: Mutex<Option<PathBuf>>,
    seen: Mutex<Vec<SeenRequest>>,
    /// Signatures handed out in signed URLs.
    signed: Mutex<BTreeSet<String>>,
}

/// Artifact v4's twirp service, at Gitea's root.
pub const ARTIFACT_V4: &str = "/twirp/github.actions.results.api.v1.ArtifactService";

type Double = State<Arc<GiteaDouble>>;

/// The web routes and their admin routes.
pub fn router(double: Arc<GiteaDouble>) -> Router {
    let web = Router::new()
        .route("/api/v1/repos/{owner}/{repo}", get(repository))
        .route("/api/actions_pipeline/{*rest}", any(artifact_sink))
        .route(
            "/api/v1/repos/{owner}/{repo}/actions/artifacts/{id}/zip",
            get(artifact_zip),
        )
        .route(
            "/api/v1/repos/{owner}/{repo}/actions/artifacts/{id}/zip/raw",
            get(artifact_zip_raw),
        )
        .route(
            &format!("{ARTIFACT_V4}/CreateArtifact"),
            post(create_artifact),
        )
        .route(
            &format!("{ARTIFACT_V4}/UploadArtifact"),
            put(upload_artifact),
        )
        .route("/{owner}/{repo}/info/refs", get(git))
        .route("/{owner}/{repo}/git-upload-pack", post(git))
        .layer(middleware::from_fn_with_state(double.clone(), record));
    let admin = Router::new()
        .route("/admin/web/git-root", post(set_git_root))
        .route("/admin/web/requests", get(seen));
    web.merge(admin).with_state(double)
}

async fn record(State(d): Double, req: Request, next: Next) -> Response {
    let seen = SeenRequest {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        headers: req.headers().keys().map(|k| k.to_string()).collect(),
    };
    d.web
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(seen);
    next.run(req).await
}

#[derive(Deserialize)]
struct GitRoot {
    path: PathBuf,
}

async fn set_git_root(State(d): Double, Json(root): Json<GitRoot>) -> Response {
    *d.web.git_root.lock().unwrap_or_else(|p| p.into_inner()) = Some(root.path);
    StatusCode::NO_CONTENT.into_response()
}

async fn seen(State(d): Double) -> Response {
    Json(d.web.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()).into_response()
}

fn unauthorized(why: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"Gitea\"")],
        Json(serde_json::json!({"message": why})),
    )
        .into_response()
}

fn authorized(d: &GiteaDouble, headers: &HeaderMap) -> bool {
    presented_token(headers).is_some_and(|t| d.is_live_job_token(&t))
}

async fn repository(
    State(d): Double,
    axum::extract::Path((owner, repo)): axum::extract::Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&d, &headers) {
        return unauthorized("a live job's token is required");
    }
    Json(serde_json::json!({"full_name": format!("{owner}/{repo}"), "private": true}))
        .into_response()
}

/// Hashes the body as it arrives.
async fn artifact_sink(State(d): Double, req: Request) -> Response {
    if !authorized(&d, req.headers()) {
        return unauthorized("a live job's runtime token is required");
    }
    hashed(req).await
}

/// The body's length and SHA-256, read as it streams.
async fn hashed(req: Request) -> Response {
    let mut stream = req.into_body().into_data_stream();
    let (mut hash, mut bytes) = (Sha256::new(), 0u64);
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                bytes += c.len() as u64;
                hash.update(&c);
            }
            Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        }
    }
    Json(serde_json::json!({"bytes": bytes, "sha256": hex::encode(hash.finalize())}))
        .into_response()
}

/// A new signed URL for `path` on the address the request named (`Host`), as Gitea builds
/// its signed URLs from the URL it guesses for itself.
fn signed_url(d: &GiteaDouble, headers: &HeaderMap, path: &str) -> String {
    let sig = tenantci_core::uuid::v4();
    d.web
        .signed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(sig.clone());
    let host = header_str(headers, header::HOST);
    format!("http://{host}{path}?sig={sig}")
}

/// Whether the query's `sig` is one the double handed out.
fn signature_ok(d: &GiteaDouble, query: Option<&str>) -> bool {
    let sig = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("sig="));
    sig.is_some_and(|s| {
        d.web
            .signed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(s)
    })
}

fn bad_signature() -> Response {
    (StatusCode::UNAUTHORIZED, "Error unauthorized").into_response()
}

/// Artifact v4's CreateArtifact: the signed URL the toolkit then uploads to, directly.
async fn create_artifact(State(d): Double, headers: HeaderMap) -> Response {
    if !authorized(&d, &headers) {
        return unauthorized("a live job's runtime token is required");
    }
    let url = signed_url(&d, &headers, &format!("{ARTIFACT_V4}/UploadArtifact"));
    Json(serde_json::json!({"ok": true, "signedUploadUrl": url})).into_response()
}

/// Artifact v4's upload to a signed URL: no token, the signature is the credential.
async fn upload_artifact(State(d): Double, req: Request) -> Response {
    if !signature_ok(&d, req.uri().query()) {
        return bad_signature();
    }
    hashed(req).await
}

/// The API's artifact download: a redirect to a signed URL.
async fn artifact_zip(State(d): Double, req: Request) -> Response {
    if !authorized(&d, req.headers()) {
        return unauthorized("a live job's token is required");
    }
    let raw = format!("{}/raw", req.uri().path());
    let url = signed_url(&d, req.headers(), &raw);
    (StatusCode::FOUND, [(header::LOCATION, url)]).into_response()
}

/// The signed download itself.
async fn artifact_zip_raw(State(d): Double, req: Request) -> Response {
    if !signature_ok(&d, req.uri().query()) {
        return bad_signature();
    }
    format!("the bytes of {}", req.uri().path()).into_response()
}

/// `git http-backend` for one request (CGI: the request in the environment and on stdin, the
/// answer's headers then body on stdout).
async fn git(State(d): Double, req: Request) -> Response {
    if !authorized(&d, req.headers()) {
        return unauthorized("a live job's token is required to clone");
    }
    let Some(root) = d
        .web
        .git_root
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return (
            StatusCode::NOT_FOUND,
            "no repositories (POST /admin/web/git-root)",
        )
            .into_response();
    };
    let (parts, body) = req.into_parts();
    // `owner/repo/...` and `owner/repo.git/...` are the same repository, `owner/repo.git`.
    let mut segments: Vec<&str> = parts
        .uri
        .path()
        .trim_start_matches('/')
        .splitn(3, '/')
        .collect();
    if segments.len() < 3 {
        return StatusCode::NOT_FOUND.into_response();
    }
    let repo = format!("{}.git", segments[1].trim_end_matches(".git"));
    segments[1] = &repo;
    let path_info = format!("/{}", segments.join("/"));
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", &path_info)
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env(
            "CONTENT_TYPE",
            header_str(&parts.headers, header::CONTENT_TYPE),
        )
        .env(
            "HTTP_GIT_PROTOCOL",
            header_str(&parts.headers, "git-protocol"),
        )
        .env("REMOTE_USER", "job")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING) {
        cmd.env("HTTP_CONTENT_ENCODING", encoding.to_str().unwrap_or(""));
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let mut stdin = child.stdin.take().expect("piped");
    let feed = async move {
        let mut stream = body.into_data_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            if stdin.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let stdout = child.stdout.take().expect("piped");
    let (_, answer) = tokio::join!(feed, cgi_answer(stdout));
    let _ = child.wait().await;
    answer
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// A CGI answer: `Status:` and other headers, a blank line, the body.
async fn cgi_answer(stdout: tokio::process::ChildStdout) -> Response {
    let mut out = BufReader::new(stdout);
    let mut builder = Response::builder().status(StatusCode::OK);
    loop {
        let mut line = String::new();
        match out.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split(' ').next().and_then(|c| c.parse().ok());
            builder = builder.status(code.unwrap_or(500));
        } else {
            builder = builder.header(name, value);
        }
    }
    let mut body = Vec::new();
    let _ = out.read_to_end(&mut body).await;
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
