//! The shared actions cache (issue 29), driven the way jobs drive it: the official
//! `@actions/cache` package (`cache/client.js`, installed pinned by scripts/lib/ensure.sh or
//! here) with `ACTIONS_CACHE_URL` and `ACTIONS_RUNTIME_TOKEN` as the runner sets them, through
//! the executor-proxy started from the Pod spec the dispatcher wrote; and raw HTTP for every
//! bad input the toolkit never sends.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tenantci_core::forge::gitea::json::struct_to_json;
use tenantci_dispatch::backend::spec::CONFIG_KEY;
use tenantci_dispatch::cache::settings::Cache as CacheSettings;
use tenantci_testkit::executor::{Executor, PodProxy};

use super::harness::World;
use crate::util::{scratch, tenantci};

/// The `@actions/cache` release actions/cache@v4 bundles; scripts/lib/ensure.sh pins the same.
const ACTIONS_CACHE: &str = "4.0.5";

/// The workspace's target directory.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// `node_modules` holding the pinned `@actions/cache`: installed once under target/ (into a
/// fresh directory renamed into place, so parallel tests never see half an install).
fn actions_cache_modules() -> PathBuf {
    let dir = target_dir().join("actions-cache-client");
    let manifest = dir.join("node_modules/@actions/cache/package.json");
    let pinned = |m: &Path| {
        std::fs::read_to_string(m)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["version"] == ACTIONS_CACHE)
    };
    if !pinned(&manifest) {
        let fresh = target_dir().join(format!("actions-cache-client.{}", std::process::id()));
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
struct Job {
    task: i64,
    /// The executor's proxy, running as long as the job (dropped: stopped).
    _proxy: PodProxy,
    ex: Executor,
    /// `ACTIONS_CACHE_URL` (the runner config's `cache.external_server`, at this proxy).
    cache_url: String,
    runtime_token: String,
}

impl Job {
    async fn start(w: &World, name: &str, repository: &str) -> Job {
        let resp = w
            .http()
            .post(format!("{}/jobs", w.gitea.admin_url))
            .json(&serde_json::json!({
                "name": name,
                "runs_on": ["self-hosted", "pod"],
                "workflow_payload": format!("name: {name}\njobs:\n  build:\n    runs-on: [self-hosted, pod]\n    steps:\n      - run: make\n"),
                "context": {"repository": repository},
            }))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
        let job = resp.json::<Value>().await.unwrap()["job_id"]
            .as_i64()
            .unwrap();
        let task = w.claimed(job).await;
        let (secret, pod) = w.objects(task).await;
        let config: serde_yaml::Value =
            serde_yaml::from_slice(&secret.data.as_ref().unwrap()[CONFIG_KEY].0).unwrap();
        let server = config["cache"]["external_server"]
            .as_str()
            .expect("the runner config names the shared cache")
            .to_string();
        assert!(
            server.starts_with("http://127.0.0.1:8431/_tenantci/cache/") && server.ends_with('/'),
            "{server}"
        );
        let proxy = PodProxy::start(tenantci(), &secret, &pod);
        let cache_url = server.replace("http://127.0.0.1:8431", &proxy.address);
        let ex = Executor::through(&secret, &proxy);
        let fetched = ex.fetch().await;
        let context = struct_to_json(fetched.context.as_ref().unwrap());
        let runtime_token = context["gitea_runtime_token"].as_str().unwrap().to_string();
        Job {
            task,
            _proxy: proxy,
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
    async fn save(&self, key: &str, content: &str) -> i64 {
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
    async fn restore(&self, keys: &[&str]) -> Option<(String, String)> {
        let work = scratch();
        let mut args = vec!["restore"];
        args.extend(keys);
        let hit = self.toolkit(work.path(), &args).await;
        let key = hit["hit"].as_str()?.to_string();
        let content = std::fs::read_to_string(work.path().join("data/a.txt")).unwrap();
        Some((key, content))
    }

    async fn finish(&self, w: &World) {
        self.ex
            .finish(self.task, &[&format!("ran task {}", self.task)])
            .await;
        w.assert_succeeded_once(self.task).await;
    }
}

/// A cache whose storage is `dir`.
fn with_cache(w: &mut World, dir: &Path, max_size_mib: u64, max_entry_size_mib: u64) {
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
    let api = format!("{}_apis/artifactcache", demo2.cache_url);
    let http = w.http();
    let reserved: Value = http
        .post(format!("{api}/caches"))
        .json(&serde_json::json!({"key": "half", "version": "v1", "cacheSize": 4 << 20}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = reserved["cacheId"].as_u64().unwrap();
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    futures::SinkExt::send(&mut tx, Ok(vec![7u8; 2 << 20]))
        .await
        .unwrap();
    let upload = tokio::spawn(
        http.patch(format!("{api}/caches/{id}"))
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
    let lookup = http
        .get(format!("{api}/cache?keys=half&version=v1"))
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), 204, "no half entry is visible");
    let commit = http
        .post(format!("{api}/caches/{id}"))
        .json(&serde_json::json!({"size": 4 << 20}))
        .send()
        .await
        .unwrap();
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
