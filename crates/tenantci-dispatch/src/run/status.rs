//! The status API on loopback: `/healthz` (the process serves), `/readyz` (the facade is up;
//! the body says whether this instance leads), `/metrics` (Prometheus text). With
//! `status.metrics_listen`, a second listener serves `/metrics` alone, for a scraper outside
//! the Pod or host (non-loopback only with `status.expose_metrics = true`); health stays on
//! loopback.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::health::Health;
use crate::metrics::Metrics;

struct Shared {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
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

pub fn router(health: Arc<Health>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .with_state(Arc::new(Shared { health, metrics }))
}

/// Only `/metrics`: what the metrics listener serves.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    let health = Arc::new(Health::default());
    Router::new()
        .route("/metrics", get(self::metrics))
        .with_state(Arc::new(Shared { health, metrics }))
}

/// The status API's listener and the optional metrics listener, bound at start (a busy
/// address is refused before anything else listens).
pub struct Listeners {
    status: TcpListener,
    metrics: Option<TcpListener>,
    pub status_addr: std::net::SocketAddr,
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl Listeners {
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
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<std::io::Result<()>>> {
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let mut tasks = vec![tokio::spawn(serve(
            self.status,
            health,
            metrics.clone(),
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
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(health, metrics))
        .with_graceful_shutdown(stop)
        .await
}

/// `dispatch probe`: GETs `path` from a running dispatcher's status API and returns the body;
/// no answer, or a non-2xx one, is a failed check (exit 1), which is what an exec probe needs.
pub async fn probe(listen: std::net::SocketAddr, path: &str) -> tenantci_core::Result<String> {
    use tenantci_core::Error;
    let url = format!("http://{listen}{path}");
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(2))
        .no_proxy()
        .build()
        .map_err(|e| Error::external("cannot build an HTTP client").caused_by(e))?;
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
