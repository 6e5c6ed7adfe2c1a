//! The remote runner's side through the front: `bootstrap runner` on the gateway (credential,
//! RBAC), one bundle copied, `front unpack` and `front connect` on the runner host (here on
//! 127.0.0.1, config.toml's `host` as gitlab-runner will use it, the front on 127.0.0.1 too),
//! `runner gitlab-config` writing the remote entry, and `runner check` passing through it.

use super::{blocking, gateway, runner_host};
use crate::util::{assert_exit, mode, stdout, tenantci};
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_check_passes_through_the_front_with_the_unpacked_bundle() {
    let gw = gateway(&[]).await;
    let gitlab = GitlabDouble::start().await.unwrap();
    let host = runner_host(&gw, &gw.creds(), "127.0.0.1").await;
    let remote = host.dir.path();
    assert_eq!(mode(&host.bundle()), 0o600);

    let creds = remote.join("tenant-ci");
    let mut unpack = tenantci();
    unpack
        .args(["front", "unpack", "-o", "json", "--bundle"])
        .arg(host.bundle())
        .arg("--dir")
        .arg(&creds);
    let o = blocking(unpack).await;
    assert_exit(&o, 0);
    let unpacked: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        unpacked["configSection"]
            .as_str()
            .unwrap()
            .contains(&format!("host = \"{}\"", host.url))
    );
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert_eq!(mode(&creds.join(f)), 0o600, "{f}");
    }

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
    ])
    .arg("--cert-file")
    .arg(creds.join("tls.crt"))
    .arg("--key-file")
    .arg(creds.join("tls.key"))
    .arg("--ca-file")
    .arg(creds.join("ca.crt"));
    assert_exit(&blocking(gc).await, 0);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("host = \"{}\"", host.url)), "{text}");

    let before = gw.apiserver_connections();
    let mut check = tenantci();
    check
        .args(["runner", "check", "--name", "tenant-ci", "--config"])
        .arg(&config);
    let o = blocking(check).await;
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("ok"), "{}", stdout(&o));
    assert!(
        gw.apiserver_connections() > before,
        "runner check did not go through the front"
    );
    assert!(gw.audit().contains("CN=gitlab-runner"), "{}", gw.audit());

    // SIGTERM stops the runner host's side cleanly (what systemd sends).
    let mut host = host;
    let code = tokio::task::spawn_blocking(move || {
        host.connect.terminate(std::time::Duration::from_secs(20))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0));
}
