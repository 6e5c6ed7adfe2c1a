//! `tenantci runner ...` through the real binary: exit codes, modes, no-op re-runs, files
//! untouched on error, and the token never in stdout/stderr.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

use tenantci_testkit::gitlab::{Behaviour, DEFAULT_ACCESS_TOKEN, GitlabDouble};

use crate::util::{assert_exit, mode, run, scratch, snapshot, stderr, stdout, tenantci};

const TOKEN: &str = "glrt-cli-secret-0123456789";

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    token_file: PathBuf,
}

fn setup() -> Setup {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let token_file = root.join("runner-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    Setup {
        config: root.join("etc/gitlab-runner/config.toml"),
        root,
        token_file,
        _dir: dir,
    }
}

fn base_args(s: &Setup) -> Vec<String> {
    [
        "runner",
        "gitlab-config",
        "--config",
        s.config.to_str().unwrap(),
        "--name",
        "tenant-a",
        "--url",
        "https://gitlab.example.com",
        "--host",
        "https://127.0.0.1:6443",
        "--cert-file",
        "/etc/gitlab-runner/tenant-a/tls.crt",
        "--key-file",
        "/etc/gitlab-runner/tenant-a/tls.key",
        "--ca-file",
        "/etc/gitlab-runner/tenant-a/ca.crt",
        "--namespace",
        "ci",
        "--cpu-request",
        "500m",
        "--memory-request",
        "1Gi",
        "--resource",
        "cpu_request_overwrite_max_allowed=2",
        "--resource",
        "memory_request_overwrite_max_allowed=4Gi",
        "--node-selector",
        "tenantci.io/pool=ci",
        "--toleration",
        "dedicated=ci:NoSchedule",
        "--pod-label",
        "app=ci-job",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn with_token_file(s: &Setup) -> Vec<String> {
    let mut args = base_args(s);
    args.extend([
        "--runner-token-file".into(),
        s.token_file.to_str().unwrap().into(),
    ]);
    args
}

fn go(args: &[String]) -> Output {
    run(tenantci().args(args))
}

#[track_caller]
fn assert_no_token(o: &Output, token: &str) {
    assert!(
        !stdout(o).contains(token),
        "token on stdout:\n{}",
        stdout(o)
    );
    assert!(
        !stderr(o).contains(token),
        "token on stderr:\n{}",
        stderr(o)
    );
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn runner_cli_writes_0600_in_0700_and_a_rerun_touches_nothing() {
    let s = setup();
    let mut args = with_token_file(&s);
    args.extend(["-o".into(), "json".into()]);
    let o = go(&args);
    assert_exit(&o, 0);
    assert_no_token(&o, TOKEN);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["action"], "created");
    assert_eq!(report["written"], true);
    assert_eq!(report["runner"]["token"], "[redacted]");
    assert_eq!(mode(&s.config), 0o600);
    assert_eq!(mode(s.config.parent().unwrap()), 0o700);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains(&format!("token = \"{TOKEN}\"")));
    assert!(text.contains("poll_timeout = 600"));

    let before = (mtime(&s.config), snapshot(&s.root));
    let o = go(&args);
    assert_exit(&o, 0);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["action"], "unchanged");
    assert_eq!(report["written"], false);
    assert_eq!(
        (mtime(&s.config), snapshot(&s.root)),
        before,
        "an unchanged config must not be touched"
    );
}

#[test]
fn runner_cli_invalid_toml_is_refused_naming_the_line() {
    let s = setup();
    std::fs::create_dir_all(s.config.parent().unwrap()).unwrap();
    let broken = "concurrent = 4\n\n[[runners]]\nname = \"x\ntoken = \"glrt-keep-me-secret\"\n";
    std::fs::write(&s.config, broken).unwrap();
    let before = (mtime(&s.config), snapshot(&s.root));
    let o = go(&with_token_file(&s));
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("line 4"), "{}", stderr(&o));
    assert_no_token(&o, "glrt-keep-me-secret");
    assert_no_token(&o, TOKEN);
    assert_eq!((mtime(&s.config), snapshot(&s.root)), before);
}

#[test]
fn runner_cli_refuses_another_executor_unless_forced() {
    let s = setup();
    std::fs::create_dir_all(s.config.parent().unwrap()).unwrap();
    let docker =
        "[[runners]]\n  name = \"tenant-a\"\n  executor = \"docker\"\n  token = \"glrt-d\"\n";
    std::fs::write(&s.config, docker).unwrap();
    let before = snapshot(&s.root);
    let o = go(&with_token_file(&s));
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("executor `docker`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"));
    assert_eq!(snapshot(&s.root), before);
    let mut args = with_token_file(&s);
    args.push("--force".into());
    assert_exit(&go(&args), 0);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains("executor = \"kubernetes\""));
    assert!(!text.contains("docker"));
}

#[test]
fn runner_cli_refuses_partial_file_auth_and_files_without_host() {
    let s = setup();
    let mut args = with_token_file(&s);
    let i = args.iter().position(|a| a == "--key-file").unwrap();
    args.drain(i..i + 2);
    let o = go(&args);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("key_file"), "{}", stderr(&o));
    let mut args = with_token_file(&s);
    let i = args.iter().position(|a| a == "--host").unwrap();
    args.drain(i..i + 2);
    let o = go(&args);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("without host"), "{}", stderr(&o));
    assert!(!s.config.exists());
    assert!(
        !s.config.parent().unwrap().exists(),
        "nothing is created on refusal"
    );
}

#[test]
fn runner_cli_token_from_env_or_var_reference() {
    let s = setup();
    let o = run(tenantci()
        .args(base_args(&s))
        .env("TENANTCI_RUNNER_TOKEN", TOKEN));
    assert_exit(&o, 0);
    assert_no_token(&o, TOKEN);
    assert!(std::fs::read_to_string(&s.config).unwrap().contains(TOKEN));

    let mut args = base_args(&s);
    args.extend([
        "--runner-token".into(),
        "$GITLAB_RUNNER_TOKEN".into(),
        "-o".into(),
        "json".into(),
    ]);
    let o = go(&args);
    assert_exit(&o, 0);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["action"], "updated");
    assert_eq!(report["runner"]["token"], "$GITLAB_RUNNER_TOKEN");
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains("token = \"$GITLAB_RUNNER_TOKEN\""));
    assert!(!text.contains(TOKEN));

    // An exported variable does not override an explicit token file.
    let o = run(tenantci()
        .args(with_token_file(&s))
        .env("TENANTCI_RUNNER_TOKEN", "glrt-from-env"));
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains(TOKEN) && !text.contains("glrt-from-env"));

    let o = go(&base_args(&s));
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no runner token"));
}

#[test]
fn runner_cli_dry_run_writes_nothing_and_redacts() {
    let s = setup();
    let mut args = with_token_file(&s);
    args.push("--dry-run".into());
    let o = go(&args);
    assert_exit(&o, 0);
    assert_no_token(&o, TOKEN);
    assert!(
        stdout(&o).contains("token = \"[redacted]\""),
        "{}",
        stdout(&o)
    );
    assert!(snapshot(&s.root).iter().all(|(p, _)| p != &s.config));
    assert!(!s.config.parent().unwrap().exists());
}

fn api_args(s: &Setup, gitlab: &GitlabDouble, api_token_file: &Path) -> Vec<String> {
    let mut args = base_args(s);
    let i = args.iter().position(|a| a == "--url").unwrap();
    args[i + 1] = gitlab.url();
    args.extend(
        [
            "--gitlab-api-token-file",
            api_token_file.to_str().unwrap(),
            "--runner-type",
            "group_type",
            "--group-id",
            "7",
            "--tag-list",
            "tenant-a,pod",
            "--gitlab-timeout",
            "2s",
            "-o",
            "json",
        ]
        .map(String::from),
    );
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cli_creates_the_runner_through_the_gitlab_api() {
    let (gitlab, ca_pem) = GitlabDouble::start_tls().await.unwrap();
    let s = setup();
    let api_token_file = s.root.join("api-token");
    std::fs::write(&api_token_file, DEFAULT_ACCESS_TOKEN).unwrap();
    let ca_file = s.root.join("gitlab-ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let mut args = api_args(&s, &gitlab, &api_token_file);
    args.extend(["--gitlab-ca-file".into(), ca_file.to_str().unwrap().into()]);
    let o = tokio::task::spawn_blocking({
        let args = args.clone();
        move || go(&args)
    })
    .await
    .unwrap();
    assert_exit(&o, 0);
    let runners = gitlab.runners();
    assert_eq!(runners.len(), 1);
    let token = runners[0].token.clone();
    assert_no_token(&o, &token);
    assert_no_token(&o, DEFAULT_ACCESS_TOKEN);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["gitlab"]["token_source"], "created");
    assert_eq!(report["gitlab"]["id"], runners[0].id);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains(&format!("token = \"{token}\"")));
    assert!(text.contains(&format!("id = {}", runners[0].id)));
    assert!(
        text.contains("token_expires_at = 0001-01-01T00:00:00Z"),
        "{text}"
    );
    assert!(!text.contains(DEFAULT_ACCESS_TOKEN));
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    assert_eq!(
        tenantci_runner::gitlab::config::keys::check_document(&doc),
        vec![]
    );

    // A re-run reuses the token in config.toml instead of creating another runner.
    let before = snapshot(&s.root);
    let o = tokio::task::spawn_blocking(move || go(&args))
        .await
        .unwrap();
    assert_exit(&o, 0);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["gitlab"]["token_source"], "reused");
    assert_eq!(report["action"], "unchanged");
    assert_eq!(gitlab.runners().len(), 1);
    assert_eq!(snapshot(&s.root), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_cli_gitlab_api_failures_leave_the_file_untouched() {
    let gitlab = GitlabDouble::start().await.unwrap();
    let s = setup();
    std::fs::create_dir_all(s.config.parent().unwrap()).unwrap();
    std::fs::write(&s.config, "concurrent = 2 # mine\n").unwrap();
    let api_token_file = s.root.join("api-token");
    std::fs::write(&api_token_file, DEFAULT_ACCESS_TOKEN).unwrap();
    for (behaviour, code, needle) in [
        (Behaviour::Unauthorized, 2, "401"),
        (Behaviour::Forbidden, 2, "create_runner"),
        (Behaviour::Gone, 3, "410"),
        (Behaviour::Hang, 3, "did not answer"),
    ] {
        gitlab.set_behaviour(behaviour);
        let mut before = snapshot(&s.root);
        before.retain(|(p, _)| !p.to_string_lossy().ends_with(".tenantci-lock"));
        let args = api_args(&s, &gitlab, &api_token_file);
        let o = tokio::task::spawn_blocking(move || go(&args))
            .await
            .unwrap();
        assert_exit(&o, code);
        assert!(stderr(&o).contains(needle), "{behaviour:?}: {}", stderr(&o));
        assert_no_token(&o, DEFAULT_ACCESS_TOKEN);
        // Once the checks pass, config.toml's lock file (empty, kept by design) may appear.
        let mut after = snapshot(&s.root);
        after.retain(|(p, _)| !p.to_string_lossy().ends_with(".tenantci-lock"));
        assert_eq!(after, before, "{behaviour:?}");
    }
    gitlab.set_behaviour(Behaviour::Normal);
    let mut args = api_args(&s, &gitlab, &api_token_file);
    let i = args.iter().position(|a| a == "--group-id").unwrap();
    args.drain(i..i + 2);
    let o = tokio::task::spawn_blocking(move || go(&args))
        .await
        .unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--group-id"), "{}", stderr(&o));
    assert!(gitlab.runners().is_empty());
}

#[test]
fn runner_cli_gitea_config_writes_config_and_registration() {
    let dir = scratch();
    let config = dir.path().join("act_runner/config.yaml");
    let token_file = dir.path().join("gitea-token");
    std::fs::write(&token_file, "gitea-runner-secret-42\n").unwrap();
    let args: Vec<String> = [
        "runner",
        "gitea-config",
        "--config",
        config.to_str().unwrap(),
        "--capacity",
        "2",
        "--label",
        "self-hosted:host",
        "--label",
        "pod:host",
        "--uuid",
        "0b6c1c52-7d2e-4d7a-9a43-3b1f7b1d2c9e",
        "--runner-id",
        "5",
        "--runner-name",
        "pod-executor",
        "--gitea-url",
        "https://gitea.example.com",
        "--gitea-runner-token-file",
        token_file.to_str().unwrap(),
        "--ephemeral",
        "-o",
        "json",
    ]
    .map(String::from)
    .to_vec();
    let o = go(&args);
    assert_exit(&o, 0);
    assert_no_token(&o, "gitea-runner-secret-42");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["config_written"], true);
    assert_eq!(report["registration_written"], true);
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(yaml["runner"]["capacity"], 2);
    assert_eq!(yaml["runner"]["labels"][0], "self-hosted:host");
    let dot_runner = dir.path().join("act_runner/.runner");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dot_runner).unwrap()).unwrap();
    assert_eq!(json["token"], "gitea-runner-secret-42");
    assert_eq!(json["labels"], serde_json::json!(["self-hosted", "pod"]));
    assert_eq!(json["ephemeral"], true);
    assert_eq!(mode(&config), 0o600);
    assert_eq!(mode(&dot_runner), 0o600);
    assert_eq!(mode(config.parent().unwrap()), 0o700);

    let before = (mtime(&config), mtime(&dot_runner));
    let o = go(&args);
    assert_exit(&o, 0);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["config_written"], false);
    assert_eq!(report["registration_written"], false);
    assert_eq!((mtime(&config), mtime(&dot_runner)), before);

    let mut bad = args.clone();
    let i = bad.iter().position(|a| a == "pod:host").unwrap();
    bad[i] = "pod:vm:x".into();
    assert_exit(&go(&bad), 2);
}

#[test]
fn runner_cli_native_autoscaler_is_kept_in_sync_left_alone_and_removed_on_request() {
    let s = setup();
    let with = |extra: &[&str]| {
        let mut args = with_token_file(&s);
        args.extend(extra.iter().map(|a| a.to_string()));
        go(&args)
    };
    let native = [
        "--gitlab-native-pause-pods",
        "--prewarm",
        "2",
        "--pause-idle-time",
        "45m",
        "--pause-period",
        "* 8-17 * * mon-fri",
    ];
    let o = with(&native);
    assert_exit(&o, 0);
    // base_args sets --pod-label, which gitlab-runner does not copy to its pause pods.
    assert!(
        stderr(&o).contains("warning: gitlab-runner does not put pod_labels (app)"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&s.config).unwrap();
    for line in [
        "[runners.kubernetes.autoscaler]",
        "max_pause_pods = 2",
        "pause_pod_image = \"registry.k8s.io/pause:3.10\"",
        "[[runners.kubernetes.autoscaler.policy]]",
        "idle_count = 2",
        "idle_time = \"45m\"",
        "periods = [\"* 8-17 * * mon-fri\"]",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    let before = (mtime(&s.config), snapshot(&s.root));
    assert_exit(&with(&native), 0);
    assert_eq!((mtime(&s.config), snapshot(&s.root)), before);

    // Kept in sync with the count.
    let mut three = native;
    three[2] = "3";
    assert_exit(&with(&three), 0);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(text.contains("max_pause_pods = 3") && text.contains("idle_count = 3"));

    // Without the flag: not touched.
    let before = (mtime(&s.config), snapshot(&s.root));
    assert_exit(&with(&[]), 0);
    assert_eq!((mtime(&s.config), snapshot(&s.root)), before);

    // Removed only when asked.
    assert_exit(&with(&["--remove-gitlab-native-pause-pods"]), 0);
    let text = std::fs::read_to_string(&s.config).unwrap();
    assert!(!text.contains("autoscaler"), "{text}");
}

#[test]
fn runner_cli_native_autoscaler_flags_without_their_partner_are_refused() {
    let s = setup();
    for (extra, needle) in [
        (&["--gitlab-native-pause-pods"][..], "--prewarm N"),
        (
            &["--gitlab-native-pause-pods", "--prewarm", "0"][..],
            "--prewarm N",
        ),
        (&["--prewarm", "1"][..], "--gitlab-native-pause-pods"),
        (
            &["--pause-pod-image", "pause:1"][..],
            "--gitlab-native-pause-pods",
        ),
        (
            &["--pause-idle-time", "5m"][..],
            "--gitlab-native-pause-pods",
        ),
        (
            &[
                "--gitlab-native-pause-pods",
                "--prewarm",
                "1",
                "--pause-period",
                "daily",
            ][..],
            "cron",
        ),
        (
            &[
                "--gitlab-native-pause-pods",
                "--remove-gitlab-native-pause-pods",
            ][..],
            "cannot be used with",
        ),
    ] {
        let mut args = with_token_file(&s);
        args.extend(extra.iter().map(|a| a.to_string()));
        let o = go(&args);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
        assert!(!s.config.exists(), "{extra:?} wrote the file");
    }
}

/// A runner token file that is not a token (5 MB, or empty) is refused with one sentence and
/// a fix, and config.toml is not written.
#[test]
fn runner_cli_refuses_an_oversized_or_empty_token_file() {
    let s = setup();
    for (contents, says) in [
        ("x".repeat(5 << 20), "larger than 4 KiB"),
        ("\n".to_string(), "is empty"),
    ] {
        std::fs::write(&s.token_file, &contents).unwrap();
        let o = go(&with_token_file(&s));
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains(says), "{err}");
        assert!(err.contains("runner-token`"), "names the file: {err}");
        assert!(err.lines().any(|l| l.starts_with("help: ")), "{err}");
        assert!(err.len() < 1000, "{err}");
        assert!(!s.config.exists(), "nothing written");
    }
}

/// Each bad input of `runner gitlab-config` is refused with one sentence and its fix, and
/// nothing under the test's directory changes (`crate::refusals`); the positive control writes.
#[test]
fn runner_cli_refuses_each_bad_input_writing_nothing() {
    use crate::refusals::{Watch, case};
    let s = setup();
    let put = |name: &str, text: &str| {
        let p = s.root.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let empty_token = put("empty-token", "\n");
    let not_pem = put("not-pem.crt", "not a certificate\n");
    let not_toml = put(
        "not-toml.toml",
        "concurrent = 4\n[[runners]\n  name = \"x\"\n",
    );
    let docker = put(
        "docker.toml",
        "[[runners]]\n  name = \"tenant-a\"\n  executor = \"docker\"\n",
    );
    let twice = put(
        "twice.toml",
        "[[runners]]\n  name = \"tenant-a\"\n[[runners]]\n  name = \"tenant-a\"\n",
    );
    let scalar = put("scalar.toml", "runners = 5\n");
    let a_dir = s.root.join("a-directory.toml");
    std::fs::create_dir(&a_dir).unwrap();
    let a_dir = a_dir.display().to_string();
    let missing = s.root.join("nope").display().to_string();
    // The good arguments with `flag`'s value replaced (or the flag dropped: None).
    let with = |edits: &[(&str, Option<&str>)]| {
        let mut args = with_token_file(&s);
        for (flag, value) in edits {
            match (args.iter().position(|a| a == flag), value) {
                (Some(i), Some(v)) => args[i + 1] = v.to_string(),
                (Some(i), None) => drop(args.drain(i..i + 2)),
                (None, Some(v)) => args.extend([flag.to_string(), v.to_string()]),
                (None, None) => {}
            }
        }
        args.into_iter().map(OsString::from).collect::<Vec<_>>()
    };
    let config = |path: &str| with(&[("--config", Some(path))]);
    let cases = [
        case(
            "not-toml",
            config(&not_toml),
            2,
            "is not valid TOML at line 2",
        ),
        case("docker", config(&docker), 2, "uses executor `docker`"),
        case("twice", config(&twice), 2, "has 2 runners named `tenant-a`"),
        case("scalar", config(&scalar), 2, "is not an array of tables"),
        case(
            "directory",
            config(&a_dir),
            2,
            "is a directory, not a regular file",
        ),
        case("no-key", with(&[("--key-file", None)]), 2, "key_file"),
        case(
            "empty-token",
            with(&[("--runner-token-file", Some(&empty_token))]),
            2,
            "is empty",
        ),
        case(
            "missing-token",
            with(&[("--runner-token-file", Some(&missing))]),
            2,
            "cannot read the runner token file",
        ),
        case(
            "gitlab-ca-not-pem",
            with(&[("--gitlab-ca-file", Some(&not_pem))]),
            2,
            "holds no PEM certificate",
        ),
    ];
    let watch = Watch {
        dir: &s.root,
        kubectl: None,
        nats: None,
    };
    assert_eq!(watch.refuse_each(&[], &cases), 9);
    let before = watch.take();
    assert_exit(&run(tenantci().args(with(&[]))), 0);
    assert_ne!(
        watch.take(),
        before,
        "the positive control wrote config.toml"
    );
}
