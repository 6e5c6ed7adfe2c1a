//! `runner check` on a runner that `bootstrap runner` set up against the simulator and the
//! HTTPS GitLab double (private CA): exit 0, then one thing broken at a time, each seen as
//! exit 1 on the right line, and nothing written by any run.

use std::path::PathBuf;
use std::process::Output;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::Api;
use serde_json::Value;

use super::trust::{tls_ca_file, verify_as_gitlab_runner};
use crate::util::{assert_exit, bootstrap_gitlab, mode, run, scratch, snapshot, stdout, tenantci};
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};
use tenantci_testkit::sim::SimProcess;

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sim: SimProcess,
    gitlab: GitlabDouble,
    gitlab_ca: PathBuf,
}

impl Setup {
    fn config(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml")
    }
    fn creds(&self) -> PathBuf {
        self.root.join("creds")
    }
    /// What a run may not change: the runner's files and the gateway's state.
    fn files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut all = snapshot(&self.root.join("gitlab-runner"));
        all.extend(snapshot(&self.creds()));
        all
    }
}

async fn setup() -> Setup {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci", "other"], &[]);
    let (gitlab, ca_pem) = GitlabDouble::start_tls().await.unwrap();
    let gitlab_ca = root.join("gitlab-ca.pem");
    std::fs::write(&gitlab_ca, ca_pem).unwrap();
    std::fs::write(root.join("api-token"), DEFAULT_ACCESS_TOKEN).unwrap();
    Setup {
        _dir: dir,
        root,
        sim,
        gitlab,
        gitlab_ca,
    }
}

async fn bootstrap(s: &Setup, with_ca: bool) -> Output {
    let mut cmd = bootstrap_gitlab(&s.root.join("state"), &s.creds(), &s.config());
    cmd.args(["--gitlab-url", &s.gitlab.url(), "--gitlab-api-token-file"])
        .arg(s.root.join("api-token"))
        .args(["--runner-type", "instance_type", "--run-untagged"])
        .args(["--gitlab-timeout", "5s"]);
    if with_ca {
        cmd.arg("--gitlab-ca-file").arg(&s.gitlab_ca);
    }
    tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap()
}

async fn check(s: &Setup) -> (Output, Value) {
    let mut cmd = tenantci();
    cmd.args(["runner", "check", "--name", "tenant-ci", "-o", "json"])
        .arg("--config")
        .arg(s.config())
        .arg("--state-dir")
        .arg(s.root.join("state"));
    let before = s.files();
    let o = tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap();
    assert_eq!(s.files(), before, "runner check wrote something");
    let report =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    (o, report)
}

fn line<'a>(report: &'a Value, check: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == check)
        .unwrap_or_else(|| panic!("no `{check}` line in {report:#}"))
}

/// Asserts exit 1 with `check` failed, its detail containing `says`.
#[track_caller]
fn assert_fails(o: &Output, report: &Value, check: &str, says: &str) {
    assert_exit(o, 1);
    let l = line(report, check);
    assert_eq!(l["status"], "fail", "{report:#}");
    let detail = l["detail"].as_str().unwrap();
    assert!(detail.contains(says), "`{check}`: {detail}");
    assert!(l["fix"].as_str().is_some_and(|f| !f.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_reaches_config_toml_and_a_rerun_is_byte_identical() {
    let s = setup().await;
    let o = bootstrap(&s, true).await;
    assert_exit(&o, 0);
    let steps = crate::util::stderr(&o);
    assert!(
        steps.contains("check") && steps.contains("passed"),
        "{steps}"
    );
    let copy = tls_ca_file(&s.config()).expect("tls-ca-file written");
    assert_eq!(copy, s.creds().join("gitlab-ca.crt"));
    assert_eq!(mode(&copy), 0o600);
    let token = s.gitlab.runners()[0].token.clone();
    assert_eq!(
        verify_as_gitlab_runner(&s.gitlab.url(), &copy, &token).await,
        200
    );

    let before = s.files();
    assert_exit(&bootstrap(&s, true).await, 0);
    assert_eq!(s.files(), before, "a re-run changes nothing");
    assert_eq!(s.gitlab.runners().len(), 1, "the runner is reused");

    // Without the flag, what tenantci added goes (the token is reused from config.toml).
    assert_exit(&bootstrap(&s, false).await, 0);
    assert_eq!(tls_ca_file(&s.config()), None);
    assert!(!copy.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_own_tls_ca_file_is_kept() {
    let s = setup().await;
    assert_exit(&bootstrap(&s, true).await, 0);
    let text = std::fs::read_to_string(s.config()).unwrap();
    let own = s.gitlab_ca.display().to_string();
    let managed = s.creds().join("gitlab-ca.crt").display().to_string();
    std::fs::write(s.config(), text.replace(&managed, &own)).unwrap();
    assert_exit(&bootstrap(&s, false).await, 0);
    assert_eq!(tls_ca_file(&s.config()), Some(s.gitlab_ca.clone()));
}

/// The ClientCA of `cluster` in the simulator's state dir.
fn client_ca(s: &Setup, cluster: &str) -> CertificateAuthority {
    let pki = s.root.join("state/clusters").join(cluster).join("pki");
    CertificateAuthority::load(&pki.join("client-ca.crt"), &pki.join("client-ca.key")).unwrap()
}

fn spec() -> ClientCertSpec {
    ClientCertSpec {
        common_name: "gitlab-runner".into(),
        organizations: vec!["gitlab-runner".into()],
        valid_for: std::time::Duration::from_secs(3600),
        key_type: KeyType::EcdsaP256,
    }
}

/// Runs `break_it`, expects the check to fail on `check` saying `says`, then restores the
/// runner's files.
async fn broken(s: &Setup, check_name: &str, says: &str, break_it: impl FnOnce(&Setup)) {
    let saved = s.files();
    break_it(s);
    let (o, report) = check(s).await;
    assert_fails(&o, &report, check_name, says);
    for (path, bytes) in saved {
        if !bytes.is_empty() || path.is_file() {
            std::fs::write(&path, bytes).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_check_passes_a_good_runner_and_names_each_broken_half() {
    let s = setup().await;
    assert_exit(&bootstrap(&s, true).await, 0);
    let (o, report) = check(&s).await;
    assert_exit(&o, 0);
    for name in [
        "entry",
        "executor",
        "files",
        "certificate",
        "key",
        "client-ca",
        "apiserver-ca",
        "apiserver",
        "access",
        "gitlab",
        "prewarm",
    ] {
        assert_eq!(line(&report, name)["status"], "ok", "{report:#}");
    }
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    let token = s.gitlab.runners()[0].token.clone();
    assert!(!text.contains(&token), "the token never reaches output");

    binding_of_another_group(&s).await;
    a_binding_that_grants_too_much(&s).await;
    broken_files(&s).await;
    assert_exit(&check(&s).await.0, 0);

    let id = s.gitlab.runners()[0].id;
    s.gitlab.delete_runner(id);
    let (o, report) = check(&s).await;
    assert_fails(&o, &report, "gitlab", "does not accept the runner token");

    apiserver_gone(&s).await;
}

/// The binding names another group than the certificate's organization: the 403.
async fn binding_of_another_group(s: &Setup) {
    let bindings: Api<RoleBinding> = Api::namespaced(admin(s).await, "gitlab-runner");
    let original = bindings.list(&Default::default()).await.unwrap().items;
    assert!(!original.is_empty());
    for b in &original {
        let mut changed = b.clone();
        for subject in changed.subjects.iter_mut().flatten() {
            subject.name = "someone-else".into();
        }
        let name = b.metadata.name.clone().unwrap();
        bindings
            .replace(&name, &Default::default(), &changed)
            .await
            .unwrap();
    }
    let (o, report) = check(s).await;
    assert_fails(&o, &report, "access", "may not create pods");
    let fix = line(&report, "access")["fix"].as_str().unwrap();
    assert!(fix.contains("group must match"), "{fix}");
    for b in original {
        let name = b.metadata.name.clone().unwrap();
        let mut fresh = bindings.get(&name).await.unwrap();
        fresh.subjects = b.subjects;
        bindings
            .replace(&name, &Default::default(), &fresh)
            .await
            .unwrap();
    }
    assert_exit(&check(s).await.0, 0);
}

/// A broader binding that lets the runner read every Secret is a failure too.
async fn a_binding_that_grants_too_much(s: &Setup) {
    let admin = admin(s).await;
    let too_much: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "too-much"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "too-much"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gitlab-runner"}]
    }))
    .unwrap();
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "too-much"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    }))
    .unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let crbs: Api<ClusterRoleBinding> = Api::all(admin);
    roles.create(&Default::default(), &role).await.unwrap();
    crbs.create(&Default::default(), &too_much).await.unwrap();
    let (o, report) = check(s).await;
    assert_fails(&o, &report, "access", "which a runner must never do");
    crbs.delete("too-much", &Default::default()).await.unwrap();
    roles.delete("too-much", &Default::default()).await.unwrap();
    assert_exit(&check(s).await.0, 0);
}

/// The credential's files, one thing at a time: expired, another key, another cluster's
/// credential, another cluster's serving CA.
async fn broken_files(s: &Setup) {
    let cert = s.creds().join("tls.crt");
    let key = s.creds().join("tls.key");
    broken(s, "certificate", "expired", |s| {
        let now = time::OffsetDateTime::now_utc();
        let day = time::Duration::days(1);
        let old =
            issue::client_cert_between(&client_ca(s, "ci"), &spec(), now - 2 * day, now - day)
                .unwrap();
        std::fs::write(&cert, old.cert_pem).unwrap();
        std::fs::write(&key, old.key_pem).unwrap();
    })
    .await;
    broken(s, "key", "is not the key of cert_file", |s| {
        let other = issue::client_cert(&client_ca(s, "ci"), &spec()).unwrap();
        std::fs::write(&key, other.key_pem).unwrap();
    })
    .await;
    broken(s, "client-ca", "does not chain", |s| {
        let foreign = issue::client_cert(&client_ca(s, "other"), &spec()).unwrap();
        std::fs::write(&cert, foreign.cert_pem).unwrap();
        std::fs::write(&key, foreign.key_pem).unwrap();
    })
    .await;
    broken(s, "apiserver-ca", "does not verify", |s| {
        let other_ca = s.root.join("state/clusters/other/pki/serving-ca.crt");
        let ca_file = s.creds().join("ca.crt");
        let text = std::fs::read_to_string(s.config()).unwrap();
        let text = text.replace(
            &ca_file.display().to_string(),
            &other_ca.display().to_string(),
        );
        std::fs::write(s.config(), text).unwrap();
    })
    .await;
}

/// The apiserver goes away (kill -9 of the simulator).
async fn apiserver_gone(s: &Setup) {
    let pid = s.sim.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let addr = s
        .sim
        .cluster_url("ci")
        .trim_start_matches("https://")
        .to_string();
    tenantci_testkit::wait::eventually_blocking("the simulator stops listening", || {
        std::net::TcpStream::connect(&addr).is_err().then_some(())
    });
    let (o, report) = check(s).await;
    assert_fails(&o, &report, "apiserver", "does not answer");
}

async fn admin(s: &Setup) -> kube::Client {
    tenantci_core::kube_client::from_kubeconfig(&s.sim.tenant_admin("ci"))
        .await
        .unwrap()
}

#[test]
fn runner_check_refuses_a_config_it_cannot_read_with_exit_2() {
    let dir = scratch();
    for (config, says) in [
        (dir.path().join("missing.toml"), "No such file"),
        (PathBuf::from("/dev/zero"), "not a regular file"),
    ] {
        let o = run(tenantci()
            .args(["runner", "check", "--config"])
            .arg(&config));
        assert_exit(&o, 2);
        let err = crate::util::stderr(&o);
        assert!(err.contains(says) && err.contains("config.toml"), "{err}");
    }
    let empty = dir.path().join("config.toml");
    std::fs::write(&empty, "concurrent = 1\n").unwrap();
    let o = run(tenantci().args(["runner", "check", "--config"]).arg(&empty));
    assert_exit(&o, 1);
    assert!(
        stdout(&o).contains("no kubernetes [[runners]] entry"),
        "{}",
        stdout(&o)
    );
}
