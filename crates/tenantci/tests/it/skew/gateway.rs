//! The gateway host across an upgrade: `bootstrap runner` of the previous release set the
//! runner up and the operator edited its `config.toml`; this release's `bootstrap runner` and
//! `runner check` on the same host recreate nothing that needed no change (every object keeps
//! its uid and resourceVersion, no second runner at GitLab, the credential files unchanged),
//! keep the operator's comments and keys, and keep the credential until it is due.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::snapshot::files_and_modes;

use crate::util::{assert_exit, bootstrap_gitlab_by, run, scratch, stdout, tenantci};

/// The operator's own config.toml before the first bootstrap: a comment and another runner.
const EXISTING: &str = r#"# managed by hand: keep this comment
concurrent = 4

[[runners]]
  name = "docker-runner"
  url = "https://gitlab.example.com"
  token = "glrt-other"
  executor = "docker"
"#;

/// What the operator adds to tenantci's entry after the previous release wrote it: keys
/// tenantci does not own (docs/runbooks/gitlab-runner-config.md), each with a comment.
const ENTRY_EDIT: &str =
    "  # the operator's: jobs see the proxy\n  environment = [\"HTTPS_PROXY=http://proxy:3128\"]\n";
const KUBERNETES_EDIT: &str =
    "    # the operator's: builds push as this account\n    service_account = \"builder\"\n";

/// The gateway host: the simulator stops before its directory goes (fields drop in order).
struct Host {
    sim: SimProcess,
    gitlab: GitlabDouble,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Host {
    fn config(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml")
    }
    fn creds(&self) -> PathBuf {
        self.root.join("creds-ci")
    }

    /// `bootstrap runner` run by `tenantci` (either release), with the flags both have: the
    /// runner created through GitLab's API on the first run.
    async fn bootstrap(&self, tenantci: Command, extra: &[&str]) -> Output {
        let state = self.root.join("state");
        let mut cmd = bootstrap_gitlab_by(tenantci, &state, &self.creds(), &self.config());
        cmd.args([
            "--gitlab-url",
            &self.gitlab.url(),
            "--gitlab-api-token-file",
        ])
        .arg(self.root.join("api-token"))
        .args([
            "--runner-type",
            "instance_type",
            "--run-untagged",
            "-o",
            "json",
        ])
        .args(extra);
        tokio::task::spawn_blocking(move || run(&mut cmd))
            .await
            .unwrap()
    }

    /// Every object of the tenant cluster with its uid and resourceVersion: a write changes
    /// the version, a recreation the uid.
    fn objects(&self) -> Vec<String> {
        let k = Kubectl::new(&self.sim.tenant_admin("ci"), &self.root);
        let kinds = "namespaces,clusterroles,clusterrolebindings,roles,rolebindings,\
                     serviceaccounts,secrets,configmaps,deployments,priorityclasses";
        let template = "{range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name} \
                        {.metadata.uid} {.metadata.resourceVersion}{\"\\n\"}{end}";
        let o = k.run(&["get", kinds, "-A", "-o", &format!("jsonpath={template}")]);
        assert_exit(&o, 0);
        let mut objects: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
        objects.sort();
        objects
    }
}

async fn host() -> Host {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let sim = SimProcess::start(tenantci(), &root.join("state"), &["ci"], &[]);
    let gitlab = GitlabDouble::start().await.unwrap();
    std::fs::write(root.join("api-token"), DEFAULT_ACCESS_TOKEN).unwrap();
    std::fs::create_dir_all(root.join("gitlab-runner")).unwrap();
    std::fs::write(root.join("gitlab-runner/config.toml"), EXISTING).unwrap();
    Host {
        sim,
        gitlab,
        root,
        _dir: dir,
    }
}

/// The outcome of `step` in a bootstrap's JSON report.
fn outcome(report: &Value, step: &str) -> String {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == step)
        .unwrap_or_else(|| panic!("no step `{step}` in {report:#}"))["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Inserts `text` after the line `after` (which must be there once) of the file at `path`.
fn insert_after(path: &Path, after: &str, text: &str) {
    let config = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        config.matches(after).count(),
        1,
        "`{after}` once in\n{config}"
    );
    let at = config.find(after).unwrap() + after.len();
    let edited = format!("{}{text}{}", &config[..at], &config[at..]);
    std::fs::write(path, edited).unwrap();
}

/// The operator's edits, each where it was made.
fn assert_edits_kept(config: &str) {
    assert!(
        config.starts_with("# managed by hand: keep this comment\nconcurrent = 6\n"),
        "{config}"
    );
    assert!(config.contains("name = \"docker-runner\""), "{config}");
    assert!(config.contains(ENTRY_EDIT), "{config}");
    assert!(config.contains(KUBERNETES_EDIT), "{config}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_release_keeps_what_the_previous_release_s_bootstrap_set_up() {
    let Some(previous) = super::previous_release() else {
        return;
    };
    let h = host().await;
    let o = h.bootstrap(super::previous(&previous), &[]).await;
    assert_exit(&o, 0);
    assert_eq!(
        h.gitlab.runners().len(),
        1,
        "the previous release created the runner"
    );

    // The operator's own edits after the previous release's bootstrap.
    let config = h.config();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("concurrent = 4", "concurrent = 6", 1),
    )
    .unwrap();
    insert_after(&config, "  executor = \"kubernetes\"\n", ENTRY_EDIT);
    insert_after(&config, "  [runners.kubernetes]\n", KUBERNETES_EDIT);
    let edited = std::fs::read(&config).unwrap();
    let creds = files_and_modes(&h.creds());
    let objects = h.objects();

    // This release's bootstrap: nothing needed a change, so nothing changed.
    let o = h.bootstrap(tenantci(), &[]).await;
    assert_exit(&o, 0);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(outcome(&report, "credential"), "kept", "{report:#}");
    assert_eq!(outcome(&report, "config"), "unchanged", "{report:#}");
    assert_eq!(h.objects(), objects, "an object was rewritten or recreated");
    assert_eq!(
        files_and_modes(&h.creds()),
        creds,
        "the credential files changed"
    );
    let now = std::fs::read_to_string(&config).unwrap();
    assert_edits_kept(&now);
    assert_eq!(now.as_bytes(), edited, "config.toml was rewritten");
    assert_eq!(h.gitlab.runners().len(), 1, "no second runner at GitLab");

    // This release's runner check passes on it and writes nothing.
    let mut check = tenantci();
    check
        .args([
            "runner",
            "check",
            "--name",
            "tenant-ci",
            "-o",
            "json",
            "--config",
        ])
        .arg(&config)
        .arg("--state-dir")
        .arg(h.root.join("state"));
    let o = tokio::task::spawn_blocking(move || run(&mut check))
        .await
        .unwrap();
    assert_exit(&o, 0);
    assert_eq!(std::fs::read(&config).unwrap(), edited);
    assert_eq!(files_and_modes(&h.creds()), creds);
    assert_eq!(h.objects(), objects);
}

/// A credential the previous release minted is kept by this release until a third of its
/// life is left, then rotated (the old files moved aside). Its life counts from 5 minutes
/// before the mint (the clock-skew allowance), so `--valid-for 170s` is due 13 s after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_release_rotates_the_previous_release_s_credential_only_when_it_is_due() {
    let Some(previous) = super::previous_release() else {
        return;
    };
    let h = host().await;
    let o = h
        .bootstrap(super::previous(&previous), &["--valid-for", "170s"])
        .await;
    assert_exit(&o, 0);
    let creds = files_and_modes(&h.creds());
    let o = h.bootstrap(tenantci(), &[]).await;
    assert_exit(&o, 0);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        outcome(&report, "credential"),
        "kept",
        "not due yet: {report:#}"
    );
    assert_eq!(files_and_modes(&h.creds()), creds);

    // Due once a third of its life or less is left: the next run rotates it.
    let report = tenantci_testkit::wait::eventually("the credential to be due", || async {
        let o = h.bootstrap(tenantci(), &[]).await;
        assert_exit(&o, 0);
        let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
        (outcome(&report, "credential") != "kept").then_some(report)
    })
    .await;
    assert_eq!(outcome(&report, "credential"), "rotated", "{report:#}");
    assert_ne!(files_and_modes(&h.creds()), creds);
    assert_eq!(h.gitlab.runners().len(), 1, "the runner kept at GitLab");
}
