//! `runner status` and `runner explain` on a runner `bootstrap runner` set up against the
//! simulator (nodes rented on demand) and the GitLab double. gitlab-runner is played as it
//! behaves: its job request (`POST /api/v4/jobs/request`) is its contact with GitLab, and its
//! job Pods are created with the runner's own credential, in its namespace, with the
//! annotations gitlab-runner 15.9+ sets. Each reason `runner explain` gives is produced by
//! changing what GitLab or the cluster holds, never by handing the command facts; bad input is
//! one sentence and exit 2, with nothing written.

use std::path::PathBuf;
use std::process::Output;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::util::{
    assert_exit, bootstrap_gitlab, run, scratch, snapshot, stderr, stdout, tenantci,
};
use tenantci_testkit::gitlab::jobs::Job;
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble, READ_ONLY_ACCESS_TOKEN};
use tenantci_testkit::kube::{Kubectl, kube_client};
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::snapshot::ClusterSnapshot;
use tenantci_testkit::wait::eventually;

/// The job project's id in the double, and its path.
const PROJECT: u64 = 42;
const PROJECT_PATH: &str = "tenant/app";

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sim: SimProcess,
    gitlab: GitlabDouble,
    runner_id: u64,
}

impl Setup {
    fn config(&self) -> PathBuf {
        self.root.join("gitlab-runner/config.toml")
    }
    fn read_token(&self) -> PathBuf {
        self.root.join("read-token")
    }
    /// What no run may change: the runner's files, the credential, the gateway's state.
    fn files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut all = snapshot(&self.root.join("gitlab-runner"));
        all.extend(snapshot(&self.root.join("creds")));
        all.push((self.read_token(), std::fs::read(self.read_token()).unwrap()));
        all
    }
    async fn runner_pods(&self) -> Api<Pod> {
        Api::namespaced(
            kube_client(&self.root.join("creds/kubeconfig")).await,
            "gitlab-runner",
        )
    }
    fn job_url(&self, id: u64) -> String {
        format!("{}/{PROJECT_PATH}/-/jobs/{id}", self.gitlab.url())
    }
}

/// A cluster whose nodes boot for `boot`, a runner with tag `pod` at the double.
async fn setup(boot: &str) -> Setup {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let sim = SimProcess::start(
        tenantci(),
        &root.join("state"),
        &["ci"],
        &["--node-boot", boot],
    );
    let gitlab = GitlabDouble::start().await.unwrap();
    std::fs::write(root.join("api-token"), DEFAULT_ACCESS_TOKEN).unwrap();
    let read_token = root.join("read-token");
    std::fs::write(&read_token, READ_ONLY_ACCESS_TOKEN).unwrap();
    set_mode(&read_token, 0o600);
    let mut cmd = bootstrap_gitlab(
        &root.join("state"),
        &root.join("creds"),
        &root.join("gitlab-runner/config.toml"),
    );
    cmd.args(["--gitlab-url", &gitlab.url(), "--gitlab-api-token-file"])
        .arg(root.join("api-token"))
        .args(["--runner-type", "instance_type", "--tag-list", "pod"])
        .args(["--cpu-request", "1300m", "--memory-request", "1Gi"]);
    let o = tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap();
    assert_exit(&o, 0);
    let runner_id = gitlab.runners()[0].id;
    Setup {
        _dir: dir,
        root,
        sim,
        gitlab,
        runner_id,
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// gitlab-runner's job request: what makes GitLab count it as in contact.
async fn gitlab_runner_polls(s: &Setup) {
    let token = s.gitlab.runners()[0].token.clone();
    let status = reqwest::Client::new()
        .post(format!("{}/api/v4/jobs/request", s.gitlab.url()))
        .json(&json!({"token": token, "system_id": "s_0123456789ab",
                      "info": {"name": "gitlab-runner", "version": "18.10.0"}}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 204);
}

/// A job Pod as gitlab-runner creates it, with the runner's credential.
async fn job_pod(s: &Setup, name: &str, job: u64) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "gitlab-runner",
            "labels": {"pod": name, "project.runner.gitlab.com/id": PROJECT.to_string(),
                       "manager.runner.gitlab.com/name": "tenant-ci"},
            "annotations": {
                "job.runner.gitlab.com/id": job.to_string(),
                "job.runner.gitlab.com/url": s.job_url(job),
                "job.runner.gitlab.com/name": "build",
                "job.runner.gitlab.com/ref": "main",
                "job.runner.gitlab.com/sha": format!("{job:040x}"),
                "project.runner.gitlab.com/id": PROJECT.to_string(),
            },
        },
        "spec": {"containers": [
            {"name": "build", "image": "alpine:3",
             "resources": {"requests": {"cpu": "1300m", "memory": "1Gi"}}},
            {"name": "helper", "image": "gitlab-runner-helper:x86_64-latest",
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    }))
    .unwrap();
    s.runner_pods()
        .await
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
}

/// GitLab hands job `id` to the runner (as when gitlab-runner picked it).
fn picked(s: &Setup, id: u64) {
    let runner = s.runner_id;
    s.gitlab.update_job(id, |j| {
        j.status = "running".into();
        j.runner_id = Some(runner);
        j.started_at = Some(time::OffsetDateTime::now_utc());
    });
}

async fn tenantci_in(s: &Setup, args: Vec<String>) -> Output {
    let mut cmd = tenantci();
    cmd.args(&args).arg("--config").arg(s.config());
    let before = s.files();
    let o = tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap();
    assert_eq!(s.files(), before, "{args:?} wrote something");
    o
}

/// `runner explain JOB -o json` with the read token.
async fn explain(s: &Setup, job: &str) -> (Output, Value) {
    let args = [
        "runner",
        "explain",
        job,
        "-o",
        "json",
        "--gitlab-api-token-file",
    ]
    .map(String::from)
    .to_vec();
    let mut args = args;
    args.push(s.read_token().display().to_string());
    let o = tenantci_in(s, args).await;
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o, v)
}

fn kinds(v: &Value) -> Vec<String> {
    v["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("no reasons in {v:#}"))
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Asserts the job waits (exit 1) for exactly `want`, the first line containing `says`.
#[track_caller]
fn assert_waits(o: &Output, v: &Value, want: &[&str], says: &str) {
    assert_exit(o, 1);
    assert_eq!(v["verdict"], "waits", "{v:#}");
    assert_eq!(kinds(v), want, "{v:#}");
    let first = v["reasons"][0]["line"].as_str().unwrap();
    assert!(first.contains(says), "{first}");
    assert!(
        v["reasons"][0]["fix"]
            .as_str()
            .is_some_and(|f| !f.is_empty())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_explain_names_each_gitlab_side_reason_and_a_job_that_will_run() {
    let s = setup("30s").await;
    gitlab_runner_polls(&s).await;
    let id = s
        .gitlab
        .add_job(Job::pending(101, PROJECT, "build", "feature", &["pod"]));

    // Nothing holds it: the runner takes it at its next request.
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_exit(&o, 0);
    assert_eq!(v["verdict"], "will_run", "{v:#}");
    assert_eq!(v["runner_id"], s.runner_id);
    let text = tenantci_in(
        &s,
        vec![
            "runner".into(),
            "explain".into(),
            id.to_string(),
            "--project".into(),
            PROJECT_PATH.into(),
            "--gitlab-api-token-file".into(),
            s.read_token().display().to_string(),
        ],
    )
    .await;
    assert_exit(&text, 0);
    assert!(stdout(&text).contains("it will run"), "{}", stdout(&text));

    // Tags the runner lacks, named.
    s.gitlab
        .update_job(id, |j| j.tag_list = vec!["pod".into(), "gpu".into()]);
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(&o, &v, &["tags"], "the job's tags gpu are not on runner");
    let text = tenantci_in(
        &s,
        vec![
            "runner".into(),
            "explain".into(),
            s.job_url(id),
            "--gitlab-api-token-file".into(),
            s.read_token().display().to_string(),
        ],
    )
    .await;
    assert_exit(&text, 1);
    assert!(
        stdout(&text).contains("tags: the job's tags gpu"),
        "{}",
        stdout(&text)
    );
    assert!(stdout(&text).contains("fix: add gpu"), "{}", stdout(&text));

    // An untagged job; the runner does not run untagged jobs.
    s.gitlab.update_job(id, |j| j.tag_list.clear());
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(&o, &v, &["untagged"], "does not run untagged jobs");
    s.gitlab.update_job(id, |j| j.tag_list = vec!["pod".into()]);

    // Paused.
    s.gitlab.update_runner(s.runner_id, |r| r.paused = true);
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(&o, &v, &["paused"], "is paused");
    s.gitlab.update_runner(s.runner_id, |r| r.paused = false);

    // Locked to another project.
    s.gitlab.update_runner(s.runner_id, |r| {
        r.runner_type = "project_type".into();
        r.project_id = Some(7);
        r.locked = true;
    });
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(&o, &v, &["locked"], "not of the job's project 42");
    s.gitlab.update_runner(s.runner_id, |r| {
        r.runner_type = "instance_type".into();
        r.project_id = None;
        r.locked = false;
    });

    // Protected refs only, and `feature` is not protected (`main` is).
    s.gitlab.protect_branch(PROJECT, "main");
    s.gitlab
        .update_runner(s.runner_id, |r| r.access_level = "ref_protected".into());
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(&o, &v, &["protected"], "`feature` is not protected");
    s.gitlab.protect_branch(PROJECT, "feat*");
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_exit(&o, 0);
    assert_eq!(v["verdict"], "will_run", "{v:#}");

    // gitlab-runner has not asked for jobs for three hours: not in contact.
    s.gitlab.update_runner(s.runner_id, |r| {
        for m in &mut r.managers {
            m.contacted_at -= time::Duration::hours(3);
        }
    });
    let (o, v) = explain(&s, &s.job_url(id)).await;
    assert_waits(
        &o,
        &v,
        &["contact"],
        "has not contacted GitLab recently (offline",
    );
    let fix = v["reasons"][0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("systemctl status tenantci-gitlab-runner.service"),
        "{fix}"
    );
    gitlab_runner_polls(&s).await;
    assert_exit(&explain(&s, &s.job_url(id)).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_explain_names_the_pods_holding_every_slot_and_a_pod_waiting_for_a_node() {
    let s = setup("60s").await;
    gitlab_runner_polls(&s).await;
    // One slot: `bootstrap runner` writes `concurrent = 1` into a new config.toml, `limit = 0`.
    let text = std::fs::read_to_string(s.config()).unwrap();
    assert!(
        text.starts_with("concurrent = 1\n") && text.contains("limit = 0"),
        "{text}"
    );

    let first = s
        .gitlab
        .add_job(Job::pending(201, PROJECT, "build", "main", &["pod"]));
    let second = s
        .gitlab
        .add_job(Job::pending(202, PROJECT, "test", "main", &["pod"]));
    picked(&s, first);
    job_pod(&s, "runner-abc-project-42-concurrent-0", first).await;

    // The first job's Pod waits for a rented node to boot, and no pause pod keeps one warm.
    let v = eventually("the Pod's scale-up Event", || async {
        let (o, v) = explain(&s, &s.job_url(first)).await;
        let events = v["pod"]["events"].as_array()?.clone();
        let scaled = events
            .iter()
            .any(|e| e.as_str().is_some_and(|e| e.contains("TriggeredScaleUp")));
        (o.status.code() == Some(1) && scaled).then_some((o, v))
    })
    .await;
    let (o, v) = v;
    assert_waits(
        &o,
        &v,
        &["pod-pending", "warm-pool"],
        "is Pending: a node boots for it",
    );
    assert_eq!(v["pod"]["phase"], "Pending");
    let text = tenantci_in(
        &s,
        vec![
            "runner".into(),
            "explain".into(),
            s.job_url(first),
            "--gitlab-api-token-file".into(),
            s.read_token().display().to_string(),
        ],
    )
    .await;
    assert_exit(&text, 1);
    let out = stdout(&text);
    assert!(
        out.contains("event: Normal TriggeredScaleUp (cluster-autoscaler)"),
        "{out}"
    );
    assert!(
        out.contains("event: Warning FailedScheduling (default-scheduler)"),
        "{out}"
    );
    assert!(out.contains("warm-pool: the warm pool is empty"), "{out}");

    // The second job waits for the slot the first one's Pod holds.
    let (o, v) = explain(&s, &s.job_url(second)).await;
    assert_waits(
        &o,
        &v,
        &["concurrency"],
        "runner-abc-project-42-concurrent-0 (job 201, Pending)",
    );
    assert_eq!(v["concurrency"]["slots"], 1);
}

async fn status(s: &Setup, extra: &[&str]) -> Output {
    let mut args: Vec<String> = ["runner", "status"].map(String::from).to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    tenantci_in(s, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_status_lists_job_pods_with_their_jobs_with_the_runners_own_credential() {
    let s = setup("2s").await;
    gitlab_runner_polls(&s).await;
    let id = s
        .gitlab
        .add_job(Job::pending(301, PROJECT, "build", "main", &["pod"]));
    picked(&s, id);
    job_pod(&s, "runner-xyz-project-42-concurrent-0", id).await;
    // The job Pod runs on the node rented for it.
    let pods = s.runner_pods().await;
    eventually("the job Pod running", || async {
        let p = pods.get("runner-xyz-project-42-concurrent-0").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    // Without what the runner's role need not have for this (Secrets and the rest): only
    // Pods and Events of its namespace stay readable.
    let admin = kube_client(&s.sim.tenant_admin("ci")).await;
    let roles: Api<ClusterRole> = Api::all(admin);
    let mut role = roles.get("gitlab-runner").await.unwrap();
    role.rules = Some(
        serde_json::from_value(json!([
            {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]}
        ]))
        .unwrap(),
    );
    roles
        .replace("gitlab-runner", &Default::default(), &role)
        .await
        .unwrap();

    let token = s.read_token().display().to_string();
    let o = status(&s, &["-o", "json", "--gitlab-api-token-file", &token]).await;
    assert_exit(&o, 0);
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert_eq!(v["version"], 1);
    assert_eq!(v["gitlab"]["runner"]["id"], s.runner_id);
    assert_eq!(v["gitlab"]["runner"]["status"], "online");
    assert_eq!(v["gitlab"]["runner"]["tag_list"], json!(["pod"]));
    assert_eq!(v["gitlab"]["managers"][0]["version"], "18.10.0");
    assert_eq!(v["concurrency"]["concurrent"], 1);
    assert_eq!(v["concurrency"]["limit"], 0);
    assert_eq!(v["concurrency"]["slots"], 1);
    assert_eq!(v["concurrency"]["active"], 1);
    assert_eq!(v["concurrency"]["full"], true);
    let pod = &v["pods"][0];
    assert_eq!(pod["name"], "runner-xyz-project-42-concurrent-0");
    assert_eq!(pod["job"]["id"], 301);
    assert_eq!(pod["job"]["url"], s.job_url(301));
    assert_eq!(pod["job"]["ref"], "main");
    assert_eq!(pod["phase"], "Running");
    assert_eq!(pod["node"], "rented-1");
    assert_eq!(pod["node_source"], "rented");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(!text.contains(READ_ONLY_ACCESS_TOKEN) && !text.contains(&s.gitlab.runners()[0].token));

    let o = status(&s, &["-o", "wide", "--gitlab-api-token-file", &token]).await;
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("runner {} (instance_type): online", s.runner_id)),
        "{out}"
    );
    assert!(out.contains("tags pod; run-untagged false"), "{out}");
    assert!(out.contains("concurrency: 1 job Pods of 1 slots (concurrent 1, limit 0, request_concurrency 1), full"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("runner-xyz"))
        .unwrap_or_else(|| panic!("{out}"));
    for cell in [
        "301",
        "build",
        "Running",
        "rented-1",
        "main",
        "rented",
        &s.job_url(301),
    ] {
        assert!(row.contains(cell), "{cell} not in {row}");
    }

    // An entry without `id`: GitLab is not asked with the runner's token (a verify may add a
    // runner manager and counts as a contact): one sentence, exit 2, nothing changed.
    let text = std::fs::read_to_string(s.config()).unwrap();
    let without_id: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("id = "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(text, without_id);
    std::fs::write(s.config(), &without_id).unwrap();
    let o = status(&s, &["-o", "json", "--gitlab-api-token-file", &token]).await;
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("has no runner `id`") && stderr(&o).contains("add `id = N`"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(s.config()).unwrap(), without_id);
    std::fs::write(s.config(), &text).unwrap();

    // Without a token: the cluster's view and one line on what a token adds.
    let o = status(&s, &[]).await;
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("note: GitLab's view") && out.contains("`read_api`"),
        "{out}"
    );
    assert!(out.contains("runner-xyz-project-42-concurrent-0"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_explain_and_status_refuse_bad_input_in_one_sentence() {
    let s = setup("30s").await;
    let kubectl = Kubectl::new(&s.sim.tenant_admin("ci"), &s.root);
    let cluster_before = ClusterSnapshot::take(&kubectl);
    let id = s
        .gitlab
        .add_job(Job::pending(401, PROJECT, "build", "main", &["pod"]));
    let token = s.read_token().display().to_string();
    let explain_with = |job: String, token: String| {
        vec![
            "runner".to_string(),
            "explain".into(),
            job,
            "--gitlab-api-token-file".into(),
            token,
        ]
    };
    let refused = |o: &Output, says: &str| {
        assert_exit(o, 2);
        let err = stderr(o);
        assert!(err.contains(says), "{says} not in: {err}");
        assert_eq!(err.matches("error:").count(), 1, "{err}");
        assert!(err.contains("help:"), "{err}");
        assert!(stdout(o).is_empty(), "{}", stdout(o));
        assert!(
            !err.contains(READ_ONLY_ACCESS_TOKEN) && !err.contains(DEFAULT_ACCESS_TOKEN),
            "{err}"
        );
    };
    let other = format!("https://gitlab.other.example/{PROJECT_PATH}/-/jobs/{id}");
    refused(
        &tenantci_in(&s, explain_with(other, token.clone())).await,
        "is not at this runner's GitLab",
    );
    refused(
        &tenantci_in(&s, explain_with(s.job_url(999), token.clone())).await,
        "has no job 999 in project tenant/app",
    );

    let open = s.root.join("open-token");
    std::fs::write(&open, READ_ONLY_ACCESS_TOKEN).unwrap();
    set_mode(&open, 0o644);
    let open = open.display().to_string();
    refused(
        &tenantci_in(&s, explain_with(s.job_url(id), open.clone())).await,
        "is open to other accounts",
    );
    refused(
        &tenantci_in(
            &s,
            vec![
                "runner".into(),
                "status".into(),
                "--gitlab-api-token-file".into(),
                open,
            ],
        )
        .await,
        "is open to other accounts",
    );

    let create_only = s.root.join("create-only");
    std::fs::write(&create_only, DEFAULT_ACCESS_TOKEN).unwrap();
    set_mode(&create_only, 0o600);
    let create_only = create_only.display().to_string();
    refused(
        &tenantci_in(&s, explain_with(s.job_url(id), create_only.clone())).await,
        "lacks the `read_api` scope",
    );
    refused(
        &tenantci_in(
            &s,
            vec![
                "runner".into(),
                "status".into(),
                "--gitlab-api-token-file".into(),
                create_only,
            ],
        )
        .await,
        "lacks the `read_api` scope",
    );

    let unknown = s.root.join("unknown-token");
    std::fs::write(&unknown, "glpat-revoked").unwrap();
    set_mode(&unknown, 0o600);
    let unknown = unknown.display().to_string();
    refused(
        &tenantci_in(&s, explain_with(s.job_url(id), unknown)).await,
        "GitLab refused the access token (401 Unauthorized)",
    );
    refused(
        &tenantci_in(&s, vec!["runner".into(), "explain".into(), s.job_url(id)]).await,
        "no --gitlab-api-token-file was given",
    );

    let mut args = explain_with(s.job_url(id), token);
    args.extend(["--name".into(), "nope".into()]);
    refused(
        &tenantci_in(&s, args).await,
        "has no [[runners]] entry named `nope`",
    );
    refused(
        &tenantci_in(
            &s,
            vec![
                "runner".into(),
                "status".into(),
                "--name".into(),
                "nope".into(),
            ],
        )
        .await,
        "has no [[runners]] entry named `nope`",
    );
    assert_eq!(
        ClusterSnapshot::take(&kubectl),
        cluster_before,
        "a refusal changed the cluster"
    );
}
