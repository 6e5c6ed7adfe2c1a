//! A GitLab double for the runner REST API, for tests and the quickstart (never production).
//!
//! Speaks the real wire format of `POST /api/v4/user/runners`, `POST /api/v4/runners/verify`,
//! the legacy `POST /api/v4/runners` (always 410, as GitLab 17+ by default), the runner lists
//! (`GET /api/v4/groups/:id/runners`, `/projects/:id/runners`, `/runners/all`, paginated with
//! `page`/`per_page` and `X-Next-Page`), `DELETE /api/v4/runners/:id` and the token's own
//! record (`GET /api/v4/personal_access_tokens/self`, its scopes), and validates
//! as GitLab does: the `PRIVATE-TOKEN` (or `Authorization: Bearer`) header, the token's
//! `create_runner`/`api` scope, `runner_type` and the id it requires (group_id for
//! group_type, project_id for project_type), existing groups/projects. The read side an
//! operator's view needs (a runner's details, managers and jobs, a project's job and protected
//! branches, gitlab-runner's job request as its contact) is [`jobs`]'s. It can be told to
//! answer 401 / 403 / 410 or to hang, or to hold creations at a barrier
//! ([`GitlabDouble::hold_creates`]), and records created runners. Listens on 127.0.0.1:0,
//! over plain HTTP ([`GitlabDouble::start`]) or HTTPS with its own CA
//! ([`GitlabDouble::start_tls`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

/// What the double answers to runner creation, whatever the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// Validate and answer as GitLab does.
    #[default]
    Normal,
    /// 401 Unauthorized.
    Unauthorized,
    /// 403 insufficient_scope.
    Forbidden,
    /// 410 Gone "runner registration disallowed".
    Gone,
    /// Never answer.
    Hang,
}

/// A runner the double created.
#[derive(Debug, Clone)]
pub struct CreatedRunner {
    /// The runner's id: 1, 2, ... in creation order.
    pub id: u64,
    /// The runner authentication token the creation answered (`glrt-` and 20 characters).
    pub token: String,
    /// `instance_type`, `group_type` or `project_type`, as requested.
    pub runner_type: String,
    /// The request's `group_id`; `None` when it had none.
    pub group_id: Option<u64>,
    /// The request's `project_id`; `None` when it had none.
    pub project_id: Option<u64>,
    /// The request's `tag_list` (a JSON list, or a comma-separated string split and trimmed).
    pub tag_list: Vec<String>,
    /// The request's `run_untagged` (`true` or `"true"`; false when absent).
    pub run_untagged: bool,
    /// The request's `locked` (`true` or `"true"`; false when absent).
    pub locked: bool,
    /// The request's `description`; `None` when it had none.
    pub description: Option<String>,
    /// System ids that verified this runner's token.
    pub verified_by: Vec<String>,
    /// Whether the runner is paused (it takes no job); an admin's change ([`GitlabDouble::update_runner`]).
    pub paused: bool,
    /// `not_protected` or `ref_protected` (jobs of protected refs only).
    pub access_level: String,
    /// Seconds a job may run on it; `None` for no maximum.
    pub maximum_timeout: Option<u64>,
    /// The runner managers that asked for jobs (`POST /api/v4/jobs/request`), by system id.
    pub managers: Vec<jobs::Manager>,
}

/// What the double knows and has recorded; [`GitlabDouble::start_with`] starts from one.
#[derive(Debug, Default)]
pub struct GitlabState {
    /// Access token -> its scopes.
    pub access_tokens: BTreeMap<String, BTreeSet<String>>,
    /// Group ids that exist (runners may be created in them).
    pub groups: BTreeSet<u64>,
    /// Project ids that exist.
    pub projects: BTreeSet<u64>,
    /// How runner creation (and the token lookup) answers.
    pub behaviour: Behaviour,
    /// The runners created and not deleted, in creation order.
    pub runners: Vec<CreatedRunner>,
    /// Every request path seen, in order.
    pub requests: Vec<String>,
    /// When set, runner creations wait at this barrier ([`GitlabDouble::hold_creates`]).
    pub create_hold: Option<CreateHold>,
    /// CI jobs, as `GET /api/v4/projects/:id/jobs/:job_id` answers them ([`GitlabDouble::add_job`]).
    pub jobs: Vec<jobs::Job>,
    /// Project id -> its path (`group/project`), for job URLs and path-encoded ids.
    pub project_paths: BTreeMap<u64, String>,
    /// Project id -> its protected branch names (wildcards `*` allowed, as GitLab's).
    pub protected_branches: BTreeMap<u64, Vec<String>>,
    /// The double's own URL, for `web_url` (set at start).
    pub base_url: String,
    next_id: u64,
}

/// A running double; stops when dropped.
pub struct GitlabDouble {
    addr: SocketAddr,
    state: Arc<Mutex<GitlabState>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    tls: bool,
}

/// An access token the double accepts by default, with scope `create_runner`.
pub const DEFAULT_ACCESS_TOKEN: &str = "glpat-double-create-runner";
/// An access token the double knows with scope `read_api` only.
pub const READ_ONLY_ACCESS_TOKEN: &str = "glpat-double-read-api";
/// An access token with scopes `create_runner` and `manage_runner` (GitLab 17.1+): it may also
/// list group and project runners and delete runners, not list `/runners/all`.
pub const MANAGE_ACCESS_TOKEN: &str = "glpat-double-manage-runner";

fn default_state() -> GitlabState {
    let mut state = GitlabState::default();
    state.access_tokens.insert(
        DEFAULT_ACCESS_TOKEN.into(),
        ["create_runner".to_string()].into(),
    );
    state.access_tokens.insert(
        READ_ONLY_ACCESS_TOKEN.into(),
        ["read_api".to_string()].into(),
    );
    state.access_tokens.insert(
        MANAGE_ACCESS_TOKEN.into(),
        ["create_runner".to_string(), "manage_runner".to_string()].into(),
    );
    state.groups.insert(7);
    state.projects.insert(42);
    state.project_paths.insert(42, "tenant/app".into());
    state
}

impl GitlabDouble {
    /// Starts on 127.0.0.1:0 with [`DEFAULT_ACCESS_TOKEN`], [`READ_ONLY_ACCESS_TOKEN`],
    /// [`MANAGE_ACCESS_TOKEN`], group 7 and project 42.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(default_state()).await
    }

    /// Starts on 127.0.0.1:0, over plain HTTP, with `state` (no token or group known unless it
    /// says so).
    pub async fn start_with(state: GitlabState) -> std::io::Result<Self> {
        let state = Arc::new(Mutex::new(state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        state.lock().unwrap().base_url = format!("http://{addr}");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = app(state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(GitlabDouble {
            addr,
            state,
            shutdown: Some(tx),
            tls: false,
        })
    }

    /// Like [`GitlabDouble::start`], over HTTPS with a certificate for 127.0.0.1 and
    /// localhost signed by a fresh CA, whose PEM is returned (give it as `--gitlab-ca-file`).
    pub async fn start_tls() -> tenantci_core::Result<(Self, String)> {
        use tenantci_core::pki::{CertificateAuthority, issue};
        tenantci_core::tls::ensure_crypto_provider();
        let day = std::time::Duration::from_secs(86_400);
        let ca = CertificateAuthority::generate("gitlab-double-ca", day)?;
        let leaf = issue::server_cert(
            &ca,
            "gitlab-double",
            &["127.0.0.1".to_string(), "localhost".to_string()],
            day,
        )?;
        let double = Self::start_tls_with(&leaf.cert_pem, &leaf.key_pem).await?;
        Ok((double, ca.cert_pem().to_string()))
    }

    /// Over HTTPS presenting exactly `cert_pem` (a chain, leaf first) with `key_pem`: e.g. a
    /// self-signed certificate made by `openssl req -x509`.
    pub async fn start_tls_with(cert_pem: &str, key_pem: &str) -> tenantci_core::Result<Self> {
        tenantci_core::tls::ensure_crypto_provider();
        let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                tenantci_core::Error::external(format!("cannot read the double's cert: {e}"))
            })?;
        let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .ok()
            .flatten()
            .ok_or_else(|| tenantci_core::Error::external("cannot read the double's key"))?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| {
                tenantci_core::Error::external(format!("cannot build the TLS config: {e}"))
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| tenantci_core::Error::external(format!("cannot bind 127.0.0.1:0: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| tenantci_core::Error::external(e.to_string()))?;
        let state = Arc::new(Mutex::new(default_state()));
        state.lock().unwrap().base_url = format!("https://{addr}");
        let app = app(state.clone());
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let double = GitlabDouble {
            addr,
            state,
            shutdown: Some(tx),
            tls: true,
        };
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                    _ = &mut rx => return,
                };
                let acceptor = acceptor.clone();
                let app = app.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
        Ok(double)
    }

    /// `http://127.0.0.1:<port>` (or `https://`).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// How runner creation answers from now on.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        self.state.lock().unwrap().behaviour = behaviour;
    }

    /// Deletes the runner with `id`, as an admin does in GitLab's UI: its token stops working.
    pub fn delete_runner(&self, id: u64) {
        self.state.lock().unwrap().runners.retain(|r| r.id != id);
    }

    /// From now on, each runner creation request is held (counted, not answered) until the
    /// returned barrier is released.
    pub fn hold_creates(&self) -> CreateHold {
        let hold = CreateHold::default();
        self.state.lock().unwrap().create_hold = Some(hold.clone());
        hold
    }

    /// Changes the runner with `id` as an admin does in GitLab's UI (pause it, its tags, ...).
    pub fn update_runner(&self, id: u64, change: impl FnOnce(&mut CreatedRunner)) {
        let mut s = self.state.lock().unwrap();
        if let Some(r) = s.runners.iter_mut().find(|r| r.id == id) {
            change(r);
        }
    }

    /// Adds a CI job (a pipeline's job GitLab queued); returns its id.
    pub fn add_job(&self, job: jobs::Job) -> u64 {
        let mut s = self.state.lock().unwrap();
        let id = job.id;
        s.jobs.retain(|j| j.id != id);
        s.jobs.push(job);
        id
    }

    /// Changes the job with `id` (its status, the runner it went to).
    pub fn update_job(&self, id: u64, change: impl FnOnce(&mut jobs::Job)) {
        let mut s = self.state.lock().unwrap();
        if let Some(j) = s.jobs.iter_mut().find(|j| j.id == id) {
            change(j);
        }
    }

    /// Protects the branch (or wildcard) `name` of `project`.
    pub fn protect_branch(&self, project: u64, name: &str) {
        let mut s = self.state.lock().unwrap();
        s.protected_branches
            .entry(project)
            .or_default()
            .push(name.to_string());
    }

    /// The runners created and not deleted, in creation order.
    pub fn runners(&self) -> Vec<CreatedRunner> {
        self.state.lock().unwrap().runners.clone()
    }

    /// Every request received so far, in order, as `METHOD path` (`POST /api/v4/user/runners`).
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for GitlabDouble {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

type Shared = Arc<Mutex<GitlabState>>;

/// The double's routes, usable in-process with `tower::ServiceExt::oneshot` too.
pub fn app(state: Shared) -> Router {
    Router::new()
        .route("/api/v4/personal_access_tokens/self", get(token_self))
        .route("/api/v4/user/runners", post(create_runner))
        .route("/api/v4/runners/verify", post(verify_runner))
        .route("/api/v4/runners", post(legacy_register))
        .route("/api/v4/runners/all", get(list::all_runners))
        .route(
            "/api/v4/runners/{id}",
            axum::routing::delete(list::delete_runner).get(jobs::runner_details),
        )
        .route("/api/v4/runners/{id}/jobs", get(jobs::runner_jobs))
        .route("/api/v4/runners/{id}/managers", get(jobs::runner_managers))
        .route("/api/v4/jobs/request", post(jobs::request_job))
        .route(
            "/api/v4/projects/{id}/jobs/{job_id}",
            get(jobs::project_job),
        )
        .route(
            "/api/v4/projects/{id}/protected_branches",
            get(jobs::protected_branches),
        )
        .route(
            "/api/v4/projects/{id}/protected_branches/{name}",
            get(jobs::protected_branch),
        )
        .route("/api/v4/groups/{id}/runners", get(list::group_runners))
        .route("/api/v4/projects/{id}/runners", get(list::project_runners))
        .with_state(state)
}

mod hold;
pub mod jobs;
mod list;

pub use hold::CreateHold;

fn error(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn access_token(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers.get("private-token").and_then(|v| v.to_str().ok()) {
        return Some(v.to_string());
    }
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

/// GitLab accepts ids and booleans as JSON values or strings.
fn as_u64(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_bool(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

fn runner_token() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    let suffix: String = (0..20)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("glrt-{suffix}")
}

async fn create_runner(State(state): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let (behaviour, hold) = {
        let mut s = state.lock().unwrap();
        s.requests.push("POST /api/v4/user/runners".into());
        (s.behaviour, s.create_hold.clone())
    };
    if let Some(hold) = hold {
        hold.pass().await;
    }
    match behaviour {
        Behaviour::Normal => {}
        Behaviour::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                json!({"message": "401 Unauthorized"}),
            );
        }
        Behaviour::Forbidden => return insufficient_scope(),
        Behaviour::Gone => return gone(),
        Behaviour::Hang => std::future::pending::<()>().await,
    }
    let mut s = state.lock().unwrap();
    if let Some(refused) = refuse_token(&s, &headers) {
        return refused;
    }
    let params: Value = match serde_json::from_str(&body) {
        Ok(Value::Object(m)) => Value::Object(m),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                json!({"error": "runner_type is missing, runner_type does not have a valid value"}),
            );
        }
    };
    let runner_type = params
        .get("runner_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group_id = as_u64(params.get("group_id"));
    let project_id = as_u64(params.get("project_id"));
    if let Some(refused) = refuse_owner(&s, runner_type, group_id, project_id) {
        return refused;
    }
    let tag_list = tag_list(params.get("tag_list"));
    s.next_id += 1;
    let runner = CreatedRunner {
        id: s.next_id,
        token: runner_token(),
        runner_type: runner_type.to_string(),
        group_id,
        project_id,
        tag_list,
        run_untagged: as_bool(params.get("run_untagged")),
        locked: as_bool(params.get("locked")),
        description: params
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        verified_by: Vec::new(),
        paused: as_bool(params.get("paused")),
        access_level: params
            .get("access_level")
            .and_then(Value::as_str)
            .unwrap_or("not_protected")
            .to_string(),
        maximum_timeout: as_u64(params.get("maximum_timeout")),
        managers: Vec::new(),
    };
    let body = json!({"id": runner.id, "token": runner.token, "token_expires_at": null});
    s.runners.push(runner);
    (StatusCode::CREATED, Json(body)).into_response()
}

/// `GET /api/v4/personal_access_tokens/self`: the token's own record (its scopes), 401 for an
/// unknown token, as GitLab 15.5+.
async fn token_self(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let behaviour = {
        let mut s = state.lock().unwrap();
        s.requests
            .push("GET /api/v4/personal_access_tokens/self".into());
        s.behaviour
    };
    match behaviour {
        Behaviour::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                json!({"message": "401 Unauthorized"}),
            );
        }
        Behaviour::Hang => std::future::pending::<()>().await,
        _ => {}
    }
    let s = state.lock().unwrap();
    match access_token(&headers).and_then(|t| s.access_tokens.get(&t)) {
        None => error(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401 Unauthorized"}),
        ),
        Some(scopes) => Json(json!({
            "id": 1, "name": "tenantci", "active": true, "revoked": false,
            "scopes": scopes.iter().collect::<Vec<_>>(),
        }))
        .into_response(),
    }
}

/// GitLab's answer to a missing or unknown access token, or one with neither `create_runner`
/// nor `api`; None when the token may create runners.
fn refuse_token(s: &GitlabState, headers: &HeaderMap) -> Option<Response> {
    let scopes = access_token(headers).and_then(|t| s.access_tokens.get(&t));
    match scopes {
        None => Some(error(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401 Unauthorized"}),
        )),
        Some(scopes) if !scopes.contains("create_runner") && !scopes.contains("api") => {
            Some(insufficient_scope())
        }
        Some(_) => None,
    }
}

/// GitLab's 400 or 403 for a `runner_type` that does not fit `group_id` / `project_id`, or
/// names a group or project the token cannot reach; None when they fit.
fn refuse_owner(
    s: &GitlabState,
    runner_type: &str,
    group_id: Option<u64>,
    project_id: Option<u64>,
) -> Option<Response> {
    let bad = |body: Value| Some(error(StatusCode::BAD_REQUEST, body));
    let forbidden = || {
        Some(error(
            StatusCode::FORBIDDEN,
            json!({"message": "403 Forbidden"}),
        ))
    };
    match (runner_type, group_id, project_id) {
        ("instance_type", None, None) => None,
        ("instance_type", _, _) => bad(
            json!({"message": "400 Bad request - group_id, project_id are mutually exclusive with instance_type"}),
        ),
        ("group_type", None, _) => bad(json!({"error": "group_id is missing"})),
        ("group_type", Some(id), _) if !s.groups.contains(&id) => forbidden(),
        ("project_type", _, None) => bad(json!({"error": "project_id is missing"})),
        ("project_type", _, Some(id)) if !s.projects.contains(&id) => forbidden(),
        ("group_type" | "project_type", _, _) => None,
        ("", _, _) => {
            bad(json!({"error": "runner_type is missing, runner_type does not have a valid value"}))
        }
        _ => bad(json!({"error": "runner_type does not have a valid value"})),
    }
}

/// `tag_list` as a comma-separated string or a JSON array, as the API accepts both.
fn tag_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn insufficient_scope() -> Response {
    error(
        StatusCode::FORBIDDEN,
        json!({
            "error": "insufficient_scope",
            "error_description": "The request requires higher privileges than provided by the access token.",
            "scope": "create_runner api"
        }),
    )
}

fn gone() -> Response {
    error(
        StatusCode::GONE,
        json!({"message": "410 Gone - runner registration disallowed"}),
    )
}

async fn verify_runner(State(state): State<Shared>, body: String) -> Response {
    let mut s = state.lock().unwrap();
    s.requests.push("POST /api/v4/runners/verify".into());
    let params: Value = serde_json::from_str(&body).unwrap_or_default();
    let token = params.get("token").and_then(Value::as_str).unwrap_or("");
    let system_id = params
        .get("system_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match s.runners.iter_mut().find(|r| r.token == token) {
        Some(r) => {
            r.verified_by.push(system_id);
            let body = json!({"id": r.id, "token": r.token, "token_expires_at": null});
            (StatusCode::OK, Json(body)).into_response()
        }
        None => error(StatusCode::FORBIDDEN, json!({"message": "403 Forbidden"})),
    }
}

async fn legacy_register(State(state): State<Shared>) -> Response {
    state
        .lock()
        .unwrap()
        .requests
        .push("POST /api/v4/runners".into());
    gone()
}
