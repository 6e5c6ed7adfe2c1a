//! Certificates an attacker makes with the cluster's own ClientCA, written by pyca/cryptography
//! (attack_certs.py), not by tenantci's minting code: `system:masters` as a BMPString or
//! T61String O, two CNs in either order or in one RDN, an empty CN or none, an O in a string
//! type Go does not read, a Kubernetes UID attribute, a group beyond the allowed one.
//! Each is refused at the front with its reason in the audit line and no connection at the
//! simulator's apiserver; `front bundle`, `bootstrap runner` (the credential decision) and
//! `runner check` refuse the same files; and the simulator, given them directly, reads them as
//! kube-apiserver does (the BMPString group is system:masters, the last CN is the user).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::refusals::{assert_refused, client_ca_files, forged_host};
use super::{Gateway, blocking, gateway};
use crate::util::{assert_exit, stderr, stdout, tenantci};

/// The attack certificates, the reason the front gives for each, and whether `front bundle`
/// refuses it too (it does not know the front's allow-list: a group the allow-list lacks is
/// the front's alone to refuse).
const CASES: [(&str, &str, bool); 11] = [
    ("masters-bmp", "system_masters", true),
    ("masters-t61", "system_masters", true),
    ("two-cn-admin-last", "subject_several_cn", true),
    ("two-cn-runner-last", "subject_several_cn", true),
    ("two-cn-one-rdn", "subject_several_cn", true),
    ("empty-cn", "subject_empty_value", true),
    ("no-cn", "subject_no_cn", true),
    ("o-universal", "subject_undecodable", true),
    ("kube-uid", "subject_unsteady", true),
    ("o-system-nodes", "system_group", true),
    ("o-extra-group", "not_allowed", false),
];

/// The pyca/cryptography release the certificates are made with (its `_validate=False` lets an
/// empty CN through).
const CRYPTOGRAPHY: &str = "48.*";

/// A python with cryptography, from its venv under target/ (`util::pip_venv`).
fn pyca_python() -> PathBuf {
    crate::util::pip_venv(
        "pyca-venv",
        &format!("cryptography=={CRYPTOGRAPHY}"),
        "python",
    )
}

/// Writes every case's tls.crt and tls.key, signed by cluster `ci`'s ClientCA, beside a copy
/// of the runner credential's ca.crt: one credential directory per case under `out`.
async fn attack_certificates(gw: &Gateway, out: &Path) {
    let (ca_cert, ca_key) = client_ca_files(gw);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/front/attack_certs.py");
    let mut cmd = Command::new(pyca_python());
    cmd.arg(script).arg(ca_cert).arg(ca_key).arg(out);
    assert_exit(&blocking(cmd).await, 0);
    for (case, _, _) in CASES {
        std::fs::copy(gw.creds().join("ca.crt"), out.join(case).join("ca.crt")).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_certificates_are_refused_everywhere_tenantci_decides_on_a_subject() {
    let gw = gateway(&[]).await;
    let out = gw.root().join("attack");
    attack_certificates(&gw, &out).await;
    for (case, reason, bundle_refuses) in CASES {
        let creds = out.join(case);
        let host = forged_host(&gw, &creds).await;
        assert_refused(&gw, &host, &creds, reason).await;
        if bundle_refuses {
            front_bundle_refuses(&gw, &creds).await;
        }
    }
    // The audit names every CN of a two-CN subject, not the one a reader would pick.
    let audit = gw.audit();
    assert!(
        audit.contains("CN=gitlab-runner, CN=tenant-admin"),
        "{audit}"
    );
    let metrics = gw.metrics().await;
    for reason in [
        "subject_several_cn",
        "subject_empty_value",
        "subject_no_cn",
        "subject_undecodable",
        "subject_unsteady",
        "system_group",
    ] {
        let series =
            format!("tenantci_front_connections_total{{cluster=\"ci\",outcome=\"{reason}\"}}");
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }
    bootstrap_refuses_to_keep(&gw, &out.join("two-cn-runner-last")).await;
    runner_check_fails(&gw, &out.join("two-cn-admin-last")).await;
}

async fn front_bundle_refuses(gw: &Gateway, creds: &Path) {
    let bundle = creds.join("bundle.json");
    let b = super::bundle_command(gw, creds, "127.0.0.1:6443", &bundle);
    let o = blocking(b).await;
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("the front never admits it"),
        "{}",
        stderr(&o)
    );
    assert!(!bundle.exists(), "a refused bundle was written");
}

/// `bootstrap runner` over a credential directory holding a two-CN certificate: the credential
/// decision refuses to keep it, and nothing changes there.
async fn bootstrap_refuses_to_keep(gw: &Gateway, attack: &Path) {
    let dir = gw.root().join("creds-two-cn");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.crt", "kubeconfig"] {
        std::fs::copy(gw.creds().join(f), dir.join(f)).unwrap();
    }
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(attack.join(f), dir.join(f)).unwrap();
    }
    let before = std::fs::read(dir.join("tls.crt")).unwrap();
    let mut cmd = super::bootstrap_command(gw.root(), &dir);
    cmd.arg("--dry-run");
    let o = blocking(cmd).await;
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("2 CNs"), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("tls.crt")).unwrap(), before);
}

/// `runner check` of an entry whose cert_file is the two-CN certificate: a failed line that
/// says why.
async fn runner_check_fails(gw: &Gateway, attack: &Path) {
    let config = gw.root().join("gateway-runner/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let creds = gw.creds();
    let swapped = text
        .replace(
            &creds.join("tls.crt").display().to_string(),
            &attack.join("tls.crt").display().to_string(),
        )
        .replace(
            &creds.join("tls.key").display().to_string(),
            &attack.join("tls.key").display().to_string(),
        );
    assert_ne!(swapped, text, "the entry names the credential files");
    let copy = gw.root().join("attack-config.toml");
    std::fs::write(&copy, swapped).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut check = tenantci();
    check.args(["runner", "check", "--config"]).arg(&copy);
    let o = blocking(check).await;
    assert_exit(&o, 1);
    let said = stdout(&o);
    assert!(said.contains("2 CNs"), "{said}");
}

/// kubectl straight at the simulator's apiserver (no front) with an attack certificate.
fn kubectl_direct(gw: &Gateway, creds: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig")
        .arg(gw.creds().join("kubeconfig"))
        .arg("--client-certificate")
        .arg(creds.join("tls.crt"))
        .arg("--client-key")
        .arg(creds.join("tls.key"))
        .args(["--request-timeout", "20s"])
        .arg("--cache-dir")
        .arg(gw.root().join("kcache-direct"))
        .args(args);
    c
}

/// What the front and the checks guard against is real at the simulator, as at kube-apiserver:
/// the BMPString O is the group system:masters (cluster-admin), and with two CNs the user is
/// the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_reads_attack_subjects_as_kube_apiserver_does() {
    let gw = gateway(&[]).await;
    let out = gw.root().join("attack");
    attack_certificates(&gw, &out).await;
    let secrets = ["get", "secrets", "-n", "kube-system", "-o", "name"];
    for case in ["masters-bmp", "masters-t61"] {
        let o = blocking(kubectl_direct(&gw, &out.join(case), &secrets)).await;
        assert_exit(&o, 0);
    }
    // The scoped runner's own certificate may not: the difference is the BMPString group.
    let o = blocking(kubectl_direct(&gw, &gw.creds(), &secrets)).await;
    assert_ne!(o.status.code(), Some(0));
    // Both two-CN certificates carry the runner's group, so a forbidden request names the user
    // the simulator saw: the last CN, in either order.
    for (case, user) in [
        ("two-cn-admin-last", "tenant-admin"),
        ("two-cn-runner-last", "gitlab-runner"),
    ] {
        let o = blocking(kubectl_direct(&gw, &out.join(case), &secrets)).await;
        let said = stderr(&o);
        assert!(said.contains(&format!("User \"{user}\"")), "{case}: {said}");
    }
    // A string type Go does not read: Go refuses the whole certificate (kubectl itself cannot
    // load it: "unsupported string type: 28"), so curl presents it; the simulator answers 401.
    let creds = out.join("o-universal");
    let mut curl = Command::new("curl");
    curl.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "20",
    ])
    .arg("--cacert")
    .arg(gw.creds().join("ca.crt"))
    .arg("--cert")
    .arg(creds.join("tls.crt"))
    .arg("--key")
    .arg(creds.join("tls.key"))
    .arg(format!(
        "{}/api/v1/namespaces/gitlab-runner/pods",
        server(&gw)
    ));
    let o = blocking(curl).await;
    assert_eq!(stdout(&o), "401", "{}", stderr(&o));
}

/// The apiserver URL of the runner's kubeconfig.
fn server(gw: &Gateway) -> String {
    let kubeconfig = std::fs::read_to_string(gw.creds().join("kubeconfig")).unwrap();
    let line = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("a server in the kubeconfig");
    line.trim().trim_matches('"').to_string()
}
