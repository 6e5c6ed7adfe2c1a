//! `tenantci executor-proxy`: the executor's only road to the facade (a native sidecar in a
//! Pod, a background process in a sandbox, whatever the backend). The runner talks
//! plain HTTP to it on 127.0.0.1 (its `.runner` address); it forwards the RunnerService calls
//! an executor makes over HTTPS, trusting the facade's CA and nothing else. So the runner and
//! the job's steps keep the image's own trust store: no `SSL_CERT_FILE`/`SSL_CERT_DIR`.
//!
//! Boundary: it forwards, it does not authenticate (the facade checks the capability in the
//! runner's headers) and it keeps no state. `POST /api/actions/runner.v1.RunnerService/`
//! `{Declare,FetchTask,UpdateTask,UpdateLog}` go to the facade; any other RunnerService call is
//! a Connect `not_found`; `/_tenantci/cache/*` (the job's `ACTIONS_CACHE_URL`) streams to the
//! facade's listener, where the shared cache is served (`cache::protocol`); everything else
//! goes to Gitea itself (`executor_proxy::passthrough`: checkout, artifacts, the API), or is
//! `not_found` when the proxy was given no Gitea.
//!
//! Retries: while the facade is away (a dispatcher restart: connection refused or reset, or a
//! 502/503/504 from what stands in front of it), a call is sent again with backoff for up to
//! `retry_for`. Every forwarded method is safe to repeat at the facade: Declare is pure,
//! FetchTask hands the same task out again until the first report consumes it, UpdateLog is
//! indexed and UpdateTask sets a state. This matters because the runner ends at once when its first
//! Declare fails (docs/gitea-protocol.md).
//!
//! It exits on SIGTERM, which the kubelet sends a native sidecar once the runner has exited:
//! it stops accepting at once, gives calls in flight [`SHUTDOWN_GRACE`], then exits whatever
//! is still open. A client that does not finish a request's headers within
//! [`HEADER_READ_TIMEOUT`] is disconnected (`http1`, the server it shares with the webhook
//! receiver), so half-sent headers hold neither a connection nor the exit.
//!
//! With executor identity on ([`FacadeTrust::Spiffe`]), the client `upstream` builds speaks
//! SPIFFE mTLS: it presents the executor's SVID (in a Pod from the Workload API, following
//! rotation; in a sandbox from the files the boot script wrote) and accepts the facade only
//! when its SVID chains to the trust bundle and names exactly the facade's SPIFFE ID
//! (`spiffe::tls::client_config`); the facade CA is not used then. The routes, the retries
//! and the runner side stay as they are.

pub mod passthrough;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use tenantci_core::forge::gitea::facade::RUNNER_SERVICE_PATH;
use tenantci_core::spiffe::tls as spiffe_tls;
use tenantci_core::spiffe::{SpiffeId, SvidSource};
use tenantci_core::{Error, Result};

use crate::cache::protocol::PREFIX as CACHE_PREFIX;
use crate::http1::{self, Bounds, Stopped};
use passthrough::{GiteaUpstream, Passthrough};

/// The methods an executor calls (Register is the dispatcher's business, never the
/// executor's).
pub const FORWARDED_METHODS: [&str; 4] = ["Declare", "FetchTask", "UpdateTask", "UpdateLog"];

/// Request headers the facade reads; nothing else leaves the executor.
const REQUEST_HEADERS: [HeaderName; 9] = [
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::ACCEPT_ENCODING,
    header::USER_AGENT,
    HeaderName::from_static("connect-protocol-version"),
    HeaderName::from_static("connect-timeout-ms"),
    HeaderName::from_static("x-runner-uuid"),
    HeaderName::from_static("x-runner-token"),
    HeaderName::from_static("x-runner-version"),
];

/// The largest call body (UpdateLog batches are the big ones; the runner sends at most a few
/// hundred rows at a time).
pub const BODY_LIMIT: usize = 16 << 20;
/// One attempt's bound: the facade answers every executor call at once (FetchTask never
/// long-polls), so an attempt this slow is a hung facade, and is retried like a refused one.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// A runner on loopback sends a request's headers at once; this also ends a kept-alive
/// connection left idle this long (the runner reports every second while a job runs).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);
/// After SIGTERM the runner has exited, so nobody waits for the answers still in flight; a
/// few seconds let a final report that is under way reach the facade.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Connections open at once: the runner and the job's steps (checkout, artifacts, the cache)
/// use a handful; the bound only stops a runaway step from exhausting the executor's
/// descriptors.
pub const MAX_CONNECTIONS: usize = 256;
/// The largest CA file read.
const CA_FILE_LIMIT: u64 = 256 << 10;

/// What the proxy trusts the facade by.
#[derive(Debug, Clone)]
pub enum FacadeTrust {
    /// The facade's own CA (PEM): server-only TLS, the capability authenticates the executor.
    Ca(String),
    /// SPIFFE mTLS: the executor's SVID from `source`, and the facade's exact SPIFFE ID.
    Spiffe {
        /// Where the executor's SVID comes from (`--spiffe-source`).
        source: Arc<dyn SvidSource>,
        /// The only SPIFFE ID the facade may present (`--facade-id`).
        facade_id: SpiffeId,
    },
}

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Loopback address the runner talks to.
    pub listen: SocketAddr,
    /// The facade's base URL (https).
    pub facade_url: String,
    /// What the facade is trusted by: its CA, or (identity on) SPIFFE.
    pub facade: FacadeTrust,
    /// How long one call is retried while the facade is away.
    pub retry_for: Duration,
    /// The header-read timeout and the shutdown grace.
    pub bounds: Bounds,
    /// Where everything that is not the RunnerService goes (None: it is `not_found`).
    pub gitea: Option<GiteaUpstream>,
}

/// Reads the facade CA: a regular file (not a FIFO or a device), at most 256 KiB.
pub fn read_ca_file(path: &Path) -> Result<String> {
    tenantci_core::input::read_text("the facade CA file", path, CA_FILE_LIMIT)
}

/// Checks what the proxy was given before it binds anything.
pub fn check(cfg: &ProxyConfig) -> Result<()> {
    if !cfg.listen.ip().is_loopback() {
        return Err(
            Error::bad_input(format!("--listen {} is not a loopback address", cfg.listen))
                .hint("the runner reaches the proxy inside its Pod: pass 127.0.0.1:<port>"),
        );
    }
    let ok = cfg
        .facade_url
        .strip_prefix("https://")
        .is_some_and(|rest| !rest.is_empty());
    if !ok {
        return Err(Error::bad_input(format!(
            "--facade-url `{}` is not an https:// URL",
            cfg.facade_url
        ))
        .hint("pass the dispatcher's facade.url, e.g. https://10.0.0.5:8443"));
    }
    if let Some(gitea) = &cfg.gitea {
        passthrough::check_url(&gitea.url)?;
    }
    Ok(())
}

#[derive(Clone)]
struct Upstream {
    http: reqwest::Client,
    base: String,
    retry_for: Duration,
}

/// The HTTPS client towards the facade: its CA is the only root, or (identity on) the SVID
/// bundle is, and the facade's SPIFFE ID the only name accepted.
fn upstream(cfg: &ProxyConfig) -> Result<Upstream> {
    let http = facade_client(cfg)?
        .timeout(ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| Error::bad_input("cannot build the facade client").caused_by(e))?;
    Ok(Upstream {
        http,
        base: cfg.facade_url.trim_end_matches('/').to_string(),
        retry_for: cfg.retry_for,
    })
}

/// The road to the facade's shared cache: the facade's trust, bodies streamed both ways with no
/// total timeout (a restore of gigabytes), only silence bounded; not retried (an upload's
/// body is gone once sent, and the toolkit retries its own calls).
fn cache_road(cfg: &ProxyConfig) -> Result<Passthrough> {
    // HTTP/1.1 (`streaming`): a restore is one large stream.
    let http = passthrough::streaming(facade_client(cfg)?)
        .build()
        .map_err(|e| Error::bad_input("cannot build the facade client").caused_by(e))?;
    Ok(Passthrough::over(
        http,
        &cfg.facade_url,
        "the dispatcher's cache",
        "check that the executor reaches the facade (the dispatcher runs, its NetworkPolicy)",
    ))
}

/// The facade's trust and the connect timeout, shared by both roads to it.
fn facade_client(cfg: &ProxyConfig) -> Result<reqwest::ClientBuilder> {
    tenantci_core::tls::ensure_crypto_provider();
    let builder = match &cfg.facade {
        FacadeTrust::Ca(pem) => {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| {
                Error::bad_input("the facade CA is not a PEM certificate")
                    .caused_by(e)
                    .hint("pass the `ca.crt` of the executor Secret")
            })?;
            reqwest::Client::builder()
                .use_rustls_tls()
                .tls_built_in_root_certs(false)
                .add_root_certificate(ca)
        }
        FacadeTrust::Spiffe { source, facade_id } => reqwest::Client::builder()
            .use_preconfigured_tls(spiffe_tls::client_config(source.clone(), facade_id.clone())),
    };
    Ok(builder.connect_timeout(Duration::from_secs(5)))
}

/// The proxy's routes over a facade client and, when given, Gitea (no listener: tests can
/// drive it in-process).
fn router(up: Upstream, cache: Passthrough, gitea: Option<Passthrough>) -> Router {
    let runner = Router::new()
        .route(&format!("{RUNNER_SERVICE_PATH}/{{method}}"), post(forward))
        .route("/healthz", get(|| async { "ok" }))
        // The RunnerService calls are read whole (they are retried); the passthrough streams.
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(up)
        .merge(
            Router::new()
                .route(&format!("{CACHE_PREFIX}/{{*rest}}"), any(to_cache))
                .with_state(cache),
        );
    match gitea {
        Some(gitea) => runner.fallback_service(
            Router::new()
                .fallback(passthrough::forward)
                .with_state(gitea),
        ),
        None => runner.fallback(|| async {
            not_found(
                "only the RunnerService calls of an executor pass (the proxy has no --gitea-url)",
            )
        }),
    }
}

/// A job's cache request (`ACTIONS_CACHE_URL` is under [`CACHE_PREFIX`]): to the facade,
/// streamed, saying where the job reached it so the cache's download URLs come back here.
async fn to_cache(State(cache): State<Passthrough>, req: Request) -> Response {
    let mut extra = HeaderMap::new();
    if let Some(host) = req.headers().get(header::HOST) {
        extra.insert(HeaderName::from_static("x-forwarded-host"), host.clone());
    }
    extra.insert(
        HeaderName::from_static("x-forwarded-proto"),
        axum::http::HeaderValue::from_static("http"),
    );
    passthrough::stream_to(&cache, req, extra).await
}

fn not_found(why: &str) -> Response {
    let body = serde_json::json!({"code": "not_found", "message": why}).to_string();
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Whether a facade answer means "not there right now" (a Service without a ready endpoint,
/// a restarting dispatcher behind a load balancer).
fn unavailable(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
}

/// Backoff between attempts: 50 ms doubling to 1 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(1))
}

async fn forward(
    State(up): State<Upstream>,
    UrlPath(method): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !FORWARDED_METHODS.contains(&method.as_str()) {
        return not_found(&format!(
            "runner.v1.RunnerService/{method} is not an executor's call"
        ));
    }
    let url = format!("{}{RUNNER_SERVICE_PATH}/{method}", up.base);
    let give_up = tokio::time::Instant::now() + up.retry_for;
    let mut attempt = 0u32;
    loop {
        let mut req = up.http.post(&url).body(body.clone());
        for name in &REQUEST_HEADERS {
            for value in headers.get_all(name) {
                req = req.header(name, value);
            }
        }
        let outcome = req.send().await;
        let retry = match &outcome {
            Ok(resp) => unavailable(resp.status()),
            Err(e) => !e.is_builder(),
        };
        if !retry || tokio::time::Instant::now() >= give_up {
            return match outcome {
                Ok(resp) => relay(resp).await,
                Err(e) => {
                    // With the causes: a refused facade SVID shows only there.
                    let error = tenantci_core::error::one_line(&e);
                    tracing::warn!(%method, %error, "executor-proxy: the facade is unreachable after retrying; the runner's call is answered unavailable");
                    let body = serde_json::json!({"code": "unavailable", "message": "the facade is unreachable"}).to_string();
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                        .into_response()
                }
            };
        }
        tracing::debug!(%method, attempt, "executor-proxy: the facade is away, retrying");
        tokio::time::sleep(backoff(attempt)).await;
        attempt += 1;
    }
}

/// The facade's answer as it came (status, body, headers but the hop-by-hop ones; the length
/// is the relayed body's own).
async fn relay(resp: reqwest::Response) -> Response {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = passthrough::end_to_end(resp.headers());
    headers.remove(header::CONTENT_LENGTH);
    match resp.bytes().await {
        Ok(body) => (status, headers, body).into_response(),
        Err(_) => (StatusCode::BAD_GATEWAY, "the facade's answer broke off").into_response(),
    }
}

/// Binds `cfg.listen` and serves until `shutdown` resolves; `on_listening` gets the bound
/// address (port 0 picks one).
pub async fn serve(
    cfg: ProxyConfig,
    on_listening: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    check(&cfg)?;
    let up = upstream(&cfg)?;
    let cache = cache_road(&cfg)?;
    let gitea = cfg.gitea.as_ref().map(Passthrough::new).transpose()?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| {
            Error::bad_input(format!("cannot listen on {}", cfg.listen))
                .caused_by(e)
                .hint("pick a free loopback port (the executor Pod uses executor-proxy's default)")
        })?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::external("cannot read the bound address").caused_by(e))?;
    on_listening(bound);
    match http1::serve(listener, router(up, cache, gitea), cfg.bounds, shutdown).await {
        Stopped::Drained => {}
        Stopped::GraceExpired { open } => tracing::warn!(
            open,
            grace = ?cfg.bounds.grace,
            "executor-proxy: connections still open after the shutdown grace are dropped"
        ),
    }
    Ok(())
}

/// Asks a running proxy's `/healthz` (the sidecar's startup probe): true when it answers.
pub async fn probe(listen: SocketAddr) -> bool {
    let Ok(client) = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
    else {
        return false;
    };
    client
        .get(format!("http://{listen}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_https_are_accepted() {
        let good = ProxyConfig {
            listen: "127.0.0.1:8431".parse().unwrap(),
            facade_url: "https://10.0.0.5:8443".into(),
            facade: FacadeTrust::Ca(String::new()),
            retry_for: Duration::from_secs(60),
            bounds: Bounds {
                header_read_timeout: HEADER_READ_TIMEOUT,
                grace: SHUTDOWN_GRACE,
                max_connections: MAX_CONNECTIONS,
            },
            gitea: Some(GiteaUpstream {
                url: "https://gitea.example".into(),
                ca_pem: None,
            }),
        };
        check(&good).unwrap();
        let mut no_gitea = good.clone();
        no_gitea.gitea.as_mut().unwrap().url = "gitea.example".into();
        assert!(
            check(&no_gitea)
                .unwrap_err()
                .message()
                .contains("--gitea-url")
        );
        let mut wide = good.clone();
        wide.listen = "0.0.0.0:8431".parse().unwrap();
        assert!(check(&wide).unwrap_err().message().contains("--listen"));
        let mut plain = good.clone();
        plain.facade_url = "http://10.0.0.5:8443".into();
        let e = check(&plain).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("--facade-url"));
    }

    #[test]
    fn backoff_grows_to_one_second() {
        assert_eq!(backoff(0), Duration::from_millis(50));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(30), Duration::from_secs(1));
    }

    #[test]
    fn the_ca_file_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_ca_file(dir.path()).is_err());
        let big = dir.path().join("big.crt");
        std::fs::write(&big, vec![b'a'; (CA_FILE_LIMIT + 1) as usize]).unwrap();
        assert_eq!(read_ca_file(&big).unwrap_err().exit_code(), 2);
        let ok = dir.path().join("ca.crt");
        std::fs::write(&ok, "pem").unwrap();
        assert_eq!(read_ca_file(&ok).unwrap(), "pem");
    }
}
