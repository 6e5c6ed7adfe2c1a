//! The status API on loopback: `/healthz` (the process serves), `/readyz` (the facade is up;
//! the body says whether this instance leads), `/metrics` (Prometheus text), `/v1/status`
//! (every task held and the summary: `crate::view`, gathered here by [`Sources`]),
//! `/v1/history` (where finished tasks' time went: `view::history`) and `/` (the same as an
//! HTML page, with the last hour's timeline). With `status.metrics_listen`, a second listener serves
//! `/metrics` alone, for a scraper outside the Pod or host (non-loopback only with
//! `status.expose_metrics = true`); health stays on loopback. Also the client side:
//! [`probe`], [`fetch`] and [`fetch_history`], for `dispatch probe`, `status` and `explain`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::backend::Backend;
use crate::backend_kind::BackendKind;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::queue::depth::depth_now;
use crate::sizing::class::ExecutorClass;
use crate::task::history::store::{History, Seen};
use crate::task::mirror::Mirror;
use crate::task::registry::Registry;
use crate::task_id::TaskId;
use crate::view::{self, Inputs, Status, history};

struct Shared {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    sources: Option<Arc<Sources>>,
}

/// What `/v1/status` is built from: the term's registry, the claim ledger's mirror, every
/// backend, and from the config what does not change while it runs.
pub struct Sources {
    /// The term's registry: every task held, as cards.
    pub registry: Arc<Registry>,
    /// The claim ledger, as a mirror that reads only the writes since the last request.
    pub ledger: Mirror,
    /// Every backend this dispatcher runs, observed for each request.
    pub backends: Vec<Arc<dyn Backend>>,
    /// This instance's identity (the Lease holder name).
    pub instance: String,
    /// `gitea.url`.
    pub forge_url: String,
    /// The labels registered at the forge (every class's included).
    pub labels: Vec<String>,
    /// Each backend this dispatcher runs, with its capacity.
    pub capacity: Vec<(BackendKind, u32)>,
    /// The resource classes.
    pub classes: Vec<ExecutorClass>,
    /// `[cache]` is set.
    pub cache_enabled: bool,
    /// The queue, read for each backend's depth when asked: the scheduler's gauge is as old
    /// as its last pass, which may be a poll interval ago (a task started since still
    /// counted as queued).
    pub queue: async_nats::jetstream::Context,
    /// The task history and what was read of it (None: no history kept).
    pub history: Option<HistorySource>,
}

/// The task history as the status API reads it: the writes since the last request, caught
/// up per request, the newest `max_tasks` kept (as the bucket keeps them).
pub struct HistorySource {
    /// The bucket.
    pub history: History,
    /// What was read so far.
    pub seen: tokio::sync::Mutex<Seen>,
    /// `history.max_tasks`.
    pub max_tasks: usize,
    /// `history.max_age`.
    pub max_age: std::time::Duration,
}

impl HistorySource {
    /// Reads every live record once, so the first request after a start does not pay for it
    /// (one direct get per record: ~5 s for 10,000 in a debug build).
    pub async fn warm(&self) {
        self.seen
            .lock()
            .await
            .catch_up(&self.history, self.max_tasks)
            .await;
    }

    /// The records `q` asks for, after reading the writes since the last request.
    async fn doc(&self, q: &history::Query) -> history::HistoryDoc {
        let mut seen = self.seen.lock().await;
        seen.catch_up(&self.history, self.max_tasks).await;
        // A bound past the calendar's (a huge max_age) expires nothing.
        let cutoff = chrono::Duration::from_std(self.max_age)
            .ok()
            .and_then(|age| chrono::Utc::now().checked_sub_signed(age));
        if let Some(cutoff) = cutoff {
            seen.expire(cutoff);
        }
        history::build(seen.records(), q)
    }
}

/// The most recent tasks' histories `/v1/history` answers with when not told how many.
pub const HISTORY_DEFAULT_LIMIT: usize = 20;
/// The most it answers with.
pub const HISTORY_MAX_LIMIT: usize = 1000;

/// `/v1/history`'s query: `limit`, `task`, `repository`, `run`, `finished`; a value that does
/// not parse is one sentence naming it.
pub fn history_query(
    params: &std::collections::HashMap<String, String>,
) -> Result<history::Query, String> {
    let number = |key: &str| -> Result<Option<i64>, String> {
        params
            .get(key)
            .map(|v| {
                v.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("the query's {key}=`{v}` is not a positive whole number")
                })
            })
            .transpose()
    };
    let limit = number("limit")?.map_or(Ok(HISTORY_DEFAULT_LIMIT), |n| {
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= HISTORY_MAX_LIMIT)
            .ok_or_else(|| format!("the query's limit={n} is above {HISTORY_MAX_LIMIT}"))
    })?;
    Ok(history::Query {
        task: number("task")?.map(TaskId::new),
        repository: params.get("repository").cloned(),
        run: number("run")?,
        finished: params.get("finished").is_some_and(|v| v == "true"),
        limit,
    })
}

/// How long one backend's observation may take before the status calls its API away: an
/// operator's page must answer while an API hangs.
const OBSERVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl Sources {
    /// Reads everything once (one observation per backend; the ledger's writes since the
    /// last request, not an entry per task) and builds the document.
    async fn status(&self, health: &Health, metrics: &Metrics) -> Status {
        let cards = self.registry.cards();
        // A task whose entry the mirror lacks shows the registry's state alone.
        let ledger = self.ledger.of(cards.iter().map(|c| c.task)).await;
        let observations = self.backends.iter().map(|b| async move {
            let seen = tokio::time::timeout(OBSERVE_TIMEOUT, b.observe()).await;
            let seen = match seen {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "{} did not answer within {OBSERVE_TIMEOUT:?}",
                    b.nouns().source
                )),
            };
            (b.backend(), seen)
        });
        let backends: Vec<BackendKind> = self.capacity.iter().map(|(b, _)| *b).collect();
        // Together: the page answers within one OBSERVE_TIMEOUT whatever hangs.
        let (observed, depths) = tokio::join!(
            futures::future::join_all(observations),
            self.depths(&backends)
        );
        let observed = observed.into_iter().collect();
        let classes: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
        let mut figures = metrics.figures(&backends, &classes);
        for (backend, depth) in depths {
            figures.queue_depth.insert(backend, depth);
        }
        view::build(Inputs {
            now: chrono::Utc::now(),
            instance: &self.instance,
            leader: health.leader.load(Ordering::SeqCst),
            forge_url: &self.forge_url,
            labels: &self.labels,
            capacity: &self.capacity,
            classes: &self.classes,
            cache_enabled: self.cache_enabled,
            cards,
            ledger,
            observed,
            figures,
        })
    }

    /// Each backend's queue depth read now; a backend whose depth NATS does not give within
    /// OBSERVE_TIMEOUT keeps the scheduler's last reading (the gauge).
    async fn depths(&self, backends: &[BackendKind]) -> Vec<(BackendKind, u64)> {
        let reads = backends.iter().map(|b| async move {
            let read = tokio::time::timeout(OBSERVE_TIMEOUT, depth_now(&self.queue, *b)).await;
            read.ok().flatten().map(|d| (*b, d))
        });
        futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

async fn v1_status(State(s): State<Arc<Shared>>) -> axum::response::Response {
    let Some(sources) = &s.sources else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let doc = sources.status(&s.health, &s.metrics).await;
    axum::Json(doc).into_response()
}

async fn v1_history(
    State(s): State<Arc<Shared>>,
    Query(params): Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    let Some(sources) = &s.sources else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let q = match history_query(&params) {
        Ok(q) => q,
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let Some(h) = &sources.history else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "this dispatcher keeps no task history: its NATS has no CI_HISTORY bucket (run `tenantci queue init`)",
        )
            .into_response();
    };
    axum::Json(h.doc(&q).await).into_response()
}

async fn page(State(s): State<Arc<Shared>>) -> axum::response::Response {
    let Some(sources) = &s.sources else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let doc = sources.status(&s.health, &s.metrics).await;
    let recent = history::Query {
        limit: view::timeline::MAX_BARS,
        ..history::Query::default()
    };
    let recent = match &sources.history {
        Some(h) => h.doc(&recent).await,
        None => history::build([], &recent),
    };
    axum::response::Html(view::page::render(&doc, &recent)).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    let facade = s.health.facade_up.load(Ordering::SeqCst);
    let leader = s.health.leader.load(Ordering::SeqCst);
    let body = serde_json::json!({"facade": if facade {"up"} else {"down"}, "leader": leader});
    let code = if facade {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

async fn metrics(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
}

/// Every route of the status API; without `sources`, `/v1/status` and `/` answer 404.
pub fn router(health: Arc<Health>, metrics: Arc<Metrics>, sources: Option<Arc<Sources>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .route("/v1/status", get(v1_status))
        .route("/v1/history", get(v1_history))
        .route("/", get(page))
        .with_state(Arc::new(Shared {
            health,
            metrics,
            sources,
        }))
}

/// Only `/metrics`: what the metrics listener serves.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    let health = Arc::new(Health::default());
    Router::new()
        .route("/metrics", get(self::metrics))
        .with_state(Arc::new(Shared {
            health,
            metrics,
            sources: None,
        }))
}

/// The status API's listener and the optional metrics listener, bound at start (a busy
/// address is refused before anything else listens).
pub struct Listeners {
    status: TcpListener,
    metrics: Option<TcpListener>,
    /// The status API's bound address (its port picked by the system for port 0).
    pub status_addr: std::net::SocketAddr,
    /// The metrics listener's bound address, when `status.metrics_listen` is set.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl Listeners {
    /// Binds `status.listen` and, when set, `status.metrics_listen`; a busy address is bad
    /// input.
    pub async fn bind(status: &crate::config::Status) -> tenantci_core::Result<Listeners> {
        let listen = |what: &'static str, addr| async move {
            let l = TcpListener::bind(addr).await.map_err(|e| {
                tenantci_core::Error::bad_input(format!("cannot listen on {addr} for the {what}"))
                    .caused_by(e)
                    .hint("pick a free address in the config (or its TENANTCI_DISPATCH_* override)")
            })?;
            let bound = l.local_addr().map_err(|e| {
                tenantci_core::Error::external(format!("cannot read the {what}'s address"))
                    .caused_by(e)
            })?;
            Ok::<_, tenantci_core::Error>((l, bound))
        };
        let (status_l, status_addr) = listen("status API", status.listen).await?;
        let (metrics, metrics_addr) = match status.metrics_listen {
            Some(addr) => {
                let (l, a) = listen("metrics listener", addr).await?;
                (Some(l), Some(a))
            }
            None => (None, None),
        };
        Ok(Listeners {
            status: status_l,
            metrics,
            status_addr,
            metrics_addr,
        })
    }

    /// Serves both until `stop` says so; one task each.
    pub fn serve(
        self,
        health: Arc<Health>,
        metrics: Arc<Metrics>,
        sources: Arc<Sources>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<std::io::Result<()>>> {
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let mut tasks = vec![tokio::spawn(serve(
            self.status,
            router(health, metrics.clone(), Some(sources)),
            stopped(stop.clone()),
        ))];
        if let Some(l) = self.metrics {
            tasks.push(tokio::spawn(async move {
                axum::serve(l, metrics_router(metrics))
                    .with_graceful_shutdown(stopped(stop))
                    .await
            }));
        }
        tasks
    }
}

/// Serves until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
}

/// A client for the status API: plain HTTP, never through a proxy the environment names.
fn loopback_client(timeout: std::time::Duration) -> tenantci_core::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()
        .map_err(|e| tenantci_core::Error::external("cannot build an HTTP client").caused_by(e))
}

/// `dispatch probe`: GETs `path` from a running dispatcher's status API and returns the body;
/// no answer, or a non-2xx one, is a failed check (exit 1), which is what an exec probe needs.
pub async fn probe(listen: std::net::SocketAddr, path: &str) -> tenantci_core::Result<String> {
    use tenantci_core::Error;
    let url = format!("http://{listen}{path}");
    let client = loopback_client(std::time::Duration::from_secs(2))?;
    let resp = client.get(&url).send().await.map_err(|e| {
        Error::check_failed(format!(
            "the dispatcher's status API at {url} did not answer"
        ))
        .caused_by(e)
        .hint("is `tenantci dispatch run` running with this config?")
    })?;
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(body)
    } else {
        Err(Error::check_failed(format!(
            "{url} answered {status}: {}",
            body.trim()
        )))
    }
}

/// `dispatch status` and `explain`: the status document of the dispatcher whose status API
/// listens at `listen`. No answer is bad input (exit 2): the address given is not a running
/// dispatcher's.
pub async fn fetch(listen: std::net::SocketAddr) -> tenantci_core::Result<Status> {
    use tenantci_core::Error;
    let (url, resp) = ask(listen, "/v1/status", &[]).await?;
    let code = resp.status();
    if !code.is_success() {
        return Err(Error::bad_input(format!(
            "{url} answered {code}: it is not a dispatcher of this version's status API (v1); upgrade it or this command"
        )));
    }
    resp.json::<Status>().await.map_err(|e| {
        Error::external(format!("the status document from {url} does not decode; the dispatcher and this command differ in version")).caused_by(e)
    })
}

/// A GET of `path` with `query` on the status listener at `listen`: its URL and answer. No
/// answer is bad input (exit 2): the address given is not a running dispatcher's.
async fn ask(
    listen: std::net::SocketAddr,
    path: &str,
    query: &[(&str, String)],
) -> tenantci_core::Result<(String, reqwest::Response)> {
    let url = format!("http://{listen}{path}");
    // Above the backends' observation bound (3 s each, side by side).
    let client = loopback_client(std::time::Duration::from_secs(10))?;
    let resp = client.get(&url).query(query).send().await.map_err(|e| {
        tenantci_core::Error::bad_input(format!(
            "no dispatcher answers at {url}; start `tenantci dispatch run` with this config, or give the config whose status.listen it uses"
        ))
        .caused_by(e)
    })?;
    Ok((url, resp))
}

/// `dispatch status --history` and `explain` on a finished job: `/v1/history` with `query`
/// (`limit=20`, `task=7`, ...) from the dispatcher at `listen`. No answer is bad input (exit 2).
pub async fn fetch_history(
    listen: std::net::SocketAddr,
    query: &[(&str, String)],
) -> tenantci_core::Result<history::HistoryDoc> {
    use tenantci_core::Error;
    let (url, resp) = ask(listen, "/v1/history", query).await?;
    let code = resp.status();
    if !code.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(
            Error::bad_input(format!("{url} answered {code}: {}", body.trim()))
                .hint("a dispatcher older than this command has no /v1/history: upgrade it"),
        );
    }
    resp.json::<history::HistoryDoc>().await.map_err(|e| {
        Error::external(format!("the history document from {url} does not decode; the dispatcher and this command differ in version")).caused_by(e)
    })
}
