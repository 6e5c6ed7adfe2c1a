//! The shared actions cache (issue 29), driven the way jobs drive it: the official
//! `@actions/cache` package (`cache/client.js`, installed pinned by scripts/lib/ensure.sh or
//! here) with `ACTIONS_CACHE_URL` and `ACTIONS_RUNTIME_TOKEN` as the runner sets them, through
//! the executor-proxy started from the Pod spec the dispatcher wrote; and raw HTTP for every
//! bad input the toolkit never sends.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tenantci_core::forge::gitea::json::struct_to_json;
use tenantci_dispatch::cache::settings::CacheSettings;
use tenantci_dispatch::task::spec::CONFIG_KEY;
use tenantci_testkit::boot::BootedSandbox;
use tenantci_testkit::cache::RawCache;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::moto::Moto;
use tenantci_testkit::wait::eventually;

use super::harness::World;
use crate::util::{bin, scratch, tenantci};

mod race;

/// The `@actions/cache` release actions/cache@v4 bundles; scripts/lib/ensure.sh pins the same.
const ACTIONS_CACHE: &str = "4.0.5";

/// `node_modules` holding the pinned `@actions/cache`: installed once under target/ (into a
/// fresh directory renamed into place, so parallel tests never see half an install).
fn actions_cache_modules() -> PathBuf {
    let dir = crate::util::target_dir().join("actions-cache-client");
    let manifest = dir.join("node_modules/@actions/cache/package.json");
    let pinned = |m: &Path| {
        std::fs::read_to_string(m)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["version"] == ACTIONS_CACHE)
    };
    if !pinned(&manifest) {
        let fresh =
            crate::util::target_dir().join(format!("actions-cache-client.{}", std::process::id()));
        std::fs::create_dir_all(&fresh).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&fresh)
            .arg(format!("@actions/cache@{ACTIONS_CACHE}"))
            .output()
            .expect("npm (scripts/lib/ensure.sh installs node and npm)");
        assert!(
            out.status.success(),
            "npm install @actions/cache: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if std::fs::rename(&fresh, &dir).is_err() {
            // Another test installed it meanwhile, or an old version is in the way.
            if !pinned(&manifest) {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::rename(&fresh, &dir).unwrap();
            } else {
                let _ = std::fs::remove_dir_all(&fresh);
            }
        }
    }
    dir.join("node_modules")
}

/// One task of `repository`: its executor's proxy and the job's cache environment.
pub(crate) struct Job {
    pub(crate) task: i64,
    /// What carries the job's calls, running as long as the job (dropped: stopped): the proxy
    /// started from its Pod spec, or its VM sandbox's boot script with the proxy it started.
    _road: Box<dyn Any>,
    pub(crate) ex: Executor,
    /// `ACTIONS_CACHE_URL` (the runner config's `cache.external_server`, at this proxy).
    cache_url: String,
    runtime_token: String,
}

/// Creates a job with the task `context` (its repository, refs) at the Gitea double, for the
/// backend `label` selects; its id.
pub(crate) async fn post_job(w: &World, name: &str, context: Value, label: &str) -> i64 {
    let resp = w
        .http()
        .post(format!("{}/jobs", w.gitea.admin_url))
        .json(&serde_json::json!({
            "name": name,
            "runs_on": ["self-hosted", label],
            "workflow_payload": format!("name: {name}\njobs:\n  build:\n    runs-on: [self-hosted, {label}]\n    steps:\n      - run: make\n"),
            "context": context,
        }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    resp.json::<Value>().await.unwrap()["job_id"]
        .as_i64()
        .unwrap()
}

/// The runner config's `cache.external_server`, checked to be at the proxy's address `at`.
fn external_server(config: &[u8], at: &str) -> String {
    let config: serde_yaml::Value = serde_yaml::from_slice(config).unwrap();
    let server = config["cache"]["external_server"]
        .as_str()
        .expect("the runner config names the shared cache")
        .to_string();
    assert!(
        server.starts_with(&format!("{at}/_tenantci/cache/")) && server.ends_with('/'),
        "{server}"
    );
    server
}

impl Job {
    /// A job of `repository`'s default branch (the double's default `ref`).
    async fn start(w: &World, name: &str, repository: &str) -> Job {
        Job::start_in(w, name, serde_json::json!({ "repository": repository })).await
    }

    /// A job with the task `context` (repository, `ref`, `base_ref`) on a Pod.
    async fn start_in(w: &World, name: &str, context: Value) -> Job {
        let task = w.claimed(post_job(w, name, context, "pod").await).await;
        Job::on_pod(w, task, tenantci()).await
    }

    /// Claimed `task`'s job on its Pod once the Pod is there, its proxy run by `proxy` (a
    /// `tenantci` command: the proxy's release may be another than the dispatcher's).
    pub(crate) async fn on_pod(w: &World, task: i64, proxy: Command) -> Job {
        let (secret, pod) = w.objects(task).await;
        let config = &secret.data.as_ref().unwrap()[CONFIG_KEY].0;
        let server = external_server(config, "http://127.0.0.1:8431");
        let proxy = PodProxy::start(proxy, &secret, &pod);
        let cache_url = server.replace("http://127.0.0.1:8431", &proxy.address);
        let ex = Executor::through(&secret, &proxy);
        Job::fetched(task, Box::new(proxy), ex, cache_url).await
    }

    /// The same on a VM sandbox: its boot script run for real, the test as its job.
    async fn start_vm(w: &World, name: &str, repository: &str) -> Job {
        let context = serde_json::json!({ "repository": repository });
        let task = w.claimed(post_job(w, name, context, "vm").await).await;
        let sandbox = eventually("the task's VM sandbox", || async {
            w.sandboxes_of(task).await.into_iter().next()
        })
        .await;
        let booted = BootedSandbox::boot(&bin(), &sandbox, "true\n");
        let config = std::fs::read(booted.vm_dir.join("config.yaml")).unwrap();
        // The boot script's proxy listens on a relocated port (tenantci_testkit::boot).
        let cache_url = external_server(&config, &booted.address);
        let ex = booted.executor();
        Job::fetched(task, Box::new(booted), ex, cache_url).await
    }

    /// Fetches the task through `road` as the runner would: the job's runtime token.
    async fn fetched(task: i64, road: Box<dyn Any>, ex: Executor, cache_url: String) -> Job {
        let fetched = ex.fetch().await;
        let context = struct_to_json(fetched.context.as_ref().unwrap());
        let runtime_token = context["gitea_runtime_token"].as_str().unwrap().to_string();
        Job {
            task,
            _road: road,
            ex,
            cache_url,
            runtime_token,
        }
    }

    /// Runs `client.js ARGS` in `work` as a job step would; its JSON line.
    async fn toolkit(&self, work: &Path, args: &[&str]) -> Value {
        let modules = actions_cache_modules();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/dispatch/cache/client.js");
        let mut cmd = Command::new("node");
        cmd.arg(script)
            .args(args)
            .current_dir(work)
            .env("NODE_PATH", modules)
            .env("ACTIONS_CACHE_URL", &self.cache_url)
            .env("ACTIONS_RUNTIME_TOKEN", &self.runtime_token)
            .env("GITHUB_WORKSPACE", work)
            .env("RUNNER_TEMP", work.join("tmp"))
            .env_remove("ACTIONS_CACHE_SERVICE_V2")
            .env_remove("ACTIONS_RESULTS_URL");
        std::fs::create_dir_all(work.join("tmp")).unwrap();
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "node client.js {args:?}\n--- stdout\n{stdout}\n--- stderr\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap();
        serde_json::from_str(line).unwrap()
    }

    /// Saves `data/a.txt` = `content` under `key`; the toolkit's cache id.
    pub(crate) async fn save(&self, key: &str, content: &str) -> i64 {
        let work = scratch();
        std::fs::create_dir_all(work.path().join("data")).unwrap();
        std::fs::write(work.path().join("data/a.txt"), content).unwrap();
        let id = self.toolkit(work.path(), &["save", key]).await["id"]
            .as_i64()
            .unwrap();
        assert!(id > 0, "the toolkit saved `{key}` (id {id})");
        id
    }

    /// Restores by `keys` (the primary key first); the key hit and `data/a.txt`.
    pub(crate) async fn restore(&self, keys: &[&str]) -> Option<(String, String)> {
        let work = scratch();
        let mut args = vec!["restore"];
        args.extend(keys);
        let hit = self.toolkit(work.path(), &args).await;
        let key = hit["hit"].as_str()?.to_string();
        let content = std::fs::read_to_string(work.path().join("data/a.txt")).unwrap();
        Some((key, content))
    }

    /// The job's cache API for the calls the toolkit never makes, with its runtime token.
    fn raw(&self, http: &reqwest::Client) -> RawCache {
        RawCache {
            http: http.clone(),
            api: format!("{}_apis/artifactcache", self.cache_url),
            token: self.runtime_token.clone(),
        }
    }

    pub(crate) async fn finish(&self, w: &World) {
        self.ex
            .finish(self.task, &[&format!("ran task {}", self.task)])
            .await;
        w.assert_succeeded_once(self.task).await;
    }
}

/// A cache whose storage is `dir`.
pub(crate) fn with_cache(w: &mut World, dir: &Path, max_size_mib: u64, max_entry_size_mib: u64) {
    w.base_mut().cache = Some(CacheSettings {
        max_size_mib,
        max_entry_size_mib,
        ..CacheSettings::in_dir(dir)
    });
}

/// Any upload part being written under `dir` (LocalFileSystem stages a part as `<path>#<n>`).
fn staged_part(dir: &Path) -> bool {
    fn walk(d: &Path) -> bool {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    p.to_string_lossy().contains("/parts/")
                }
            })
    }
    walk(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_toolkit_saves_and_restores_within_its_repository_across_restarts() {
    let mut w = World::start(4).await;
    let store = scratch();
    with_cache(&mut w, &store.path().join("cache"), 1024, 512);
    let mut d = w.dispatcher("d1").await;

    // sim/demo saves; a later task of sim/demo restores it, by key and by restore-key prefix.
    let demo = Job::start(&w, "demo-1", "sim/demo").await;
    demo.save("deps-linux-1", "demo v1").await;
    demo.finish(&w).await;

    // Another repository misses the same key, then saves its own under it.
    let other = Job::start(&w, "other-1", "sim/other").await;
    assert_eq!(other.restore(&["deps-linux-1"]).await, None);
    assert_eq!(other.restore(&["deps-linux-2", "deps-"]).await, None);
    other.save("deps-linux-1", "other v1").await;
    other.finish(&w).await;

    // A restart between the save and the restore loses nothing.
    d.kill9();
    let mut d = w.dispatcher("d1").await;
    let demo2 = Job::start(&w, "demo-2", "sim/demo").await;
    assert_eq!(
        demo2.restore(&["deps-linux-1"]).await,
        Some(("deps-linux-1".into(), "demo v1".into())),
        "sim/demo restores its own entry, not sim/other's under the same key"
    );
    assert_eq!(
        demo2.restore(&["deps-linux-2", "deps-linux-"]).await,
        Some(("deps-linux-1".into(), "demo v1".into()))
    );
    assert!(
        d.metric("tenantci_dispatch_cache_hits_total")
            .await
            .unwrap()
            >= 2.0
    );

    // kill -9 in the middle of an upload: no half entry, the committed one intact.
    let raw = demo2.raw(w.http());
    let id = raw.reserved("half", 4 << 20).await;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    futures::SinkExt::send(&mut tx, Ok(vec![7u8; 2 << 20]))
        .await
        .unwrap();
    // Sent by hand, not with `raw.patch`: the kill breaks it, which is no failure here.
    let upload = tokio::spawn(
        raw.http
            .patch(format!("{}/caches/{id}", raw.api))
            .header("content-range", format!("bytes 0-{}/*", (4 << 20) - 1))
            .body(reqwest::Body::wrap_stream(rx))
            .send(),
    );
    let cache_dir = store.path().join("cache");
    tenantci_testkit::wait::eventually("the upload's part is being written", || async {
        staged_part(&cache_dir).then_some(())
    })
    .await;
    d.kill9();
    drop(tx);
    let _ = upload.await;
    let d2 = w.dispatcher("d1").await;
    assert_eq!(
        raw.lookup("half").await.status(),
        204,
        "no half entry is visible"
    );
    let commit = raw.commit(id, 4 << 20).await;
    assert_eq!(commit.status(), 400);
    let why: Value = commit.json().await.unwrap();
    assert!(
        why["message"].as_str().unwrap().contains("incomplete"),
        "{why}"
    );
    assert_eq!(
        demo2.restore(&["deps-linux-1"]).await,
        Some(("deps-linux-1".into(), "demo v1".into())),
        "the committed entry survives the kill"
    );
    demo2.finish(&w).await;
    drop(d2);
    drop(d);
}

/// Branch scopes, as GitHub has them: a pull request's job restores the default branch's entry,
/// saves its own under the same key beside it, and the default branch's next job still
/// restores its own and never sees the pull request's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pull_request_restores_the_default_branch_s_entries_and_never_replaces_them() {
    let mut w = World::start(4).await;
    let store = scratch();
    with_cache(&mut w, &store.path().join("cache"), 1024, 512);
    let _d = w.dispatcher("d1").await;
    let pull_request = || {
        serde_json::json!({
            "repository": "sim/demo",
            "ref": "refs/pull/3/head",
            "base_ref": "main",
            "head_ref": "feature",
        })
    };

    let main = Job::start(&w, "main-1", "sim/demo").await;
    main.save("deps-1", "main v1").await;
    main.finish(&w).await;

    let pr = Job::start_in(&w, "pr-1", pull_request()).await;
    assert_eq!(
        pr.restore(&["deps-1"]).await,
        Some(("deps-1".into(), "main v1".into())),
        "a pull request restores from its base branch"
    );
    pr.save("deps-1", "pr v1").await;
    pr.save("pr-only-1", "pr only").await;
    pr.finish(&w).await;

    let main = Job::start(&w, "main-2", "sim/demo").await;
    assert_eq!(
        main.restore(&["deps-1"]).await,
        Some(("deps-1".into(), "main v1".into())),
        "the pull request's save under the same key did not replace the default branch's"
    );
    assert_eq!(main.restore(&["pr-only-1", "pr-"]).await, None);
    main.finish(&w).await;

    let pr = Job::start_in(&w, "pr-2", pull_request()).await;
    assert_eq!(
        pr.restore(&["deps-1"]).await,
        Some(("deps-1".into(), "pr v1".into())),
        "its own ref first"
    );
    pr.finish(&w).await;
}

/// The cache from VM sandboxes: the boot script's proxy carries the toolkit's calls with the
/// grant its sealed config names; an entry a VM job saved is missed by another repository's VM
/// job and restored by its own repository's next job on a Pod (one cache for both backends).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vm_job_s_entry_is_restored_by_its_repository_s_next_job_on_a_pod() {
    let mut w = super::vm::world(1, 1).await;
    let store = scratch();
    with_cache(&mut w, &store.path().join("cache"), 1024, 512);
    let d = w.dispatcher("d1").await;

    let vm = Job::start_vm(&w, "vm-demo", "sim/demo").await;
    assert_eq!(vm.restore(&["deps-vm-1"]).await, None);
    vm.save("deps-vm-1", "saved in a vm").await;
    vm.finish(&w).await;
    drop(vm);

    let other = Job::start_vm(&w, "vm-other", "sim/other").await;
    assert_eq!(other.restore(&["deps-vm-1"]).await, None);
    assert_eq!(other.restore(&["deps-"]).await, None);
    other.finish(&w).await;
    drop(other);

    let pod = Job::start(&w, "pod-demo", "sim/demo").await;
    assert_eq!(
        pod.restore(&["deps-vm-2", "deps-vm-"]).await,
        Some(("deps-vm-1".into(), "saved in a vm".into()))
    );
    pod.finish(&w).await;
    assert_eq!(
        d.metric("tenantci_dispatch_cache_hits_total").await,
        Some(1.0)
    );
    w.no_sandboxes_left().await;
}

/// A refusal's status, and its JSON sentence containing `says`.
async fn refused(resp: reqwest::Response, status: u16, says: &str) {
    assert_eq!(resp.status(), status, "{says}");
    let body: Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "`{message}` names `{says}`");
}

/// No grant, a forged one (401); the grant without the job's runtime token (401) or with
/// another job's (403). The URL is no secret (a step may print its environment); the token
/// is masked.
async fn grants_and_tokens_are_checked(http: &reqwest::Client, demo: &Job, other: &Job) {
    let a = demo.raw(http);
    let proxy = demo
        .cache_url
        .split("/_tenantci/")
        .next()
        .unwrap()
        .to_string();

    let none = http
        .get(format!(
            "{proxy}/_tenantci/cache/_apis/artifactcache/cache?keys=a&version=v1"
        ))
        .send()
        .await
        .unwrap();
    refused(none, 401, "grant").await;
    let mut forged = demo.cache_url.trim_end_matches('/').to_string();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let forged = http
        .get(format!(
            "{forged}/_apis/artifactcache/cache?keys=a&version=v1"
        ))
        .send()
        .await
        .unwrap();
    refused(forged, 401, "grant").await;
    let bare = http
        .get(format!("{}/cache?keys=a&version=v1", a.api))
        .send()
        .await
        .unwrap();
    refused(bare, 401, "Authorization: Bearer").await;
    let swapped = RawCache {
        token: other.runtime_token.clone(),
        ..a.clone()
    };
    refused(swapped.reserve("a", 1).await, 403, "not the runtime token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_cache_input_is_refused_with_a_sentence_and_the_size_limit_evicts_the_least_recently_used()
 {
    let mut w = World::start(4).await;
    let store = scratch();
    with_cache(&mut w, &store.path().join("cache"), 1, 1);
    let d = w.dispatcher("d1").await;
    let demo = Job::start(&w, "demo", "sim/demo").await;
    let other = Job::start(&w, "other", "sim/other").await;
    let http = w.http();
    let a = demo.raw(http);
    let b = other.raw(http);
    grants_and_tokens_are_checked(http, &demo, &other).await;

    // Absurd keys and versions, an entry past the limit.
    refused(a.lookup(&"k".repeat(513)).await, 400, "513 bytes").await;
    let long_version = http
        .post(format!("{}/caches", a.api))
        .bearer_auth(&demo.runtime_token)
        .json(&serde_json::json!({"key": "k", "version": "v".repeat(600)}))
        .send()
        .await
        .unwrap();
    refused(long_version, 400, "version").await;
    refused(
        a.reserve("big", 2 << 20).await,
        413,
        "cache.max_entry_size_mib",
    )
    .await;

    let id = bad_ranges(&a).await;
    // An incomplete commit, then another repository touching this upload: refused.
    refused(a.commit(id, 10).await, 400, "bytes 5-9 were never uploaded").await;
    refused(b.patch(id, 5, 9, vec![2; 5]).await, 404, "no upload").await;
    refused(b.commit(id, 5).await, 404, "no upload").await;
    assert_eq!(
        a.lookup("small").await.status(),
        204,
        "nothing half is visible"
    );
    assert_eq!(a.patch(id, 5, 9, vec![1; 5]).await.status(), 200);
    assert_eq!(a.commit(id, 10).await.status(), 200);
    // The committed entry is sim/demo's alone: sim/other neither finds nor downloads it.
    let hit: Value = a.lookup("small").await.json().await.unwrap();
    let location = hit["archiveLocation"].as_str().unwrap().to_string();
    assert_eq!(
        http.get(&location)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .as_ref(),
        &[1u8; 10]
    );
    assert_eq!(b.lookup("small").await.status(), 204);
    // The download's ticket is bound to the grant and the entry it was made for.
    let stolen = location.replace(
        demo.cache_url.trim_end_matches('/'),
        other.cache_url.trim_end_matches('/'),
    );
    refused(http.get(&stolen).send().await.unwrap(), 403, "ticket").await;
    let (unticketed, _) = location.split_once('?').unwrap();
    refused(http.get(unticketed).send().await.unwrap(), 403, "ticket").await;
    refused(a.reserve("small", 10).await, 409, "exists already").await;

    evicts_the_least_recently_used(&a, &d).await;
    demo.finish(&w).await;
    other.finish(&w).await;
}

/// Ranges longer or shorter than announced, past the limit, past the reservation, overlapping,
/// at the edge of 64 bits: each refused; the id of `small`, its first five bytes uploaded.
async fn bad_ranges(a: &RawCache) -> u64 {
    let id = a.reserved("small", 10).await;
    refused(a.patch(id, 0, 9, vec![1; 11]).await, 400, "more bytes").await;
    refused(a.patch(id, 0, 9, vec![1; 4]).await, 400, "ended after 4").await;
    refused(
        a.patch(id, 0, 2 << 20, vec![]).await,
        413,
        "past this cache's limit",
    )
    .await;
    refused(
        a.patch(id, 5, 14, vec![1; 10]).await,
        400,
        "past the 10 bytes",
    )
    .await;
    assert_eq!(a.patch(id, 0, 4, vec![1; 5]).await.status(), 200);
    refused(a.patch(id, 2, 6, vec![1; 5]).await, 409, "overlaps").await;
    range_at_the_edge_of_64_bits(a).await;
    id
}

/// Issue 45: a range ending at the largest 64-bit number with an empty body, whose length
/// wrapped to zero (in a debug build the request panicked), is a 400 naming it; nothing is
/// kept, so a commit of the zero bytes no reservation allowed is refused too.
async fn range_at_the_edge_of_64_bits(a: &RawCache) {
    let id = a.reserved("wraps", 10).await;
    refused(a.patch(id, 0, u64::MAX, vec![]).await, 400, "past any size").await;
    refused(
        a.patch(id, u64::MAX, u64::MAX, vec![]).await,
        400,
        "past any size",
    )
    .await;
    refused(a.commit(id, 0).await, 400, "not the 10 bytes reserved").await;
    assert_eq!(a.lookup("wraps").await.status(), 204, "no entry");
}

/// The moto release the S3 test runs (PyPI `moto[server]`: an S3-compatible server).
const MOTO: &str = "5.1.*";

/// `moto_server` from its venv under target/ (`util::pip_venv`); only this test uses it.
fn moto_server() -> PathBuf {
    crate::util::pip_venv("moto-venv", &format!("moto[server]=={MOTO}"), "moto_server")
}

/// A cache in moto's bucket `ci-cache` (created here); the directory holding its credentials
/// file, which moto takes whatever it says (read as the runbook documents it: 0600).
async fn with_s3_cache(w: &mut World, moto: &Moto) -> tempfile::TempDir {
    let secrets = scratch();
    let credentials = secrets.path().join("s3.credentials");
    std::fs::write(&credentials, "tenantci-test\nnot-a-real-secret\n").unwrap();
    std::fs::set_permissions(
        &credentials,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    moto.bucket("ci-cache").await;
    w.base_mut().cache = Some(CacheSettings {
        dir: None,
        s3_bucket: Some("ci-cache".into()),
        s3_endpoint: Some(moto.url.clone()),
        s3_region: Some("us-east-1".into()),
        s3_credentials_file: Some(credentials),
        ..CacheSettings::in_dir("unused")
    });
    secrets
}

/// The S3 backend against moto (which checks no signatures: the presigned URLs are
/// object_store's SigV4, checked by AWS, MinIO, Ceph RGW), before and after a kill -9, and with
/// `s3_direct_downloads` after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_toolkit_saves_and_restores_through_an_s3_bucket_across_a_restart() {
    let moto = Moto::start(&moto_server()).await;
    let mut w = World::start(4).await;
    let _secrets = with_s3_cache(&mut w, &moto).await;
    let mut d = w.dispatcher("d1").await;
    let demo = Job::start(&w, "demo-1", "sim/demo").await;
    demo.save("deps-1", "demo in s3").await;
    demo.finish(&w).await;
    let other = Job::start(&w, "other-1", "sim/other").await;
    assert_eq!(other.restore(&["deps-1", "deps-"]).await, None);
    other.finish(&w).await;
    d.kill9();
    // Restarted with direct downloads: restores read the bucket through presigned URLs, an
    // entry saved before included (one range: its part is the one object).
    let config = w.config_path("d1");
    let text = std::fs::read_to_string(&config).unwrap();
    let on = text.replacen("[cache]\n", "[cache]\ns3_direct_downloads = true\n", 1);
    assert_ne!(on, text, "the config has a [cache] section");
    std::fs::write(&config, on).unwrap();
    let _d = w.dispatcher("d1").await;
    let demo2 = Job::start(&w, "demo-2", "sim/demo").await;
    assert_eq!(
        demo2.restore(&["deps-2", "deps-"]).await,
        Some(("deps-1".into(), "demo in s3".into()))
    );
    // An entry of two ranges is joined at its commit into the one object the URL names.
    let raw = demo2.raw(w.http());
    let (first, second) = (vec![5u8; 6 << 20], vec![6u8; 1 << 20]);
    let id = raw.reserved("two-ranges", 7 << 20).await;
    assert_eq!(
        raw.patch(id, 6 << 20, (7 << 20) - 1, second.clone())
            .await
            .status(),
        200
    );
    assert_eq!(
        raw.patch(id, 0, (6 << 20) - 1, first.clone())
            .await
            .status(),
        200
    );
    assert_eq!(raw.commit(id, 7 << 20).await.status(), 200);
    // The bucket holds the joined object, and the ranges no longer (they would double it).
    let listing = w
        .http()
        .get(format!("{}/ci-cache?list-type=2&prefix=v1/", moto.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        listing.contains(&format!("/joined/{id}</Key>")),
        "{listing}"
    );
    assert!(!listing.contains(&format!("/parts/{id}/")), "{listing}");
    let hit: Value = raw.lookup("two-ranges").await.json().await.unwrap();
    let location = hit["archiveLocation"].as_str().unwrap();
    assert!(
        location.starts_with(&format!("{}/ci-cache/v1/", moto.url))
            && location.contains("X-Amz-Signature=")
            && location.contains("X-Amz-Expires=900"),
        "a presigned GET of the bucket, 15 minutes: {location}"
    );
    let bytes = w
        .http()
        .get(location)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        bytes.len() == 7 << 20 && bytes[..6 << 20] == first[..] && bytes[6 << 20..] == second[..]
    );
    demo2.finish(&w).await;
}

/// The size limit (1 MiB): a second 600 KiB entry pushes out the least recently used, with
/// every entry restored before it (`small`).
async fn evicts_the_least_recently_used(a: &RawCache, d: &super::harness::Dispatcher) {
    let first = a.save("first", 600 << 10, vec![3; 600 << 10]).await;
    let second = a.save("second", 600 << 10, vec![4; 600 << 10]).await;
    assert_ne!(first, second);
    tenantci_testkit::wait::eventually("the sweep evicted", || async {
        let n = d
            .metric("tenantci_dispatch_cache_evicted_entries_total")
            .await?;
        (n >= 2.0).then_some(())
    })
    .await;
    assert_eq!(
        a.lookup("first").await.status(),
        204,
        "the older entry went"
    );
    assert_eq!(a.lookup("small").await.status(), 204, "the oldest too");
    let bytes = a.restore("second").await;
    assert_eq!(bytes.len(), 600 << 10);
    assert!(bytes.iter().all(|b| *b == 4));
    assert!(
        d.metric("tenantci_dispatch_cache_evicted_bytes_total")
            .await
            .unwrap()
            >= (600 << 10) as f64
    );
}
