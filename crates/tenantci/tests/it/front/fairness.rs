//! Issue 51: one source address cannot hold the port (300 stalled handshakes from one address,
//! a valid client from another gets through), the outer session is TLS 1.3 only (a real
//! `openssl s_client -tls1_2` is refused before anything reaches the apiserver), and `front
//! connect` caps its local connections.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use super::{Gateway, RunnerHost, blocking, gateway, runner_host, start};
use crate::util::{assert_exit, stderr, tenantci};
use tenantci_testkit::wait::{DEADLINE, eventually};

const PODS: &str = "/api/v1/namespaces/gitlab-runner/pods";

/// The gateway side with `limits` and `handshake_timeout` set: `gateway()` takes numbers only,
/// so its front is stopped and started again on the edited config.
async fn gateway_with(limits: &[(&str, i64)], handshake_timeout: &str) -> Gateway {
    let mut gw = gateway(limits).await;
    gw.front.kill();
    let config = gw.config();
    let mut doc: toml_edit::DocumentMut =
        std::fs::read_to_string(&config).unwrap().parse().unwrap();
    doc["limits"]["handshake_timeout"] = toml_edit::value(handshake_timeout);
    std::fs::write(&config, doc.to_string()).unwrap();
    let mut serve = tenantci();
    serve
        .args(["-v", "front", "serve", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&gw.front_log).unwrap());
    let (front, ready) = start(serve, "front serve").await;
    gw.front = front;
    gw.front_addr = ready["listen"].as_str().unwrap().to_string();
    gw.metrics_addr = ready["metrics"].as_str().unwrap().to_string();
    gw
}

/// A TCP connection to the front from `source`, then silence: no ClientHello ever comes.
pub(super) async fn stall(source: &str, front: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(front.parse().unwrap()).await.unwrap()
}

/// The value of one metric series, 0 when absent.
fn series(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

fn outcome(reason: &str) -> String {
    format!("tenantci_front_connections_total{{cluster=\"\",outcome=\"{reason}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_stalled_handshakes_from_one_address_do_not_hold_the_port() {
    // The stalled sockets come slower than the rates (so the point is the handshakes), and are
    // held two minutes: a valid client cannot get in by outwaiting them. Before the per-source
    // bound, they took all 256 of the port's handshakes and the valid client was refused.
    let rates = [
        ("new_per_second", 1000),
        ("new_per_second_per_source", 1000),
    ];
    let gw = gateway_with(&rates, "120s").await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let (tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..300 {
        let mut s = stall("127.0.0.9", &gw.front_addr).await;
        let tx = tx.clone();
        // Nothing is sent either way: only the front closing the socket ends this read.
        tokio::spawn(async move {
            let _ = s.read(&mut [0u8; 1]).await;
            let _ = tx.send(i);
            std::future::pending::<()>().await
        });
    }
    // The front closes every one beyond the source's 16 handshakes (the default).
    let mut gone = BTreeSet::new();
    while gone.len() < 300 - 16 {
        let i = tokio::time::timeout(DEADLINE, closed.recv()).await;
        gone.insert(
            i.expect("the front to close the stalled sockets beyond 16")
                .unwrap(),
        );
    }
    let o = blocking(host.kubectl(&gw.creds(), &["get", "pods", "-n", "gitlab-runner"])).await;
    assert_exit(&o, 0);
    // Those within the bound, the first 16, are still held open by the front.
    while let Ok(i) = closed.try_recv() {
        gone.insert(i);
    }
    assert_eq!(
        gone,
        (16..300).collect(),
        "other sockets than those beyond 16 were closed"
    );

    // Refused by the source's own bound, not the port's, and counted by reason.
    let audit = gw.audit();
    assert!(audit.contains("end=\"source_handshakes_full\""), "{audit}");
    let metrics = gw.metrics().await;
    let own = series(&metrics, &outcome("source_handshakes_full"));
    assert_eq!(own, 284, "{metrics}");
    for port in ["source_rate_limited", "rate_limited", "handshakes_full"] {
        assert_eq!(series(&metrics, &outcome(port)), 0, "{metrics}");
    }
    assert_eq!(
        series(&metrics, "tenantci_front_handshakes_pending"),
        16,
        "{metrics}"
    );
}

/// `openssl s_client` with the runner's own credential, naming the cluster by ALPN.
fn s_client(gw: &Gateway, version: &str) -> Command {
    let creds = gw.creds();
    let mut c = Command::new("openssl");
    c.args(["s_client", version, "-alpn", "tenantci-front/1/ci"])
        .args(["-connect", &gw.front_addr, "-servername", "front.test"])
        .arg("-cert")
        .arg(creds.join("tls.crt"))
        .arg("-key")
        .arg(creds.join("tls.key"))
        .arg("-CAfile")
        .arg(gw.front_dir().join("front-ca.crt"))
        .args(["-verify_return_error", "-brief"])
        .stdin(Stdio::null());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_1_2_client_is_refused_before_the_apiserver() {
    let gw = gateway(&[]).await;
    // The same credential and command under TLS 1.3 passes: what follows is the version alone.
    let before = gw.apiserver_connections();
    let o = blocking(s_client(&gw, "-tls1_3")).await;
    assert_exit(&o, 0);
    // (A TLS 1.3 client ends its handshake before the front has checked its certificate: the
    // apiserver's count is what says it passed.)
    eventually(
        "the TLS 1.3 client's tunnel to reach the apiserver",
        || async { (gw.apiserver_connections() > before).then_some(()) },
    )
    .await;

    let before = gw.apiserver_connections();
    let o = blocking(s_client(&gw, "-tls1_2")).await;
    assert_ne!(o.status.code(), Some(0), "TLS 1.2 passed: {}", stderr(&o));
    eventually("the front's audit line of the TLS 1.2 client", || async {
        gw.audit().contains("end=\"tls_version\"").then_some(())
    })
    .await;
    assert_eq!(
        gw.apiserver_connections(),
        before,
        "a TLS 1.2 client reached the apiserver"
    );
    let metrics = gw.metrics().await;
    let refused = "tenantci_front_connections_total{cluster=\"ci\",outcome=\"tls_version\"} 1";
    assert!(metrics.contains(refused), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_connect_closes_local_connections_beyond_its_cap() {
    let gw = gateway(&[]).await;
    // The bundle of a runner host, served again with --max-connections 2.
    let RunnerHost { dir, connect, url } = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    drop(connect);
    let log = dir.path().join("connect-capped.log");
    let mut cmd = tenantci();
    cmd.args(["front", "connect", "--max-connections", "2", "--bundle"])
        .arg(dir.path().join("front-bundle.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let (connect, _ready) = start(cmd, "front connect").await;
    let host = RunnerHost { dir, connect, url };
    let listen = host.url.trim_start_matches("https://").to_string();

    // Two local connections hold both places (each a tunnel through the front)...
    let first = TcpStream::connect(&listen).await.unwrap();
    let _second = TcpStream::connect(&listen).await.unwrap();
    // ...so the third is closed at once, and the warning says which flag to raise.
    let mut third = TcpStream::connect(&listen).await.unwrap();
    let read = tokio::time::timeout(DEADLINE, third.read(&mut [0u8; 1])).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the third local connection was not closed: {read:?}"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("--max-connections"), "{said}");

    // One place given back, a request passes again.
    drop(first);
    eventually("a place under --max-connections to come back", || async {
        let o = blocking(host.curl(&gw.creds(), PODS)).await;
        (o.status.code() == Some(0)).then_some(())
    })
    .await;
}
