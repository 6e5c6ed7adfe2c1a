//! Audit without floods: 5,000 refused handshakes (bytes that are not TLS, and TLS without a
//! client certificate) write a few dozen audit lines, every refusal still accounted for in a
//! line of its own or a summary's count, while each accepted tunnel keeps its own line.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Gateway, blocking, gateway, runner_host};
use crate::util::assert_exit;
use tenantci_testkit::wait::eventually;

const FLOOD: usize = 5_000;
/// Of the flood, ClientHellos without a client certificate (a full handshake each).
const NO_CERT: usize = 500;
const TUNNELS: usize = 5;

/// Bytes that are not a ClientHello: refused as `handshake_failed`.
async fn not_tls(front: &str) {
    let Ok(mut tcp) = TcpStream::connect(front).await else {
        return;
    };
    let _ = tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut sink = Vec::new();
    let _ = tcp.read_to_end(&mut sink).await;
}

/// TLS 1.3 with the front's CA but no client certificate: refused as `no_certificate`.
async fn no_certificate(front: &str, connector: &tokio_rustls::TlsConnector) {
    let Ok(tcp) = TcpStream::connect(front).await else {
        return;
    };
    let name = rustls::pki_types::ServerName::try_from("front.test").unwrap();
    if let Ok(mut tls) = connector.connect(name, tcp).await {
        let mut sink = Vec::new();
        let _ = tls.read_to_end(&mut sink).await;
    }
}

fn connector(gw: &Gateway) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    tenantci_core::tls::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(gw.front_dir().join("front-ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![tenantci_front::alpn_for("ci")];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The number after `key=` in `line`.
fn field(line: &str, key: &str) -> u64 {
    let at = line.find(&format!("{key}=")).unwrap() + key.len() + 1;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

fn is_refusal_line(l: &str) -> bool {
    l.contains("front connection")
        && (l.contains("end=\"handshake_failed\"") || l.contains("end=\"no_certificate\""))
}

fn tunnel_lines(audit: &str) -> usize {
    audit
        .lines()
        .filter(|l| {
            l.contains("front connection")
                && l.contains("CN=gitlab-runner")
                && l.contains("end=\"closed\"")
        })
        .count()
}

/// Refusals accounted so far: lines of their own plus the summaries' counts.
fn accounted(audit: &str) -> u64 {
    let own = audit.lines().filter(|l| is_refusal_line(l)).count() as u64;
    let summed: u64 = audit
        .lines()
        .filter(|l| l.contains("front refusals summarised"))
        .map(|l| field(l, "count"))
        .sum();
    own + summed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_handshakes_writes_a_few_dozen_lines_and_every_tunnel_its_own() {
    let big = 1_000_000;
    let gw = gateway(&[
        ("new_per_second", big),
        ("new_per_second_per_source", big),
        ("max_handshakes", 4096),
        ("max_handshakes_per_source", 4096),
    ])
    .await;
    let creds = gw.creds();
    let host = runner_host(&gw, &creds, "127.0.0.2").await;
    let connector = connector(&gw);
    let front = gw.front_addr.clone();
    let flood = tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..FLOOD {
            if set.len() >= 64 {
                set.join_next().await;
            }
            let (front, connector) = (front.clone(), connector.clone());
            set.spawn(async move {
                if i % (FLOOD / NO_CERT) == 0 {
                    no_certificate(&front, &connector).await;
                } else {
                    not_tls(&front).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
    // Accepted tunnels while the flood runs: one tunnel per curl.
    for _ in 0..TUNNELS {
        assert_exit(&blocking(host.curl(&creds, "/version")).await, 0);
    }
    flood.await.unwrap();

    let audit = eventually("every refusal and tunnel in the audit", || async {
        let audit = gw.audit();
        (accounted(&audit) >= FLOOD as u64 && tunnel_lines(&audit) >= TUNNELS).then_some(audit)
    })
    .await;
    assert_eq!(accounted(&audit), FLOOD as u64, "counted once each");
    assert_eq!(
        tunnel_lines(&audit),
        TUNNELS,
        "each accepted tunnel has its line"
    );
    let lines = audit
        .lines()
        .filter(|l| l.contains("front connection") || l.contains("front refusals summarised"))
        .count();
    assert!(
        lines <= 48,
        "{lines} audit lines for {FLOOD} refusals:\n{audit}"
    );
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("tenantci_front_refusals_summarised_total"),
        "{metrics}"
    );
}
