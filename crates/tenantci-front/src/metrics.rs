//! The front's Prometheus metrics (`tenantci_front_*`), served on `metrics_listen` at
//! `/metrics`. The alerts in manifests/monitoring/front-alerts.yaml read these names.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every `tenantci_front_*` series, registered once ([`Metrics::default`]) and shared by the
/// listener and each connection.
pub struct Metrics {
    registry: Registry,
    connections: Family<Labels, Counter>,
    open: Family<Labels, Gauge>,
    pending: Gauge,
    bytes: Family<Labels, Counter>,
    denied: Gauge,
    deny_list_stale: Gauge,
    cert_expiry: Gauge<f64, AtomicU64>,
    client_expiry: Family<Labels, Gauge>,
    client_issued: Family<Labels, Gauge>,
    reload_success: Gauge,
    reload_time: Gauge<f64, AtomicU64>,
    refusals_summarised: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tenantci_front");
        let m = Metrics {
            registry: Registry::default(),
            connections: Family::default(),
            open: Family::default(),
            pending: Gauge::default(),
            bytes: Family::default(),
            denied: Gauge::default(),
            deny_list_stale: Gauge::default(),
            cert_expiry: Gauge::default(),
            client_expiry: Family::default(),
            client_issued: Family::default(),
            reload_success: Gauge::default(),
            reload_time: Gauge::default(),
            refusals_summarised: Counter::default(),
        };
        registry.register(
            "connections",
            "Connections by cluster and outcome: tunnel, or the refusal's reason",
            m.connections.clone(),
        );
        registry.register("tunnels_open", "Open tunnels by cluster", m.open.clone());
        registry.register(
            "handshakes_pending",
            "Connections in their handshake",
            m.pending.clone(),
        );
        registry.register(
            "bytes",
            "Bytes relayed by cluster and direction (up: runner to apiserver)",
            m.bytes.clone(),
        );
        registry.register(
            "denied_serials",
            "Entries of the deny-list in force",
            m.denied.clone(),
        );
        registry.register(
            "deny_list_stale",
            "1 when the deny-list file is gone or unreadable and the last good list stays in force",
            m.deny_list_stale.clone(),
        );
        registry.register(
            "serving_cert_expiry_timestamp_seconds",
            "When the front's serving certificate expires (Unix time)",
            m.cert_expiry.clone(),
        );
        registry.register(
            "client_cert_expiry_timestamp_seconds",
            "The latest notAfter among the admitted client certificates, by cluster and subject (Unix time): a runner whose renewal fails shows here",
            m.client_expiry.clone(),
        );
        registry.register(
            "client_cert_issued_timestamp_seconds",
            "The notBefore of that certificate, by cluster and subject (Unix time)",
            m.client_issued.clone(),
        );
        registry.register(
            "config_reload_success",
            "1 when the last reload of the config, ClientCAs and serving pair applied; 0 when it did not and the rules before it stay in force",
            m.reload_success.clone(),
        );
        registry.register(
            "config_reload_timestamp_seconds",
            "When the config and the files it names were last read (Unix time)",
            m.reload_time.clone(),
        );
        registry.register(
            "refusals_summarised",
            "Refused connections counted into a summary line instead of a line each",
            m.refusals_summarised.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Counts one connection's end (`tenantci_front_connections_total`): `outcome` is
    /// `tunnel` or the refusal's reason; `cluster` is empty when refused before ALPN named one.
    pub fn connection(&self, cluster: &str, outcome: &str) {
        self.connections
            .get_or_create(&labels(&[("cluster", cluster), ("outcome", outcome)]))
            .inc();
    }

    /// One more open tunnel to `cluster` (`tenantci_front_tunnels_open`).
    pub fn tunnel_opened(&self, cluster: &str) {
        self.open
            .get_or_create(&labels(&[("cluster", cluster)]))
            .inc();
    }

    /// A tunnel to `cluster` closed after relaying `up` bytes (runner to apiserver) and `down`
    /// bytes (`tenantci_front_bytes_total`).
    pub fn tunnel_closed(&self, cluster: &str, up: u64, down: u64) {
        self.open
            .get_or_create(&labels(&[("cluster", cluster)]))
            .dec();
        for (direction, n) in [("up", up), ("down", down)] {
            self.bytes
                .get_or_create(&labels(&[("cluster", cluster), ("direction", direction)]))
                .inc_by(n);
        }
    }

    /// Connections in their handshake (`tenantci_front_handshakes_pending`), kept by the
    /// listener.
    pub fn pending(&self) -> &Gauge {
        &self.pending
    }

    /// Entries of the deny-list in force (`tenantci_front_denied_serials`).
    pub fn set_denied(&self, n: usize) {
        self.denied.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Whether the last good deny-list is in force because the file no longer reads
    /// (`tenantci_front_deny_list_stale`).
    pub fn set_deny_list_stale(&self, stale: bool) {
        self.deny_list_stale.set(i64::from(stale));
    }

    /// When the serving certificate expires, in Unix seconds
    /// (`tenantci_front_serving_cert_expiry_timestamp_seconds`).
    pub fn set_cert_expiry(&self, unix: i64) {
        self.cert_expiry.set(unix as f64);
    }

    /// An admitted client certificate: its validity becomes its subject's when it ends later
    /// than the one seen before (`tenantci_front_client_cert_*_timestamp_seconds`).
    pub fn client_cert(&self, cluster: &str, client: &crate::admit::Client) {
        let (not_before, not_after) = (
            client.not_before.unix_timestamp(),
            client.not_after.unix_timestamp(),
        );
        let subject = client.subject();
        let key = labels(&[("cluster", cluster), ("subject", &subject)]);
        let expiry = self.client_expiry.get_or_create(&key);
        if expiry.get() < not_after {
            expiry.set(not_after);
            self.client_issued.get_or_create(&key).set(not_before);
        }
    }

    /// The outcome of the last reload (`tenantci_front_config_reload_success`), now.
    pub fn set_reload(&self, ok: bool) {
        self.reload_success.set(i64::from(ok));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.reload_time.set(now);
    }

    /// One refused connection counted into a summary (`tenantci_front_refusals_summarised`).
    pub fn refusal_summarised(&self) {
        self.refusals_summarised.inc();
    }

    /// Every series in the OpenMetrics text format, as `/metrics` serves it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// `front connect`'s series (`tenantci_front_connect_*`), on its `--metrics-listen`.
pub struct ConnectMetrics {
    registry: Registry,
    expiry: Gauge,
    issued: Gauge,
    renewals: Family<Labels, Counter>,
}

impl Default for ConnectMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tenantci_front_connect");
        let m = ConnectMetrics {
            registry: Registry::default(),
            expiry: Gauge::default(),
            issued: Gauge::default(),
            renewals: Family::default(),
        };
        registry.register(
            "cert_expiry_timestamp_seconds",
            "When the certificate front connect presents expires (Unix time)",
            m.expiry.clone(),
        );
        registry.register(
            "cert_issued_timestamp_seconds",
            "That certificate's notBefore (Unix time)",
            m.issued.clone(),
        );
        registry.register(
            "renewals",
            "Renewal attempts by outcome: renewed, or why not",
            m.renewals.clone(),
        );
        ConnectMetrics { registry, ..m }
    }
}

impl ConnectMetrics {
    /// The certificate now presented.
    pub fn set_cert(&self, not_before: i64, not_after: i64) {
        self.issued.set(not_before);
        self.expiry.set(not_after);
    }

    /// One renewal attempt's outcome.
    pub fn renewal(&self, outcome: &str) {
        self.renewals
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
    }
}

/// What a `/metrics` listener renders.
pub trait Render: Send + Sync + 'static {
    /// Every series in the OpenMetrics text format.
    fn render(&self) -> String;
}

impl Render for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
}

impl Render for ConnectMetrics {
    fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

async fn metrics<M: Render>(State(m): State<Arc<M>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}

/// The metrics listener's routes: `GET /metrics` only.
pub fn router<M: Render>(metrics: Arc<M>) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics::<M>))
        .with_state(metrics)
}

/// Binds `addr` and serves `/metrics` there (for `front connect`); a busy address is bad input.
pub async fn listen<M: Render>(
    addr: std::net::SocketAddr,
    metrics: Arc<M>,
) -> tenantci_core::Result<std::net::SocketAddr> {
    use tenantci_core::Error;
    let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Error::bad_input(format!("cannot listen on {addr} for metrics"))
            .caused_by(e)
            .hint("pass another --metrics-listen (loopback)")
    })?;
    let bound = l
        .local_addr()
        .map_err(|e| Error::external("cannot read the metrics address").caused_by(e))?;
    let app = router(metrics);
    tokio::spawn(async move { axum::serve(l, app).await });
    Ok(bound)
}
