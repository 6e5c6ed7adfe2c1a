//! Real kubectl through the tunnel with the scoped credential: list, create, watch; revoking
//! the credential cuts the open watch; 200 stalled handshakes do not stop a valid client.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use super::{blocking, gateway, runner_host};
use crate::util::{assert_exit, stderr, stdout, tenantci};
use tenantci_testkit::wait::{eventually, eventually_blocking};

const PODS: &str = "/api/v1/namespaces/gitlab-runner/pods";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_creates_and_watches_through_the_front_until_revoked() {
    let gw = gateway(&[]).await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let creds = gw.creds();

    let o = blocking(host.kubectl(&creds, &["get", "pods", "-n", "gitlab-runner"])).await;
    assert_exit(&o, 0);
    let o = blocking(host.kubectl(
        &creds,
        &[
            "create",
            "configmap",
            "through-front",
            "-n",
            "gitlab-runner",
            "--from-literal=k=v",
        ],
    ))
    .await;
    assert_exit(&o, 0);
    // The scoped credential stays scoped: RBAC is the apiserver's, end to end.
    let o = blocking(host.kubectl(&creds, &["get", "secrets", "-n", "kube-system"])).await;
    assert!(
        stderr(&o).to_lowercase().contains("forbidden"),
        "{}",
        stderr(&o)
    );

    // A watch through the tunnel sees a change made afterwards.
    let mut watch = host.kubectl(
        &creds,
        &[
            "get",
            "configmaps",
            "-n",
            "gitlab-runner",
            "--watch",
            "-o",
            "name",
        ],
    );
    watch.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut watch = tenantci_testkit::process::Process::spawn(&mut watch);
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watch.child().stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let seen = |rx: &std::sync::mpsc::Receiver<String>, name: &str| {
        let want = format!("configmap/{name}");
        eventually_blocking(&format!("the watch to show {name}"), || {
            rx.try_iter().find(|l| *l == want).map(|_| ())
        })
    };
    let rx = tokio::task::spawn_blocking(move || {
        seen(&rx, "through-front");
        rx
    })
    .await
    .unwrap();
    let o = blocking(host.kubectl(
        &creds,
        &["create", "configmap", "after-watch", "-n", "gitlab-runner"],
    ))
    .await;
    assert_exit(&o, 0);
    let _rx = tokio::task::spawn_blocking(move || {
        seen(&rx, "after-watch");
        rx
    })
    .await
    .unwrap();

    // Revoking the credential cuts the open watch (kubectl exits) and refuses new connections.
    let mut revoke = tenantci();
    revoke
        .args(["front", "revoke", "--config"])
        .arg(gw.config())
        .arg("--cert")
        .arg(creds.join("tls.crt"));
    let o = blocking(revoke).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("is denied"), "{}", stdout(&o));
    let mut watch = tokio::task::spawn_blocking(move || {
        eventually_blocking("the revoked watch to end", || {
            watch.child().try_wait().unwrap().map(|_| ())
        });
        watch
    })
    .await
    .unwrap();
    watch.kill();
    eventually("the audit line of the cut tunnel", || async {
        gw.audit()
            .lines()
            .any(|l| l.contains("end=\"revoked\"") || l.contains("end=revoked"))
            .then_some(())
    })
    .await;
    let before = gw.apiserver_connections();
    let o = blocking(host.curl(&creds, PODS)).await;
    assert_ne!(
        o.status.code(),
        Some(0),
        "a revoked credential still passes"
    );
    assert_eq!(
        gw.apiserver_connections(),
        before,
        "a revoked client reached the apiserver"
    );

    // `front status` lists the serial.
    let mut status = tenantci();
    status
        .args(["front", "status", "-o", "json", "--config"])
        .arg(gw.config());
    let o = blocking(status).await;
    assert_exit(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["denied"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(
        s["clusters"][0]["allowed"][0],
        "CN=gitlab-runner, O=gitlab-runner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_stalled_handshakes_do_not_stop_a_valid_client() {
    // The rate bound above the stallers, so the point is the handshakes, not the rate.
    let gw = gateway(&[("new_per_second", 1000)]).await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let mut stalled = Vec::new();
    for _ in 0..200 {
        // Connected, and then silent: no ClientHello ever comes.
        stalled.push(
            tokio::net::TcpStream::connect(&gw.front_addr)
                .await
                .unwrap(),
        );
    }
    let o = blocking(host.kubectl(&gw.creds(), &["get", "pods", "-n", "gitlab-runner"])).await;
    assert_exit(&o, 0);
    // The stallers are still held open by the front (their handshake timeout has not passed).
    let mut byte = [0u8; 1];
    let still_open = stalled[0].try_read(&mut byte);
    assert!(
        matches!(still_open, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{still_open:?}"
    );
    drop(stalled);
}
