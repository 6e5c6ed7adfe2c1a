//! Each refused certificate is refused at the front, with its reason in the audit line and no
//! connection reaching the simulator's apiserver: another CA, system:masters (signed by the
//! cluster's own ClientCA), a subject outside the allow-list, a revoked serial.

use std::path::{Path, PathBuf};

use super::{Gateway, blocking, connect, gateway, runner_host};
use crate::util::{assert_exit, scratch, tenantci};
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};

const PODS: &str = "/api/v1/namespaces/gitlab-runner/pods";

/// A credential directory like `credential mint`'s, signed by `ca`.
pub(super) fn credential(dir: &Path, gw: &Gateway, ca: &CertificateAuthority, cn: &str, org: &str) {
    let cert = issue::client_cert(
        ca,
        &ClientCertSpec {
            common_name: cn.into(),
            organizations: vec![org.into()],
            valid_for: std::time::Duration::from_secs(3600),
            key_type: KeyType::EcdsaP256,
        },
    )
    .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(gw.creds().join("ca.crt"), dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &cert.key_pem).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Cluster `ci`'s ClientCA certificate and key files.
pub(super) fn client_ca_files(gw: &Gateway) -> (PathBuf, PathBuf) {
    let pki = gw.state().join("clusters/ci/pki");
    (pki.join("client-ca.crt"), pki.join("client-ca.key"))
}

fn client_ca(gw: &Gateway) -> CertificateAuthority {
    let (cert, key) = client_ca_files(gw);
    CertificateAuthority::load(&cert, &key).unwrap()
}

/// A bundle for `creds`, written by hand: `front bundle` itself refuses a system: group.
pub(super) async fn forged_host(gw: &Gateway, creds: &Path) -> super::RunnerHost {
    let good = runner_host(gw, &gw.creds(), "127.0.0.2").await;
    let mut bundle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(good.bundle()).unwrap()).unwrap();
    let listen: std::net::SocketAddr = bundle["listen"].as_str().unwrap().parse().unwrap();
    drop(good);
    bundle["cert"] = std::fs::read_to_string(creds.join("tls.crt"))
        .unwrap()
        .into();
    bundle["key"] = std::fs::read_to_string(creds.join("tls.key"))
        .unwrap()
        .into();
    let dir = scratch();
    let path = dir.path().join("front-bundle.json");
    std::fs::write(&path, serde_json::to_vec(&bundle).unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    connect(dir, listen.port(), "127.0.0.2").await
}

/// One request through a tunnel carrying `creds`: refused, with `reason` in the audit line,
/// and no connection at the apiserver.
pub(super) async fn assert_refused(
    gw: &Gateway,
    host: &super::RunnerHost,
    creds: &Path,
    reason: &str,
) {
    let before = gw.apiserver_connections();
    let o = blocking(host.curl(creds, PODS)).await;
    assert_ne!(o.status.code(), Some(0), "{reason}: passed the front");
    let after = gw.apiserver_connections();
    assert_eq!(after, before, "{reason}: reached the apiserver");
    // The client sees the alert before the front has written its audit line: wait for it.
    // Its own line, or past the audit's rate its count in the next summary.
    let line = format!("end=\"{reason}\"");
    let summed = format!("reason=\"{reason}\"");
    tenantci_testkit::wait::eventually(&format!("{line} in the audit"), || async {
        let audit = gw.audit();
        let found = audit.contains(&line)
            || audit
                .lines()
                .any(|l| l.contains("front refusals summarised") && l.contains(&summed));
        found.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_certificates_never_reach_the_apiserver() {
    let gw = gateway(&[]).await;
    let root = gw.root().to_path_buf();
    let day = std::time::Duration::from_secs(86_400);
    let other_ca = CertificateAuthority::generate("another-ca", day).unwrap();
    let ours = client_ca(&gw);
    let runner = "gitlab-runner";
    let cases = [
        ("other-ca", &other_ca, runner, runner, "bad_certificate"),
        ("masters", &ours, runner, "system:masters", "system_masters"),
        (
            "outsider",
            &ours,
            "someone-else",
            "developers",
            "not_allowed",
        ),
    ];
    for (name, ca, cn, org, reason) in cases {
        let creds = root.join(name);
        credential(&creds, &gw, ca, cn, org);
        let host = forged_host(&gw, &creds).await;
        assert_refused(&gw, &host, &creds, reason).await;
    }

    // Revoked by serial, before it is ever used: an allowed subject, refused all the same.
    let creds = root.join("revoked");
    credential(&creds, &gw, &ours, runner, runner);
    let pem = std::fs::read_to_string(creds.join("tls.crt")).unwrap();
    let serial = tenantci_core::pki::inspect::CertInfo::from_pem(&pem)
        .unwrap()
        .serial_hex;
    let mut revoke = tenantci();
    revoke.args(["front", "revoke", "--serial", &serial, "--note", "leaked"]);
    revoke.arg("--config").arg(gw.config());
    assert_exit(&blocking(revoke).await, 0);
    // The running front logs when it has re-read the list: the event to wait for.
    tenantci_testkit::wait::eventually("the front to re-read its deny-list", || async {
        gw.audit().contains("deny-list changed").then_some(())
    })
    .await;
    let host = runner_host(&gw, &creds, "127.0.0.2").await;
    assert_refused(&gw, &host, &creds, "revoked").await;

    // Each refusal is counted by its reason, as the alerts read them.
    let metrics = gw.metrics().await;
    for reason in [
        "bad_certificate",
        "system_masters",
        "not_allowed",
        "revoked",
    ] {
        let series =
            format!("tenantci_front_connections_total{{cluster=\"ci\",outcome=\"{reason}\"}}");
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }
    assert!(
        metrics.contains("tenantci_front_denied_serials 1"),
        "{metrics}"
    );
    assert!(metrics.contains("tenantci_front_serving_cert_expiry_timestamp_seconds"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_one_sentence_and_nothing_written() {
    let gw = gateway(&[]).await;
    // A config with no allowed subject: the front does not start.
    let config = gw.front_dir().join("empty.toml");
    let text = std::fs::read_to_string(gw.config()).unwrap();
    let cut = text.find("[[cluster]]").unwrap();
    std::fs::write(&config, &text[..cut]).unwrap();
    let mut serve = tenantci();
    serve.args(["front", "serve", "--config"]).arg(&config);
    let o = blocking(serve).await;
    assert_exit(&o, 2);
    assert!(
        crate::util::stderr(&o).contains("no [[cluster]]"),
        "{}",
        crate::util::stderr(&o)
    );

    // A bundle never lands over an existing file, nor for a non-loopback listener.
    let out = gw.root().join("exists.json");
    std::fs::write(&out, "keep").unwrap();
    for (listen, file) in [
        ("127.0.0.1:6443", &out),
        ("0.0.0.0:6443", &gw.root().join("new.json")),
    ] {
        let b = super::bundle_command(&gw, &gw.creds(), listen, file);
        assert_exit(&blocking(b).await, 2);
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
    assert!(!gw.root().join("new.json").exists());

    // `front init` never overwrites.
    let mut init = tenantci();
    init.args(["front", "init", "--cluster", "ci", "--name", "x"])
        .arg("--dir")
        .arg(gw.front_dir())
        .arg("--state-dir")
        .arg(gw.state());
    assert_exit(&blocking(init).await, 2);

    // SIGTERM stops the front cleanly.
    let mut gw = gw;
    let code =
        tokio::task::spawn_blocking(move || gw.front.terminate(std::time::Duration::from_secs(20)))
            .await
            .unwrap();
    assert_eq!(code, Some(0));
}
