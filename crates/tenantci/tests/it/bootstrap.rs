//! `bootstrap runner --forge gitlab` against the simulator, checked with kubectl using exactly
//! the files config.toml names.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{assert_exit, mode, run, scratch, snapshot, stderr, stdout, tenantci};
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::snapshot::{ClusterSnapshot, files_and_modes};

const EXISTING: &str = r#"# managed by hand: keep this comment
concurrent = 4
check_interval = 0

[[runners]]
  name = "docker-runner"
  url = "https://gitlab.example.com"
  token = "glrt-other"
  executor = "docker"
  [runners.docker]
    image = "alpine:3"
"#;

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sim: SimProcess,
}

fn setup(clusters: &[&str]) -> Setup {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let sim = SimProcess::start(tenantci(), &root.join("state"), clusters, &[]);
    std::fs::write(root.join("token"), "glrt-test-token-123\n").unwrap();
    Setup {
        _dir: dir,
        root,
        sim,
    }
}

fn bootstrap(s: &Setup, cluster: &str, extra: &[&str]) -> Output {
    let mut cmd = tenantci();
    cmd.args(["bootstrap", "runner", "--forge", "gitlab", "--state-dir"])
        .arg(s.root.join("state"))
        .args(["--cluster", cluster]);
    run(with_runner(s, cluster, &mut cmd)
        .args(["-o", "json"])
        .args(extra))
}

/// The runner half of a bootstrap: its credential directory, config.toml and token file.
fn with_runner<'c>(s: &Setup, cluster: &str, cmd: &'c mut Command) -> &'c mut Command {
    cmd.arg("--credential-dir")
        .arg(s.root.join(format!("creds-{cluster}")))
        .arg("--config")
        .arg(s.root.join("gitlab-runner/config.toml"))
        .args([
            "--gitlab-url",
            "https://gitlab.example.com",
            "--runner-token-file",
        ])
        .arg(s.root.join("token"))
}

fn toml(path: &Path) -> toml_edit::DocumentMut {
    std::fs::read_to_string(path).unwrap().parse().unwrap()
}

#[test]
fn bootstrap_writes_a_working_runner_and_a_rerun_changes_nothing() {
    let s = setup(&["ci"]);
    let config = s.root.join("gitlab-runner/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, EXISTING).unwrap();

    let o = bootstrap(&s, "ci", &[]);
    assert_exit(&o, 0);
    let hand_back: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        !stdout(&o).contains("glrt-test-token-123"),
        "the token never reaches output"
    );
    assert!(!stderr(&o).contains("glrt-test-token-123"));
    let url = s.sim.cluster_url("ci");
    assert_eq!(hand_back["server"], url);

    // The pre-existing config survives: comment, concurrent, the other runner.
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("# managed by hand: keep this comment"));
    let doc = toml(&config);
    assert_eq!(doc["concurrent"].as_integer(), Some(4));
    let runners = doc["runners"].as_array_of_tables().unwrap();
    assert_eq!(runners.len(), 2);
    assert_eq!(
        runners.get(0).unwrap()["name"].as_str(),
        Some("docker-runner")
    );
    let ours = runners
        .iter()
        .find(|r| r["name"].as_str() == Some("tenant-ci"))
        .unwrap();
    assert_eq!(ours["executor"].as_str(), Some("kubernetes"));
    let k = ours["kubernetes"].as_table().unwrap();
    assert_eq!(k["host"].as_str(), Some(url.as_str()));
    assert_eq!(k["namespace"].as_str(), Some("gitlab-runner"));
    let files: Vec<PathBuf> = ["ca_file", "cert_file", "key_file"]
        .iter()
        .map(|f| PathBuf::from(k[*f].as_str().unwrap()))
        .collect();
    for f in &files {
        assert!(f.is_absolute(), "{}", f.display());
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert_eq!(mode(&config), 0o600);

    // kubectl with exactly the files config.toml names.
    let kubectl = |args: &[&str]| {
        let mut c = std::process::Command::new("kubectl");
        c.arg("--server")
            .arg(&url)
            .arg("--certificate-authority")
            .arg(&files[0])
            .arg("--client-certificate")
            .arg(&files[1])
            .arg("--client-key")
            .arg(&files[2])
            .arg("--cache-dir")
            .arg(s.root.join("kcache"))
            .env_remove("KUBECONFIG")
            .env("KUBECONFIG", s.root.join("no-such-kubeconfig"))
            .args(args);
        run(&mut c)
    };
    for (args, want) in [
        (
            vec!["auth", "can-i", "create", "pods", "-n", "gitlab-runner"],
            "yes",
        ),
        (
            vec![
                "auth",
                "can-i",
                "create",
                "pods/exec",
                "-n",
                "gitlab-runner",
            ],
            "yes",
        ),
        (
            vec!["auth", "can-i", "get", "secrets", "-n", "kube-system"],
            "no",
        ),
    ] {
        let o = kubectl(&args);
        assert_eq!(stdout(&o).trim(), want, "{args:?}: {}", stderr(&o));
    }
    let o = kubectl(&[
        "run",
        "job-pod",
        "-n",
        "gitlab-runner",
        "--image",
        "alpine:3",
        "--restart",
        "Never",
    ]);
    assert_exit(&o, 0);
    let o = kubectl(&["get", "secrets", "-n", "kube-system"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("Forbidden") || stderr(&o).contains("forbidden"),
        "{}",
        stderr(&o)
    );

    // The re-run: byte-identical config (not even rewritten), same credential, few requests.
    let config_before = std::fs::read(&config).unwrap();
    let mtime = std::fs::metadata(&config).unwrap().modified().unwrap();
    let creds = snapshot(&s.root.join("creds-ci"));
    let o = bootstrap(&s, "ci", &[]);
    assert_exit(&o, 0);
    let again: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(std::fs::read(&config).unwrap(), config_before);
    assert_eq!(
        std::fs::metadata(&config).unwrap().modified().unwrap(),
        mtime
    );
    assert_eq!(snapshot(&s.root.join("creds-ci")), creds);
    let outcome = |step: &str| {
        again["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == step)
            .unwrap()["outcome"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(outcome("credential"), "kept");
    assert_eq!(outcome("rbac"), "unchanged");
    assert_eq!(outcome("config"), "unchanged");
    let requests = again["apiserverRequests"].as_u64().unwrap();
    assert!(
        requests <= 10,
        "a re-run costs {requests} apiserver requests"
    );
}

#[test]
fn bootstrap_dry_run_touches_nothing_on_a_second_cluster() {
    let s = setup(&["ci", "ci2"]);
    let o = bootstrap(&s, "ci2", &["--dry-run"]);
    assert_exit(&o, 0);
    assert!(!s.root.join("creds-ci2").exists(), "no credential written");
    assert!(
        !s.root.join("gitlab-runner/config.toml").exists(),
        "no config written"
    );
    let k = Kubectl::new(&s.sim.tenant_admin("ci2"), &s.root);
    let o = k.run(&["get", "namespace", "gitlab-runner"]);
    assert_ne!(o.status.code(), Some(0), "the namespace was not created");
    let o = k.run(&["get", "clusterrolebinding", "gitlab-runner"]);
    assert_ne!(o.status.code(), Some(0), "the binding was not created");
}

#[test]
fn bootstrap_refuses_a_mismatched_credential_before_writing_anything() {
    let s = setup(&["ci"]);
    let creds = s.root.join("creds-ci");
    let o = run(tenantci()
        .args(["credential", "mint", "--state-dir"])
        .arg(s.root.join("state"))
        .args([
            "--cluster",
            "ci",
            "--server",
            &s.sim.cluster_url("ci"),
            "--common-name",
            "gitlab-runner",
            "--organization",
            "other-group",
            "--out-dir",
        ])
        .arg(&creds));
    assert_exit(&o, 0);
    let before = snapshot(&creds);
    let o = bootstrap(&s, "ci", &[]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--rotate"), "{}", stderr(&o));
    assert!(stderr(&o).contains("groups"), "{}", stderr(&o));
    assert_eq!(snapshot(&creds), before);
    assert!(!s.root.join("gitlab-runner/config.toml").exists());
    let k = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    assert_ne!(
        k.run(&["get", "namespace", "gitlab-runner"]).status.code(),
        Some(0),
        "no RBAC applied"
    );

    // --rotate moves the old files aside and goes through.
    let o = bootstrap(&s, "ci", &["--rotate"]);
    assert_exit(&o, 0);
    let aside = std::fs::read_dir(&creds)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".old-")
        })
        .count();
    assert_eq!(aside, 4);
}

/// No token given: bootstrap creates the runner through GitLab's API (the double checks the
/// request as GitLab does), and a re-run reuses the token in config.toml instead of creating a
/// second runner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_creates_the_runner_through_the_gitlab_api_once() {
    use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};
    let s = setup(&["ci"]);
    let gitlab = GitlabDouble::start().await.unwrap();
    let api_token = s.root.join("api-token");
    std::fs::write(&api_token, DEFAULT_ACCESS_TOKEN).unwrap();
    let config = s.root.join("gitlab-runner/config.toml");
    let mut args: Vec<std::ffi::OsString> =
        ["bootstrap", "runner", "--forge", "gitlab", "--state-dir"]
            .iter()
            .map(Into::into)
            .collect();
    args.push(s.root.join("state").into());
    args.extend(
        ["--cluster", "ci", "--credential-dir"]
            .iter()
            .map(Into::into),
    );
    args.push(s.root.join("creds-ci").into());
    args.push("--config".into());
    args.push(config.clone().into());
    args.extend([
        "--gitlab-url".into(),
        gitlab.url().into(),
        "--gitlab-api-token-file".into(),
    ]);
    args.push(api_token.clone().into());
    args.extend(
        [
            "--runner-type",
            "group_type",
            "--group-id",
            "7",
            "--tag-list",
            "tenant,k8s",
        ]
        .iter()
        .map(Into::into),
    );
    let run_bootstrap = move || run(tenantci().args(&args));
    let o = tokio::task::spawn_blocking(run_bootstrap.clone())
        .await
        .unwrap();
    assert_exit(&o, 0);
    assert_eq!(gitlab.runners().len(), 1, "one runner created");
    let token = gitlab.runners()[0].token.clone();
    assert!(
        !stdout(&o).contains(&token) && !stderr(&o).contains(&token),
        "the token never reaches output"
    );
    assert!(!stderr(&o).contains(DEFAULT_ACCESS_TOKEN));
    let doc = toml(&config);
    let ours = doc["runners"]
        .as_array_of_tables()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str() == Some("tenant-ci"))
        .unwrap()
        .clone();
    assert_eq!(ours["token"].as_str(), Some(token.as_str()));
    let before = std::fs::read(&config).unwrap();
    let o = tokio::task::spawn_blocking(run_bootstrap).await.unwrap();
    assert_exit(&o, 0);
    assert_eq!(gitlab.runners().len(), 1, "the re-run reused the token");
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

/// Bad names are refused before the credential is minted or anything applied (exit 2), and a
/// tenant apiserver this run cannot reach is exit 3 before any write: "Ready" is printed only
/// for a cluster that was reached.
#[test]
fn bootstrap_validates_names_and_reaches_the_apiserver_before_writing() {
    let s = setup(&["ci"]);
    let untouched = |s: &Setup| {
        assert!(!s.root.join("creds-ci").exists(), "no credential minted");
        assert!(!s.root.join("gitlab-runner").exists(), "no config written");
    };
    for (flag, value) in [
        ("--namespace", "../kube-system"),
        ("--namespace", "GitLab"),
        ("--name", "tenant\nci"),
    ] {
        let o = bootstrap(&s, "ci", &[flag, value]);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(flag), "{flag}: {}", stderr(&o));
        untouched(&s);
    }
    let k = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    assert_ne!(
        k.run(&["get", "namespace", "gitlab-runner"]).status.code(),
        Some(0),
        "no RBAC applied"
    );

    // Given directly, a --server that the tenant kubeconfig does not name is bad input, and
    // one nobody answers on is an external failure; neither writes.
    let pki = s.root.join("state/clusters/ci/pki");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("https://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let direct = |server: &str, kubeconfig: &Path| {
        bootstrap_direct(&s, server, &pki.join("serving-ca.crt"), kubeconfig)
    };
    let o = direct(&dead, &s.sim.tenant_admin("ci"));
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("names the apiserver"), "{}", stderr(&o));
    untouched(&s);
    let pointing_at_dead = s.root.join("dead.kubeconfig");
    let text = std::fs::read_to_string(s.sim.tenant_admin("ci")).unwrap();
    std::fs::write(
        &pointing_at_dead,
        text.replace(&s.sim.cluster_url("ci"), &dead),
    )
    .unwrap();
    let o = direct(&dead, &pointing_at_dead);
    assert_exit(&o, 3);
    assert!(
        stderr(&o).contains("cannot reach the tenant apiserver"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains("Ready") && !stderr(&o).contains("Ready"));
    untouched(&s);
}

/// `bootstrap runner` for cluster `ci` given directly: the server, its serving CA and the
/// tenant kubeconfig as the test chooses, the ClientCA of the state directory.
fn bootstrap_direct(s: &Setup, server: &str, server_ca: &Path, kubeconfig: &Path) -> Output {
    let pki = s.root.join("state/clusters/ci/pki");
    let mut cmd = tenantci();
    cmd.args([
        "bootstrap",
        "runner",
        "--forge",
        "gitlab",
        "--cluster",
        "ci",
    ])
    .args(["--server", server, "--server-ca"])
    .arg(server_ca)
    .arg("--client-ca-cert")
    .arg(pki.join("client-ca.crt"))
    .arg("--client-ca-key")
    .arg(pki.join("client-ca.key"))
    .arg("--tenant-kubeconfig")
    .arg(kubeconfig);
    run(with_runner(s, "ci", &mut cmd))
}

/// A refusal: exactly one `error:` sentence, containing `sentence`, and a `help:` line.
#[track_caller]
fn assert_one_sentence(o: &Output, sentence: &str) {
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(sentence), "{err}");
    assert!(err.contains("\nhelp: "), "a refusal says the fix: {err}");
}

/// An existing config.toml that is not TOML is refused in phase one: exit 2 naming the file
/// and the fix, with no credential directory, no cluster object changed and the file as it
/// was (before, the credential was minted and the RBAC applied first).
#[test]
fn bootstrap_refuses_a_config_that_is_not_toml_before_minting_or_applying() {
    let s = setup(&["ci"]);
    let config = s.root.join("gitlab-runner/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "concurrent = 4\n[[runners]\n  name = \"x\"\n").unwrap();
    let kubectl = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    let cluster = ClusterSnapshot::take(&kubectl);
    let files = files_and_modes(&s.root.join("gitlab-runner"));

    let o = bootstrap(&s, "ci", &[]);
    assert_exit(&o, 2);
    assert_one_sentence(
        &o,
        &format!("`{}` is not valid TOML at line 2", config.display()),
    );
    assert!(
        stderr(&o).contains("help: fix the file by hand"),
        "{}",
        stderr(&o)
    );
    assert!(!s.root.join("creds-ci").exists(), "no credential directory");
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "no object written"
    );
    assert_eq!(files_and_modes(&s.root.join("gitlab-runner")), files);
}

/// A serving CA that did not sign the apiserver's certificate (another cluster's), while the
/// tenant-admin kubeconfig reaches the server with its own CA: phase one's TLS handshake
/// trusting only --server-ca refuses it, naming the CA, the server and what to pass, before
/// anything is minted or applied.
#[test]
fn bootstrap_refuses_a_serving_ca_that_does_not_verify_the_server() {
    let s = setup(&["ci", "other"]);
    let pki = s.root.join("state/clusters/ci/pki");
    let wrong_ca = s.root.join("state/clusters/other/pki/serving-ca.crt");
    let url = s.sim.cluster_url("ci");
    let kubectl = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    let cluster = ClusterSnapshot::take(&kubectl);
    let direct =
        |server_ca: &Path| bootstrap_direct(&s, &url, server_ca, &s.sim.tenant_admin("ci"));

    let o = direct(&wrong_ca);
    assert_exit(&o, 2);
    assert_one_sentence(
        &o,
        &format!(
            "the serving CA given by --server-ca `{}` does not verify the tenant apiserver of cluster `ci` at {url}",
            wrong_ca.display()
        ),
    );
    assert!(
        stderr(&o).contains(
            "help: pass --server-ca naming the CA that signed the certificate of the apiserver at"
        ),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("Ready") && !stderr(&o).contains("reached"));
    assert!(!s.root.join("creds-ci").exists(), "no credential directory");
    assert!(!s.root.join("gitlab-runner").exists(), "no config written");
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "no object written"
    );

    // The positive control: the CA that did sign it goes through.
    let o = direct(&pki.join("serving-ca.crt"));
    assert_exit(&o, 0);
    assert_ne!(
        ClusterSnapshot::take(&kubectl),
        cluster,
        "the run wrote its RBAC"
    );
}
