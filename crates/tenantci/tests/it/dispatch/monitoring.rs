//! Monitoring a running dispatcher from outside its Pod or host: the opt-in metrics listener
//! and the certificate expiry it exports (the alert rules over these series are tested with
//! promtool: `ship::`'s alert rule tests).

use std::net::SocketAddr;

use super::harness::World;
use crate::util::{assert_exit, stderr};

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:{}{path}", addr.port());
    let r = reqwest::get(&url).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A non-loopback metrics address without `status.expose_metrics` is refused at start (exit
/// 2, one sentence naming both keys) while a running dispatcher carries on; with the opt-in
/// the listener serves /metrics and nothing else, and health stays on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_are_served_beyond_loopback_only_with_the_opt_in() {
    let mut w = World::start(1).await;
    let running = w.dispatcher("d1").await;
    running.wait_up().await;
    w.base_mut().status.metrics_listen = Some("0.0.0.0:0".parse().unwrap());
    let out = w.run_dispatcher_to_exit("d2");
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("status.metrics_listen = 0.0.0.0:0, which is not loopback, without status.expose_metrics = true"),
        "{err}"
    );
    assert!(
        err.contains("help:") || err.contains("fix the file"),
        "{err}"
    );
    // The running instance is undisturbed: it still claims and runs a task.
    let t = w
        .claimed(w.enqueue("undisturbed", "s3cr3t-undisturbed").await)
        .await;
    w.executor(t).await.run(t).await;
    w.assert_succeeded_once(t).await;
    drop(running);

    w.base_mut().status.expose_metrics = true;
    let d = w.dispatcher("d3").await;
    let addr = d
        .metrics_listener
        .expect("the listening line names the metrics listener");
    assert!(addr.ip().is_unspecified(), "{addr}");
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("tenantci_dispatch_leader "), "{body}");
    assert!(
        body.contains("tenantci_dispatch_facade_cert_expiry_days "),
        "{body}"
    );
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            get(addr, path).await.0,
            404,
            "{path}: health stays on loopback"
        );
    }
    w.all_cleaned_up().await;
}

/// On the gateway path the dispatcher's own client certificate (720 h from `dispatch init`)
/// is exported by user, with the days it has left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_minted_credentials_expiry_is_exported() {
    let w = World::start_via_init().await;
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    let text = d.metrics().await.unwrap();
    let days: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "tenantci_dispatch_credential_expiry_days{user=\"tenantci-dispatcher\"} ",
            )
        })
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!((29.9..=30.0).contains(&days), "720h: {days}");
}
