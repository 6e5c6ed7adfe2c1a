//! Revocation fails closed: the deny-list deleted while the front serves keeps the last good
//! list in force (a warning and a metric say why); a front whose list is missing does not
//! start; an entry names its cluster, a bare serial applies to every cluster; `front status`
//! says where the list lives.

use super::refusals::assert_refused;
use super::{Gateway, blocking, gateway, runner_host};
use crate::util::{assert_exit, stderr, stdout, tenantci};
use tenantci_testkit::wait::eventually;

async fn revoke(gw: &Gateway, args: &[&str]) -> std::process::Output {
    let mut cmd = tenantci();
    cmd.args(["front", "revoke", "-o", "json", "--config"])
        .arg(gw.config())
        .args(args);
    blocking(cmd).await
}

/// The order of events this guards against: a certificate revoked, the front has read the
/// list, the file is deleted, the revoked certificate knocks again. Before the fix the front
/// read the missing file as an empty list and let it in within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_deny_list_keeps_revoked_certificates_refused() {
    let gw = gateway(&[]).await;
    let creds = gw.creds();
    let o = revoke(&gw, &["--cert", creds.join("tls.crt").to_str().unwrap()]).await;
    assert_exit(&o, 0);
    let revoked: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        revoked["clusters"],
        serde_json::json!(["ci"]),
        "--cert names its own cluster"
    );
    eventually("the front to read the revocation", || async {
        gw.audit().contains("deny-list changed").then_some(())
    })
    .await;

    let list = gw.front_dir().join("denied-serials");
    std::fs::remove_file(&list).unwrap();
    eventually("the front to say the list is gone", || async {
        gw.audit()
            .contains("cannot read the deny-list")
            .then_some(())
    })
    .await;
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("tenantci_front_deny_list_stale 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tenantci_front_denied_serials 1"),
        "{metrics}"
    );
    let host = runner_host(&gw, &creds, "127.0.0.2").await;
    assert_refused(&gw, &host, &creds, "revoked").await;

    // Status says where the list lives and that it does not read.
    let mut status = tenantci();
    status
        .args(["front", "status", "--config"])
        .arg(gw.config());
    let o = blocking(status).await;
    assert_exit(&o, 1);
    let said = stdout(&o);
    assert!(said.contains(&list.display().to_string()), "{said}");
    assert!(said.contains("UNREADABLE"), "{said}");

    // `front revoke` does not recreate a lost list (that would drop every entry it held).
    let o = revoke(&gw, &["--serial", "1a"]).await;
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(!list.exists());

    // A front that starts now refuses, with the sentence that says how to create it.
    let mut serve = tenantci();
    serve.args(["front", "serve", "--config"]).arg(gw.config());
    let o = blocking(serve).await;
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("install -m 600 /dev/null"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_names_its_cluster_and_a_bare_serial_every_cluster() {
    let mut gw = gateway(&[]).await;
    let o = revoke(&gw, &["--serial", "0A:0B", "--cluster", "ci"]).await;
    assert_exit(&o, 0);
    let o = revoke(&gw, &["--serial", "0c"]).await;
    assert_exit(&o, 0);
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(out["clusters"].is_null(), "{out}");
    let o = revoke(&gw, &["--serial", "0d", "--cluster", "elsewhere"]).await;
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("not served by this front"),
        "{}",
        stderr(&o)
    );

    let path = gw.front_dir().join("denied-serials");
    let list = std::fs::read_to_string(&path).unwrap();
    assert!(list.lines().any(|l| l.trim() == "ci a0b"), "{list}");
    assert!(list.lines().any(|l| l.trim() == "c"), "{list}");
    assert!(!list.contains(" d"), "{list}");

    // A hand-edited entry for a cluster the front does not serve refuses nothing: a front
    // starting on that list says so (the first one stopped: one front per config).
    std::fs::write(&path, format!("{list}elswhere 0e\n")).unwrap();
    stop(&mut gw.front).await;
    let log = gw.root().join("second-front.log");
    let mut serve = tenantci();
    serve
        .args(["front", "serve", "--config"])
        .arg(gw.config())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let (mut second, _ready) = super::start(serve, "a second front serve").await;
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("names cluster `elswhere`"), "{said}");

    let mut status = tenantci();
    status
        .args(["front", "status", "-o", "json", "--config"])
        .arg(gw.config());
    let o = blocking(status).await;
    assert_exit(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(s["denyList"]["problem"].is_null(), "{s}");
    let denied = s["denied"].as_array().unwrap();
    assert!(
        denied
            .iter()
            .any(|d| d["cluster"] == "ci" && d["serial"] == "a0b"),
        "{s}"
    );
    assert!(
        denied
            .iter()
            .any(|d| d["cluster"].is_null() && d["serial"] == "c"),
        "{s}"
    );
    stop(&mut second).await;
    // No front running: status says so in one sentence, exit 2.
    let mut status = tenantci();
    status
        .args(["front", "status", "--config"])
        .arg(gw.config());
    let o = blocking(status).await;
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("no front is running for"),
        "{}",
        stderr(&o)
    );
}

async fn stop(p: &mut tenantci_testkit::process::Process) {
    tokio::task::block_in_place(|| p.terminate(std::time::Duration::from_secs(20)));
}
