//! A RunnerService client towards Gitea (or towards the facade): Connect unary over reqwest +
//! rustls, `POST <base>/api/actions/runner.v1.RunnerService/<Method>`, binary protobuf by
//! default, `Accept-Encoding: gzip` with gzip answers inflated here, `x-runner-uuid` /
//! `x-runner-token` on every call but Register and Ping, a User-Agent, per-call timeouts, and an
//! optional extra CA (the facade's self-signed one).
//!
//! Retries: only calls that are safe to repeat are retried, with capped exponential backoff
//! and jitter, on transport failures, timeouts and `unavailable` / `deadline_exceeded`:
//! Ping, Declare, UpdateTask (a finished task ignores further updates; outputs are
//! deduplicated by key) and UpdateLog (the server acks by row index, so a repeat writes
//! nothing twice; a repeat of an archiving `no_more` call that meets `already_exists` means the
//! first attempt landed and counts as success).
//! Register is not retried (a lost answer would register a second runner), and FetchTask is
//! NEVER retried: a FetchTask whose answer was lost may have claimed a task. The caller sees
//! [`ClientError::claim_may_be_lost`] and recovers as `docs/gitea-protocol.md` describes
//! (keep the tasks version, poll again normally; an orphaned claim is failed by Gitea's zombie
//! sweep after 10 minutes without updates and must be re-run by a person or a re-run API,
//! never assumed to come back).
//!
//! Does not poll on a timer or interpret tasks: the dispatcher owns the loop ([`TasksVersion`]
//! keeps act_runner's version bookkeeping).

use std::time::Duration;

use http::header;

use super::connect::{self, Code, Codec, ConnectError, Wire};
use super::facade::{
    PING_PATH, REQUEST_KEY_HEADER, RUNNER_SERVICE_PATH, TOKEN_HEADER, UUID_HEADER,
};
use super::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, PingRequest,
    PingResponse, RegisterRequest, RegisterResponse, Runner, Task, UpdateLogRequest,
    UpdateLogResponse, UpdateTaskRequest, UpdateTaskResponse,
};

/// Backoff for the calls that may be retried.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Total attempts, the first included (1 = no retry).
    pub attempts: u32,
    /// The wait before the first retry (each wait is scaled by a random 0.5 to 1 jitter). Default
    /// 200 ms.
    pub initial_backoff: Duration,
    /// The cap on the wait, which doubles after each attempt. Default 5 s.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Where and how a [`RunnerClient`] calls; [`ClientConfig::new`] gives act_runner-like defaults.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The instance root, e.g. `https://gitea.example` (no `/api/actions`).
    pub base_url: String,
    /// The `User-Agent` header; default `tenantci/<crate version>`.
    pub user_agent: String,
    /// Request codec; act_runner uses binary protobuf.
    pub codec: Codec,
    /// Gzip request bodies (act_runner does not; Gitea and the facade accept it).
    pub gzip_requests: bool,
    /// Bound on every call but FetchTask. Default 30s.
    pub request_timeout: Duration,
    /// Bound on FetchTask (act_runner's `fetch_timeout`). Default 5s.
    pub fetch_timeout: Duration,
    /// Bound on establishing a TCP and TLS connection. Default 5s.
    pub connect_timeout: Duration,
    /// An extra trusted CA in PEM, e.g. the facade's self-signed CA.
    pub ca_pem: Option<String>,
    /// Backoff for the calls that may be retried (not Register, never FetchTask).
    pub retry: RetryPolicy,
}

impl ClientConfig {
    /// A configuration for `base_url` (a trailing `/` is dropped) with the defaults: binary
    /// protobuf, no request gzip, 30 s per call, 5 s per FetchTask, 5 s to connect, no extra CA, 4
    /// attempts.
    pub fn new(base_url: impl Into<String>) -> Self {
        ClientConfig {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            user_agent: format!("tenantci/{}", env!("CARGO_PKG_VERSION")),
            codec: Codec::Proto,
            gzip_requests: false,
            request_timeout: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            ca_pem: None,
            retry: RetryPolicy::default(),
        }
    }
}

/// A registered runner's identity. `Debug` does not print the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The runner's UUID, sent as `x-runner-uuid`.
    pub uuid: String,
    /// The runner's secret token, sent as `x-runner-token`.
    pub token: String,
}

impl Credentials {
    /// The UUID and token of a runner that Register returned.
    pub fn from_runner(runner: &Runner) -> Self {
        Credentials {
            uuid: runner.uuid.clone(),
            token: runner.token.clone(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("uuid", &self.uuid)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Why a call failed; [`ClientError::claim_may_be_lost`] says whether a FetchTask may have
/// claimed a task nobody heard of.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a Connect error.
    #[error("{method} was refused: {error}")]
    Status {
        /// The call, as in `"FetchTask"`.
        method: &'static str,
        /// The Connect error the server answered with.
        error: ConnectError,
    },
    /// No (complete) answer arrived. `connecting` says the request never left.
    #[error("{method} to {url} failed: {source}")]
    Transport {
        /// The call, as in `"FetchTask"`.
        method: &'static str,
        /// The URL called.
        url: String,
        /// True when the connection was never made, so the server cannot have seen the request.
        connecting: bool,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered 200 but the body does not decode.
    #[error("{method} answer cannot be decoded: {error}")]
    Decode {
        /// The call, as in `"FetchTask"`.
        method: &'static str,
        /// Why the body does not decode, as an `invalid_argument` Connect error.
        error: ConnectError,
    },
    /// The client cannot make the call as configured (e.g. an authenticated call without
    /// credentials).
    #[error("{0}")]
    Config(String),
    /// The HTTP client could not be built; `what` names the step, the cause is the source.
    #[error("{what}")]
    Build {
        /// The step that failed, as a phrase for the message.
        what: &'static str,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
}

/// Forgejo's message for a request key another call holds.
const REQUEST_KEY_LOCKED: &str = "request key is currently locked";

impl ClientError {
    /// The Connect code the server answered with, if it answered.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Status { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// Gitea does not know these credentials: stop polling (as act_runner does).
    pub fn is_unauthenticated(&self) -> bool {
        self.code() == Some(Code::Unauthenticated)
    }

    /// Forgejo refused a FetchTask because a call with the same request key is still being
    /// worked on (its per-key lock; docs/forgejo-protocol.md): repeat it soon with the same
    /// key, which then gets whatever that call assigned.
    pub fn request_key_locked(&self) -> bool {
        matches!(self, ClientError::Status { error, .. }
            if error.code == Code::Internal && error.message.contains(REQUEST_KEY_LOCKED))
    }

    /// Whether the request may have been processed without us learning the answer. For
    /// FetchTask this means a task may have been claimed and lost: never retry it blindly.
    pub fn claim_may_be_lost(&self) -> bool {
        match self {
            ClientError::Transport { connecting, .. } => !connecting,
            ClientError::Decode { .. } => true,
            ClientError::Status { error, .. } => matches!(
                error.code,
                Code::Unknown | Code::Unavailable | Code::DeadlineExceeded
            ),
            ClientError::Config(_) | ClientError::Build { .. } => false,
        }
    }

    fn retriable(&self) -> bool {
        match self {
            ClientError::Transport { .. } => true,
            ClientError::Status { error, .. } => {
                matches!(error.code, Code::Unavailable | Code::DeadlineExceeded)
            }
            _ => false,
        }
    }
}

/// act_runner's tasks-version bookkeeping: start at 0, keep the larger version the server
/// reports, and go back to 0 after receiving a task (so the next call looks for another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TasksVersion(i64);

impl TasksVersion {
    /// The version to send in the next FetchTask.
    pub fn get(self) -> i64 {
        self.0
    }

    /// Takes in a FetchTask answer: keeps the larger version, and goes back to 0 when it carried a
    /// task.
    pub fn observe(&mut self, resp: &FetchTaskResponse) {
        if resp.tasks_version > self.0 {
            self.0 = resp.tasks_version;
        }
        if resp.has_tasks() {
            self.0 = 0;
        }
    }
}

/// A RunnerService client towards one Gitea, Forgejo or facade; cheap to clone (the
/// connection pool is shared).
#[derive(Clone, Debug)]
pub struct RunnerClient {
    http: reqwest::Client,
    cfg: ClientConfig,
    creds: Option<Credentials>,
}

impl RunnerClient {
    /// A client without credentials (enough for Ping and Register). `Err(Build)` when `ca_pem` is
    /// not a PEM certificate or the HTTP client cannot be built.
    pub fn new(cfg: ClientConfig) -> Result<Self, ClientError> {
        crate::tls::ensure_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(cfg.user_agent.clone())
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(pem) = &cfg.ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|source| {
                ClientError::Build {
                    what: "the extra CA is not a PEM certificate",
                    source,
                }
            })?;
            builder = builder.add_root_certificate(ca);
        }
        let http = builder.build().map_err(|source| ClientError::Build {
            what: "cannot build the HTTP client",
            source,
        })?;
        Ok(RunnerClient {
            http,
            cfg,
            creds: None,
        })
    }

    /// This client, calling as `creds`.
    pub fn with_credentials(mut self, creds: Credentials) -> Self {
        self.creds = Some(creds);
        self
    }

    /// The credentials this client calls with; `None` before [`RunnerClient::with_credentials`].
    pub fn credentials(&self) -> Option<&Credentials> {
        self.creds.as_ref()
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// `ping.v1.PingService/Ping`; Gitea answers `Hello, <data>!`.
    pub async fn ping(&self, data: &str) -> Result<String, ClientError> {
        let url = format!("{}{PING_PATH}", self.cfg.base_url);
        let req = PingRequest { data: data.into() };
        let resp: PingResponse = self
            .retrying(|| self.call(&url, "Ping", &req, false, self.cfg.request_timeout, None))
            .await
            .map(|(r, _)| r)?;
        Ok(resp.data)
    }

    /// `GET <base>/api/v1/version`'s `version` (no authentication): Gitea's `1.24.3`, or
    /// Forgejo's `11.0.1+gitea-1.22.0` ([`crate::forge::Forge::detect`] tells them apart).
    pub async fn server_version(&self) -> Result<String, ClientError> {
        #[derive(serde::Deserialize)]
        struct Version {
            version: String,
        }
        const METHOD: &str = "the version API";
        let url = format!("{}/api/v1/version", self.cfg.base_url);
        let transport = |e: reqwest::Error| ClientError::Transport {
            method: METHOD,
            url: url.clone(),
            connecting: e.is_connect(),
            source: e,
        };
        let resp = self
            .http
            .get(&url)
            .timeout(self.cfg.request_timeout)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(transport)?;
        if status != 200 {
            return Err(ClientError::Status {
                method: METHOD,
                error: ConnectError::from_response(status, &body),
            });
        }
        serde_json::from_slice::<Version>(&body)
            .map(|v| v.version)
            .map_err(|e| ClientError::Decode {
                method: METHOD,
                error: ConnectError::invalid_argument(format!(
                    "not a version answer ({e}): {}",
                    crate::upstream::status_and_excerpt(status, &body)
                )),
            })
    }

    /// Forgejo's waiting jobs of `scope` (`forge::waiting`), read with an API `token`
    /// (`Authorization: token ...`). The answer is read up to `waiting::MAX_ANSWER` bytes.
    pub async fn waiting_jobs(
        &self,
        scope: &crate::forge::waiting::Scope,
        token: &crate::secret::Secret,
    ) -> Result<Vec<crate::forge::waiting::WaitingJob>, ClientError> {
        use crate::forge::waiting;
        const METHOD: &str = "the waiting-jobs API";
        let (status, body) = self
            .api_get(METHOD, &scope.path(), token, waiting::MAX_ANSWER)
            .await?;
        if status != 200 {
            return Err(ClientError::Status {
                method: METHOD,
                error: ConnectError::from_response(status, &body),
            });
        }
        waiting::parse(&body).map_err(|e| ClientError::Decode {
            method: METHOD,
            error: ConnectError::invalid_argument(format!(
                "not a list of jobs ({e}): {}",
                crate::upstream::status_and_excerpt(status, &body)
            )),
        })
    }

    /// A GET of the forge's REST API (`path` with its query, under the base URL) with an API
    /// `token` (`Authorization: token ...`): the status and the body, read up to `max` bytes
    /// (a larger answer is a decode error of `method`).
    pub async fn api_get(
        &self,
        method: &'static str,
        path: &str,
        token: &crate::secret::Secret,
        max: usize,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let url = format!("{}{path}", self.cfg.base_url);
        let transport = |e: reqwest::Error| ClientError::Transport {
            method,
            url: url.clone(),
            connecting: e.is_connect(),
            source: e,
        };
        let mut resp = self
            .http
            .get(&url)
            .header(header::AUTHORIZATION, format!("token {}", token.expose()))
            .header(header::ACCEPT, "application/json")
            .timeout(self.cfg.request_timeout)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > max {
                return Err(ClientError::Decode {
                    method,
                    error: ConnectError::invalid_argument(format!(
                        "the answer is larger than {max} bytes"
                    )),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }

    /// Registers a runner with a registration token (in `req.token`); returns it with its
    /// fresh uuid and token. Not retried.
    pub async fn register(&self, req: &RegisterRequest) -> Result<Runner, ClientError> {
        let url = self.method_url("Register");
        let resp: RegisterResponse = self
            .call(&url, "Register", req, false, self.cfg.request_timeout, None)
            .await?;
        resp.runner.ok_or_else(|| ClientError::Decode {
            method: "Register",
            error: ConnectError::internal("the answer holds no runner"),
        })
    }

    /// Declares version and labels. `Ok(None)` when the server predates Declare (Gitea < 1.21
    /// answers `unimplemented`).
    pub async fn declare(&self, req: &DeclareRequest) -> Result<Option<Runner>, ClientError> {
        let url = self.method_url("Declare");
        let result = self
            .retrying(|| {
                self.call::<_, DeclareResponse>(
                    &url,
                    "Declare",
                    req,
                    true,
                    self.cfg.request_timeout,
                    None,
                )
            })
            .await;
        match result {
            Ok((resp, _)) => Ok(resp.runner),
            Err(e) if e.code() == Some(Code::Unimplemented) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One FetchTask call, bounded by `fetch_timeout`. Never retried: on an error with
    /// [`ClientError::claim_may_be_lost`], a task may have been claimed for this runner.
    pub async fn fetch_task(&self, tasks_version: i64) -> Result<FetchTaskResponse, ClientError> {
        self.fetch_tasks(tasks_version, None, None).await
    }

    /// FetchTask as Forgejo extends it: `task_capacity` lets one answer carry several tasks
    /// (Gitea ignores it), and `request_key` goes out as `x-runner-request-key`, so that a
    /// call repeated with the same key after a lost answer gets that answer's tasks again
    /// (the caller keeps the key until an answer arrives). Never retried here.
    pub async fn fetch_tasks(
        &self,
        tasks_version: i64,
        task_capacity: Option<i64>,
        request_key: Option<&str>,
    ) -> Result<FetchTaskResponse, ClientError> {
        let url = self.method_url("FetchTask");
        let req = FetchTaskRequest {
            tasks_version,
            task_capacity,
        };
        self.call(
            &url,
            "FetchTask",
            &req,
            true,
            self.cfg.fetch_timeout,
            request_key,
        )
        .await
    }

    /// FetchTask with act_runner's version bookkeeping applied to `version`.
    pub async fn poll(&self, version: &mut TasksVersion) -> Result<Option<Task>, ClientError> {
        let resp = self.fetch_task(version.get()).await?;
        version.observe(&resp);
        Ok(resp.task)
    }

    /// Reports task state (a non-final one is the heartbeat; a result finalises the task).
    pub async fn update_task(
        &self,
        req: &UpdateTaskRequest,
    ) -> Result<UpdateTaskResponse, ClientError> {
        let url = self.method_url("UpdateTask");
        self.retrying(|| {
            self.call(
                &url,
                "UpdateTask",
                req,
                true,
                self.cfg.request_timeout,
                None,
            )
        })
        .await
        .map(|(r, _)| r)
    }

    /// Appends log rows from `req.index`; the answer's `ack_index` is how many rows the server
    /// holds, so rows before it need not be sent again.
    pub async fn update_log(
        &self,
        req: &UpdateLogRequest,
    ) -> Result<UpdateLogResponse, ClientError> {
        let url = self.method_url("UpdateLog");
        let url = url.as_str();
        let mut attempt = 0u32;
        let result = self
            .retrying(|| {
                attempt += 1;
                let repeat = attempt > 1;
                async move {
                    match self
                        .call::<_, UpdateLogResponse>(
                            url,
                            "UpdateLog",
                            req,
                            true,
                            self.cfg.request_timeout,
                            None,
                        )
                        .await
                    {
                        Err(e)
                            if repeat && req.no_more && e.code() == Some(Code::AlreadyExists) =>
                        {
                            Ok(UpdateLogResponse {
                                ack_index: rows_through(req),
                            })
                        }
                        other => other,
                    }
                }
            })
            .await;
        result.map(|(r, _)| r)
    }

    fn method_url(&self, method: &str) -> String {
        format!("{}{RUNNER_SERVICE_PATH}/{method}", self.cfg.base_url)
    }

    async fn retrying<T, F, Fut>(&self, mut attempt: F) -> Result<(T, u32), ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let policy = &self.cfg.retry;
        let mut delay = policy.initial_backoff;
        let mut n = 1;
        loop {
            match attempt().await {
                Err(e) if e.retriable() && n < policy.attempts.max(1) => {
                    tracing::debug!(error = %e, attempt = n, "retrying a Gitea call");
                    let jitter = rand::random_range(0.5..1.0);
                    tokio::time::sleep(delay.mul_f64(jitter)).await;
                    delay = (delay * 2).min(policy.max_backoff);
                    n += 1;
                }
                other => return other.map(|v| (v, n)),
            }
        }
    }

    async fn call<Req: Wire, Resp: Wire>(
        &self,
        url: &str,
        method: &'static str,
        req: &Req,
        authenticated: bool,
        timeout: Duration,
        request_key: Option<&str>,
    ) -> Result<Resp, ClientError> {
        let codec = self.cfg.codec;
        let mut body = codec.encode(req);
        let mut rb = self
            .http
            .post(url)
            .timeout(timeout)
            .header(header::CONTENT_TYPE, codec.content_type())
            .header(header::ACCEPT_ENCODING, "gzip")
            .header("connect-protocol-version", "1");
        if self.cfg.gzip_requests {
            body = connect::gzip(&body);
            rb = rb.header(header::CONTENT_ENCODING, "gzip");
        }
        if authenticated {
            let creds = self.creds.as_ref().ok_or_else(|| {
                ClientError::Config(format!("{method} needs runner credentials; register first"))
            })?;
            rb = rb
                .header(UUID_HEADER, &creds.uuid)
                .header(TOKEN_HEADER, &creds.token);
        }
        if let Some(key) = request_key {
            rb = rb.header(REQUEST_KEY_HEADER, key);
        }
        let transport = |e: reqwest::Error| ClientError::Transport {
            method,
            url: url.to_string(),
            connecting: e.is_connect(),
            source: e,
        };
        let resp = rb.body(body).send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let header_of = |name: header::HeaderName| {
            resp.headers()
                .get(name)
                .and_then(|v: &http::HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let encoding = header_of(header::CONTENT_ENCODING);
        let content_type = header_of(header::CONTENT_TYPE);
        let raw = resp.bytes().await.map_err(transport)?;
        let decode_err = |error| ClientError::Decode { method, error };
        let bytes = connect::decode_body(encoding.as_deref(), &raw).map_err(decode_err)?;
        if status != 200 {
            return Err(ClientError::Status {
                method,
                error: ConnectError::from_response(status, &bytes),
            });
        }
        let answer_codec = content_type
            .as_deref()
            .and_then(Codec::from_content_type)
            .unwrap_or(codec);
        answer_codec.decode(&bytes).map_err(decode_err)
    }
}

/// How many rows a log holds once `req`'s are appended: the runner's index plus its rows,
/// saturated (the index is the caller's number; in a debug build the sum panicked).
fn rows_through(req: &UpdateLogRequest) -> i64 {
    let rows = i64::try_from(req.rows.len()).unwrap_or(i64::MAX);
    req.index.saturating_add(rows)
}

#[cfg(test)]
mod rows_through_tests {
    use super::*;

    #[test]
    fn an_index_at_the_edge_of_64_bits_saturates() {
        let req = |index| UpdateLogRequest {
            index,
            rows: vec![Default::default(); 2],
            ..Default::default()
        };
        assert_eq!(rows_through(&req(3)), 5);
        assert_eq!(rows_through(&req(i64::MAX - 1)), i64::MAX);
        assert_eq!(rows_through(&req(i64::MAX)), i64::MAX);
    }
}
