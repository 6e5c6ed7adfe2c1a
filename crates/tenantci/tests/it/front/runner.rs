//! The remote runner's side through the front: `bootstrap runner` on the gateway (credential,
//! RBAC), one bundle copied, `front unpack` and `front connect` on the runner host (here on
//! 127.0.0.1, config.toml's `host` as gitlab-runner will use it, the front on 127.0.0.1 too),
//! `runner gitlab-config` writing the remote entry, and `runner check` passing through it.

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
