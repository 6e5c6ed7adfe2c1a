//! The status API on loopback: `/healthz` (the process serves), `/readyz` (the facade is up;
//! the body says whether this instance leads), `/metrics` (Prometheus text).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

#[derive(Default)]
pub struct Health {
    pub facade_up: AtomicBool,
    pub leader: AtomicBool,
}

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
