//! The remote runner's side through the front: `bootstrap runner` on the gateway (credential,
//! RBAC), one bundle copied, `front unpack` and `front connect` on the runner host (here on
//! 127.0.0.1, config.toml's `host` as gitlab-runner will use it, the front on 127.0.0.1 too),
//! `runner gitlab-config` writing the remote entry, and `runner check` passing through it.
//! Then the same in two commands on two hosts (`bootstrap runner --remote`, `front unpack
//! --config`), each re-run changing nothing on disk or in the cluster.

use std::path::{Path, PathBuf};

use super::{RunnerHost, blocking, gateway, runner_host};
use crate::util::{assert_exit, mode, stdout, tenantci};
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};

/// `front unpack` into `creds`: gitlab-runner's three files, 0600, and the entry's keys.
async fn unpack(host: &RunnerHost, creds: &Path) {
    let mut unpack = tenantci();
    unpack
        .args(["front", "unpack", "-o", "json", "--bundle"])
        .arg(host.bundle());
    unpack.arg("--dir").arg(creds);
    let o = blocking(unpack).await;
    assert_exit(&o, 0);
    let unpacked: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let section = unpacked["configSection"].as_str().unwrap();
    assert!(
        section.contains(&format!("host = \"{}\"", host.url)),
        "{section}"
    );
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert_eq!(mode(&creds.join(f)), 0o600, "{f}");
    }
}

/// `runner gitlab-config` on the runner host: a new runner at the GitLab double, its entry
/// pointing at the tunnel with the unpacked files.
async fn remote_entry(host: &RunnerHost, creds: &Path, gitlab: &GitlabDouble) -> PathBuf {
    let remote = host.dir.path();
    std::fs::write(remote.join("api-token"), DEFAULT_ACCESS_TOKEN).unwrap();
    let config = remote.join("gitlab-runner/config.toml");
    let mut gc = tenantci();
    gc.args([
        "runner",
        "gitlab-config",
        "--name",
        "tenant-ci",
        "--url",
        &gitlab.url(),
    ])
    .arg("--config")
    .arg(&config)
    .arg("--gitlab-api-token-file")
    .arg(remote.join("api-token"))
    .args([
        "--runner-type",
        "instance_type",
        "--run-untagged",
        "--host",
        &host.url,
    ]);
    for (flag, file) in [
        ("--cert-file", "tls.crt"),
        ("--key-file", "tls.key"),
        ("--ca-file", "ca.crt"),
    ] {
        gc.arg(flag).arg(creds.join(file));
    }
    assert_exit(&blocking(gc).await, 0);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("host = \"{}\"", host.url)), "{text}");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_check_passes_through_the_front_with_the_unpacked_bundle() {
    let gw = gateway(&[]).await;
    let gitlab = GitlabDouble::start().await.unwrap();
    let mut host = runner_host(&gw, &gw.creds(), "127.0.0.1").await;
    assert_eq!(mode(&host.bundle()), 0o600);
    let creds = host.dir.path().join("tenant-ci");
    unpack(&host, &creds).await;
    let config = remote_entry(&host, &creds, &gitlab).await;

    // `host` is the tunnel: runner check can reach the apiserver only through the front.
    let before = gw.apiserver_connections();
    let mut check = tenantci();
    check.args(["runner", "check", "--name", "tenant-ci", "--config"]);
    check.arg(&config);
    let o = blocking(check).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("ok"), "{}", stdout(&o));
    let after = gw.apiserver_connections();
    assert!(after > before, "runner check did not reach the apiserver");
    assert!(gw.audit().contains("CN=gitlab-runner"), "{}", gw.audit());

    // The runner's key is in the bundle (the positive control) and in no log of either side.
    let key = std::fs::read_to_string(creds.join("tls.key")).unwrap();
    let secret = key.lines().nth(1).unwrap();
    let bundle = std::fs::read_to_string(host.bundle()).unwrap();
    assert!(
        bundle.contains(secret),
        "the control: the bundle carries the key"
    );
    let connect_log = std::fs::read_to_string(host.dir.path().join("connect.log")).unwrap();
    assert!(!gw.audit().contains(secret) && !connect_log.contains(secret));

    // SIGTERM stops the runner host's side cleanly (what systemd sends).
    let grace = std::time::Duration::from_secs(20);
    let code = tokio::task::spawn_blocking(move || host.connect.terminate(grace));
    assert_eq!(code.await.unwrap(), Some(0));
}

/// Every file's bytes and mtime, for "a re-run changes nothing".
fn snapshot(files: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    files
        .iter()
        .map(|f| {
            let meta = std::fs::metadata(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (
                f.clone(),
                std::fs::read(f).unwrap(),
                meta.modified().unwrap(),
            )
        })
        .collect()
}

/// Each namespace and RBAC object of the tenant cluster with its resourceVersion.
async fn cluster_objects(gw: &super::Gateway) -> Vec<String> {
    let mut kubectl = std::process::Command::new("kubectl");
    kubectl
        .arg("--kubeconfig")
        .arg(gw.state().join("clusters/ci/tenant-admin.kubeconfig"))
        .args([
            "get",
            "namespaces,clusterroles,clusterrolebindings,roles,rolebindings,deployments",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
        ]);
    let o = blocking(kubectl).await;
    assert_exit(&o, 0);
    let mut lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// `bootstrap runner --remote` on the gateway, for a subject the front does not allow yet.
fn remote_bootstrap(
    gw: &super::Gateway,
    creds: &Path,
    bundle: &Path,
    listen: &str,
) -> std::process::Command {
    let mut cmd = tenantci();
    cmd.args([
        "bootstrap",
        "runner",
        "--forge",
        "gitlab",
        "--cluster",
        "ci",
        "-o",
        "json",
    ])
    .arg("--state-dir")
    .arg(gw.state())
    .arg("--credential-dir")
    .arg(creds)
    .args([
        "--common-name",
        "remote-runner",
        "--remote",
        "--front",
        &gw.front_addr,
    ])
    .arg("--front-config")
    .arg(gw.config())
    .arg("--bundle")
    .arg(bundle)
    .args(["--listen", listen]);
    cmd
}

/// `front unpack --config` on the runner's host: the files and the entry, the runner created
/// at the GitLab double.
fn unpack_with_entry(host_dir: &Path, gitlab: &GitlabDouble) -> std::process::Command {
    let mut cmd = tenantci();
    cmd.args(["front", "unpack", "-o", "json", "--bundle"])
        .arg(host_dir.join("front-bundle.json"))
        .arg("--dir")
        .arg(host_dir.join("tenant-ci"))
        .arg("--config")
        .arg(host_dir.join("gitlab-runner/config.toml"))
        .args(["--gitlab-url", &gitlab.url(), "--name", "tenant-ci"])
        .arg("--gitlab-api-token-file")
        .arg(host_dir.join("api-token"))
        .args(["--runner-type", "instance_type", "--run-untagged"]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_bootstrap_then_unpack_then_runner_check_and_a_rerun_changes_nothing() {
    let gw = gateway(&[]).await;
    let gitlab = GitlabDouble::start().await.unwrap();
    let host_dir = crate::util::scratch();
    let host = host_dir.path();
    std::fs::write(host.join("api-token"), DEFAULT_ACCESS_TOKEN).unwrap();
    let port = super::free_port("127.0.0.1");
    let listen = format!("127.0.0.1:{port}");
    let creds = gw.root().join("remote-creds");
    let bundle = host.join("front-bundle.json");
    let applied = gw.audit().matches("front: applied").count();

    // The gateway: one command.
    let o = blocking(remote_bootstrap(&gw, &creds, &bundle, &listen)).await;
    assert_exit(&o, 0);
    let first: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(first["frontConfig"]["changed"], true, "{first}");
    assert_eq!(first["bundle"]["changed"], true, "{first}");
    assert_eq!(mode(&bundle), 0o600);
    let config = std::fs::read_to_string(gw.config()).unwrap();
    assert!(config.contains("remote-runner"), "{config}");
    // The running front applies its new allow-list entry (the event waited on).
    tenantci_testkit::wait::eventually("the front to apply the allow-list entry", || async {
        (gw.audit().matches("front: applied").count() > applied).then_some(())
    })
    .await;

    // The runner's host: one command, then the tunnel.
    let o = blocking(unpack_with_entry(host, &gitlab)).await;
    assert_exit(&o, 0);
    let unpacked: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        unpacked["written"].as_array().unwrap().len(),
        3,
        "{unpacked}"
    );
    let runner_config = host.join("gitlab-runner/config.toml");
    let text = std::fs::read_to_string(&runner_config).unwrap();
    assert!(
        text.contains(&format!("host = \"https://{listen}\"")),
        "{text}"
    );
    let connect_dir = crate::util::scratch();
    std::fs::copy(&bundle, connect_dir.path().join("front-bundle.json")).unwrap();
    let _tunnel = super::connect(connect_dir, port, "127.0.0.1").await;
    let mut check = tenantci();
    check.args(["runner", "check", "--name", "tenant-ci", "--config"]);
    check.arg(&runner_config);
    let o = blocking(check).await;
    assert_exit(&o, 0);
    assert!(gw.audit().contains("CN=remote-runner"), "{}", gw.audit());

    // Both again: nothing changes, on disk or in the cluster.
    let files = [
        bundle.clone(),
        gw.config(),
        creds.join("tls.crt"),
        creds.join("tls.key"),
        host.join("tenant-ci/tls.crt"),
        host.join("tenant-ci/tls.key"),
        host.join("tenant-ci/ca.crt"),
        runner_config.clone(),
    ];
    let before = (snapshot(&files), cluster_objects(&gw).await);
    let o = blocking(remote_bootstrap(&gw, &creds, &bundle, &listen)).await;
    assert_exit(&o, 0);
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["frontConfig"]["changed"], false, "{again}");
    assert_eq!(again["bundle"]["changed"], false, "{again}");
    let o = blocking(unpack_with_entry(host, &gitlab)).await;
    assert_exit(&o, 0);
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["written"], serde_json::json!([]), "{again}");
    assert_eq!(again["entry"]["action"], "unchanged", "{again}");
    let after = (snapshot(&files), cluster_objects(&gw).await);
    assert!(before == after, "a re-run changed something");
}
