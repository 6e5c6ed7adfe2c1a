//! The executor's side of the bench: its credentials from the executor objects, the four
//! ways to the facade as HTTP clients, and the timed UpdateLog calls (Connect, binary
//! protobuf, one log row each, the call a running task makes most).
//!
//! Every HTTPS client is reqwest over a preconfigured rustls config without ALPN (HTTP/1.1,
//! as `tenantci executor-proxy`'s SPIFFE client speaks to the facade), so the direct paths
//! differ only in the TLS configuration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use prost::Message as _;
use tenantci_core::forge::gitea::facade::{RUNNER_SERVICE_PATH, TOKEN_HEADER, UUID_HEADER};
use tenantci_core::forge::gitea::proto::{LogRow, UpdateLogRequest, UpdateLogResponse};
use tenantci_core::spiffe::{SourceSpec, SpiffeId, SvidSource};
use tenantci_dispatch::backend::pod::manifest::CA_KEY;
use tenantci_dispatch::task::spec::RUNNER_KEY;
use tenantci_testkit::executor::Executor;

/// One task's executor as the facade knows it.
pub struct Task {
    pub id: i64,
    pub uuid: String,
    pub token: String,
    /// `--facade-url` of the Pod's sidecar.
    pub facade_url: String,
    /// The executor Secret's `ca.crt` (identity off only).
    pub ca_pem: Option<String>,
    /// The next log index: the rows the facade acknowledged so far.
    next: i64,
}

impl Task {
    pub fn from_objects(id: i64, secret: &Secret, pod: &Pod) -> Task {
        let data = secret.data.as_ref().expect("the executor Secret has data");
        let ex = Executor::from_files(&data[RUNNER_KEY].0, "").unwrap();
        let ca_pem = data
            .get(CA_KEY)
            .map(|b| String::from_utf8(b.0.clone()).expect("ca.crt is PEM"));
        Task {
            id,
            uuid: ex.uuid,
            token: ex.token,
            facade_url: tenantci_testkit::executor::proxy_flag(pod, "--facade-url"),
            ca_pem,
            next: 0,
        }
    }

    /// One UpdateLog call of one row at the next index through `http` to `base`; its time.
    pub async fn update_log(&mut self, http: &reqwest::Client, base: &str) -> Duration {
        let body = UpdateLogRequest {
            task_id: self.id,
            index: self.next,
            rows: vec![LogRow {
                time: None,
                content: format!("bench row {}: {}", self.next, "x".repeat(80)),
            }],
            no_more: false,
        }
        .encode_to_vec();
        let start = Instant::now();
        let resp = http
            .post(format!("{base}{RUNNER_SERVICE_PATH}/UpdateLog"))
            .header("content-type", "application/proto")
            .header("accept-encoding", "gzip")
            .header("connect-protocol-version", "1")
            .header(UUID_HEADER, &self.uuid)
            .header(TOKEN_HEADER, &self.token)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "UpdateLog to {base}: {}",
                    tenantci_core::error::one_line(&e)
                )
            });
        let status = resp.status();
        let bytes = resp.bytes().await.expect("the UpdateLog answer");
        let took = start.elapsed();
        assert!(
            status.is_success(),
            "UpdateLog to {base}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        let answer = UpdateLogResponse::decode(&bytes[..]).expect("an UpdateLogResponse");
        assert_eq!(answer.ack_index, self.next + 1, "one row acknowledged");
        self.next = answer.ack_index;
        took
    }
}

/// Whether a client keeps its connection or opens one per request, and whether it offers
/// TLS session resumption on a new connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    KeepAlive,
    FreshFull,
    FreshResumable,
}

fn client(mut tls: rustls::ClientConfig, conn: Conn) -> reqwest::Client {
    if conn == Conn::FreshFull {
        tls.resumption = rustls::client::Resumption::disabled();
    }
    let mut b = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(30));
    if conn != Conn::KeepAlive {
        b = b.pool_max_idle_per_host(0);
    }
    b.build().unwrap()
}

/// Path (a): server-only TLS trusting the facade CA of the executor Secret (what the proxy
/// does with identity off), the capability in the headers.
pub fn server_tls_config(ca_pem: &str) -> rustls::ClientConfig {
    tenantci_core::tls::ensure_crypto_provider();
    let certs = tenantci_core::tls::parse_ca_bundle(
        "the facade CA",
        std::path::Path::new("ca.crt"),
        ca_pem.as_bytes(),
    )
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs);
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

pub fn server_tls(ca_pem: &str, conn: Conn) -> reqwest::Client {
    client(server_tls_config(ca_pem), conn)
}

/// The task's SVID from its entry's Workload API socket, as the proxy fetches it.
pub async fn svid_source(endpoint: &str) -> Arc<dyn SvidSource> {
    SourceSpec::WorkloadApi
        .open(Some(endpoint), Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("the task's SVID from {endpoint}: {e}"))
}

/// Path (b): SPIFFE mTLS with the task's SVID, accepting only the facade's SPIFFE ID: the
/// proxy's own rustls config (`spiffe::tls::client_config`), used directly.
pub fn mtls_config(source: &Arc<dyn SvidSource>, facade_id: &str) -> rustls::ClientConfig {
    let id: SpiffeId = tenantci_core::spiffe::id::spiffe_id("the facade ID", facade_id).unwrap();
    tenantci_core::spiffe::tls::client_config(source.clone(), id)
}

pub fn mtls(source: &Arc<dyn SvidSource>, facade_id: &str, conn: Conn) -> reqwest::Client {
    client(mtls_config(source, facade_id), conn)
}

/// Paths (c) and (d): plain HTTP on loopback to a `tenantci executor-proxy`, as the runner
/// talks to its sidecar.
pub fn to_proxy() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Whether a second connection with `tls` to `url`'s host resumes the first one's session:
/// what the "fresh connection, resumable" rows measure (a TLS 1.3 resumption or a full
/// handshake after all).
pub async fn resumes(tls: rustls::ClientConfig, url: &str) -> bool {
    let addr = url.strip_prefix("https://").unwrap().trim_end_matches('/');
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let name = rustls::pki_types::ServerName::try_from(
        tenantci_core::spiffe::tls::SERVER_NAME.to_string(),
    )
    .unwrap();
    let ip_name =
        rustls::pki_types::ServerName::try_from(addr.rsplit_once(':').unwrap().0.to_string())
            .unwrap_or(name);
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut s = tls.connect(ip_name.clone(), tcp).await.unwrap();
        // A TLS 1.3 server sends its tickets after the handshake: read until they are in.
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        s.write_all(b"GET /nothing HTTP/1.1\r\nhost: facade\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink).await;
        kinds.push(s.get_ref().1.handshake_kind());
    }
    kinds[1] == Some(rustls::HandshakeKind::Resumed)
}
