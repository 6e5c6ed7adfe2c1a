//! Real kubectl through the tunnel with the scoped credential: list, create, watch; revoking
//! the credential cuts the open watch; 200 stalled handshakes from 20 addresses do not stop a
//! valid client.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc::Receiver;

use super::{Gateway, RunnerHost, blocking, gateway, runner_host};
use crate::util::{assert_exit, stderr, stdout, tenantci};
use tenantci_testkit::process::Process;
use tenantci_testkit::wait::{eventually, eventually_blocking};

const PODS: &str = "/api/v1/namespaces/gitlab-runner/pods";

/// `kubectl get configmaps --watch -o name` through the tunnel, its lines on a channel.
pub(super) struct Watch {
    process: Process,
    lines: Receiver<String>,
}

impl Watch {
    pub(super) fn start(host: &RunnerHost, creds: &Path) -> Watch {
        Self::start_with(host, creds, &[])
    }

    /// [`Watch::start`] with more flags (the last of a repeated flag wins).
    pub(super) fn start_with(host: &RunnerHost, creds: &Path, extra: &[&str]) -> Watch {
        let mut args = vec![
            "get",
            "configmaps",
            "-n",
            "gitlab-runner",
            "--watch",
            "-o",
            "name",
        ];
        args.extend_from_slice(extra);
        let mut cmd = host.kubectl(creds, &args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut process = Process::spawn(&mut cmd);
        let (tx, lines) = std::sync::mpsc::channel();
        let out = process.child().stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Watch { process, lines }
    }

    /// Waits until the watch has shown ConfigMap `name`.
    pub(super) async fn shows(self, name: &str) -> Watch {
        let want = format!("configmap/{name}");
        tokio::task::spawn_blocking(move || {
            eventually_blocking(&format!("the watch to show {want}"), || {
                self.lines.try_iter().find(|l| *l == want).map(|_| ())
            });
            self
        })
        .await
        .unwrap()
    }

    /// Whether kubectl still runs.
    pub(super) fn running(&mut self) -> bool {
        self.process.child().try_wait().unwrap().is_none()
    }

    /// Waits until kubectl has exited.
    async fn ended(mut self) {
        tokio::task::spawn_blocking(move || {
            eventually_blocking("the watch to end", || {
                self.process.child().try_wait().unwrap().map(|_| ())
            });
        })
        .await
        .unwrap();
    }
}

async fn kubectl_ok(host: &RunnerHost, creds: &Path, args: &[&str]) {
    assert_exit(&blocking(host.kubectl(creds, args)).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_creates_and_watches_through_the_front_until_revoked() {
    let gw = gateway(&[]).await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let creds = gw.creds();
    let ns = ["-n", "gitlab-runner"];
    kubectl_ok(&host, &creds, &["get", "pods", ns[0], ns[1]]).await;
    let create = [
        "create",
        "configmap",
        "through-front",
        ns[0],
        ns[1],
        "--from-literal=k=v",
    ];
    kubectl_ok(&host, &creds, &create).await;
    // The scoped credential stays scoped: RBAC is the apiserver's, end to end.
    let o = blocking(host.kubectl(&creds, &["get", "secrets", "-n", "kube-system"])).await;
    let said = stderr(&o).to_lowercase();
    assert!(said.contains("forbidden"), "{said}");

    // A watch through the tunnel sees a change made after it started.
    let watch = Watch::start(&host, &creds).shows("through-front").await;
    kubectl_ok(
        &host,
        &creds,
        &["create", "configmap", "after-watch", ns[0], ns[1]],
    )
    .await;
    let watch = watch.shows("after-watch").await;

    // Revoking the credential cuts the open watch (kubectl exits) and refuses new connections.
    let mut revoke = tenantci();
    revoke
        .args(["front", "revoke", "--config"])
        .arg(gw.config());
    revoke.arg("--cert").arg(creds.join("tls.crt"));
    let o = blocking(revoke).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("is denied"), "{}", stdout(&o));
    watch.ended().await;
    // The cut tunnel's own line (bytes flowed), not only the refusals of kubectl's retries.
    eventually("the audit line of the cut watch", || async {
        let audit = gw.audit();
        let cut = |l: &&str| l.contains("end=\"revoked\"") && !l.contains("bytes_down=0 ");
        audit.lines().any(|l| cut(&l)).then_some(())
    })
    .await;
    let before = gw.apiserver_connections();
    let o = blocking(host.curl(&creds, PODS)).await;
    assert_ne!(o.status.code(), Some(0), "a revoked credential passed");
    let after = gw.apiserver_connections();
    assert_eq!(after, before, "a revoked client reached the apiserver");
    status_lists_the_serial(&gw).await;
}

async fn status_lists_the_serial(gw: &Gateway) {
    let mut status = tenantci();
    status.args(["front", "status", "-o", "json", "--config"]);
    status.arg(gw.config());
    let o = blocking(status).await;
    assert_exit(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["denied"].as_array().unwrap().len(), 1, "{s}");
    let allowed = &s["clusters"][0]["allowed"][0];
    assert_eq!(allowed, "CN=gitlab-runner, O=gitlab-runner");
}

/// The port's own handshake pool: 200 stalled handshakes from 20 addresses, each within its
/// per-address bound (10 of 16), so only the global pool (256) holds them; a valid client
/// still passes. One address alone is fairness.rs's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_stalled_handshakes_do_not_stop_a_valid_client() {
    // The rate bound above the stallers, so the point is the handshakes, not the rate.
    let gw = gateway(&[("new_per_second", 1000)]).await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let mut stalled = Vec::new();
    for i in 0..200 {
        let source = format!("127.0.1.{}", 1 + i % 20);
        stalled.push(super::fairness::stall(&source, &gw.front_addr).await);
    }
    let o = blocking(host.kubectl(&gw.creds(), &["get", "pods", "-n", "gitlab-runner"])).await;
    assert_exit(&o, 0);
    // The stallers are all still held open by the front (their handshake timeout has not
    // passed, and no address went over its own bound).
    let mut byte = [0u8; 1];
    for s in &stalled {
        let still_open = s.try_read(&mut byte);
        assert!(
            matches!(still_open, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{still_open:?}"
        );
    }
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_at_its_cap_is_refused_until_its_tunnel_closes() {
    let gw = gateway(&[("max_per_subject", 1)]).await;
    let host = runner_host(&gw, &gw.creds(), "127.0.0.2").await;
    let creds = gw.creds();
    let create = ["create", "configmap", "held", "-n", "gitlab-runner"];
    kubectl_ok(&host, &creds, &create).await;
    // The open watch holds the subject's one tunnel.
    let watch = Watch::start(&host, &creds).shows("held").await;
    let before = gw.apiserver_connections();
    let o = blocking(host.curl(&creds, PODS)).await;
    assert_ne!(o.status.code(), Some(0), "a second tunnel passed the cap");
    assert_eq!(gw.apiserver_connections(), before);
    assert!(
        gw.audit().contains("end=\"subject_full\""),
        "{}",
        gw.audit()
    );
    // Its tunnel closed, the subject's place is given back.
    drop(watch);
    eventually("the subject's place to come back", || async {
        let o = blocking(host.curl(&creds, PODS)).await;
        (o.status.code() == Some(0)).then_some(())
    })
    .await;
}
