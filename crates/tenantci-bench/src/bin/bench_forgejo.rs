//! Burst pickup benchmark (issue 31): JOBS jobs waiting at once, picked up by one
//! `tenantci dispatch run` with capacity JOBS, against the Gitea double as Gitea (one task per
//! FetchTask) and as Forgejo (`--forgejo`: up to the free slots per FetchTask), side by side
//! in one run. Per forge: a fresh `tenantci sim --gitea [--forgejo]`, nats-server and
//! `dispatch init` (which reads the forge from the version API); the dispatcher leads and
//! idles; the jobs are enqueued while the double holds them (`/admin/hold`); the hold is
//! released, and from then: FetchTask calls the double answered (all, and those that handed
//! out tasks) and the time until the last executor Pod exists (the test's clock, listing Pods).
//! Prints Markdown on stdout, progress on stderr; `scripts/bench-forgejo.sh` writes it into
//! docs/benchmarks/forgejo.md.
//!
//! Usage: bench_forgejo TENANTCI_BIN [JOBS=50] [ROUNDS=3]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use tenantci_testkit::world::{self, Dispatcher, EXECUTOR_IMAGE as IMAGE, NAMESPACE, Options};

/// A deadlock guard per wait, not a measurement.
const DEADLINE: Duration = Duration::from_secs(120);

fn progress(msg: &str) {
    eprintln!("bench_forgejo: {msg}");
}

async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One round's numbers.
struct Round {
    calls: u64,
    claiming: u64,
    last_created_ms: f64,
}

/// The testkit's dispatcher world ([`tenantci_testkit::world`]) and its one dispatcher.
struct World {
    /// First, so it is killed before the simulator.
    dispatcher: Dispatcher,
    inner: world::World,
}

impl World {
    async fn start(bin: &Path, forge: &str, jobs: usize) -> World {
        let mut options = Options::new(bin)
            .dir(tempfile::tempdir().unwrap())
            .sim_log()
            .nats_in_dir()
            .sim_flags(&["--in-memory"]);
        if forge == "forgejo" {
            options = options.forgejo();
        }
        let mut inner = options.start().await;
        let config = inner.init(&["--executor-image", IMAGE, "--proxy-image", IMAGE]);
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(
            text.contains(&format!("forge = \"{forge}\"")),
            "init detected {forge}"
        );
        let mut cmd = inner.command();
        cmd.env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_CAPACITY_POD", jobs.to_string())
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0");
        let log = inner.dir.path().join("dispatch.log");
        let dispatcher = Dispatcher::spawn(cmd, "dispatch run", &config, &log).await;
        dispatcher.wait_leader(true).await;
        World { dispatcher, inner }
    }

    async fn stats(&self) -> (u64, u64) {
        let s = self.inner.gitea.admin(self.inner.http(), "stats").await;
        (
            s["fetch_task_calls"].as_u64().unwrap(),
            s["fetch_task_calls_with_tasks"].as_u64().unwrap(),
        )
    }

    async fn pods(&self) -> usize {
        Api::<Pod>::namespaced(self.inner.kube.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    }

    /// `jobs` jobs released at once, until their Pods exist. Executors are not run: each
    /// round's Pods stay, so round `i` starts from `base` Pods and capacity covers them all.
    async fn round(&self, i: usize, jobs: usize, base: usize) -> Round {
        let (gitea, http) = (&self.inner.gitea, self.inner.http());
        gitea.admin_post(http, "hold", json!({"hold": true})).await;
        for j in 0..jobs {
            gitea
                .enqueue(
                    http,
                    &format!("burst-{i}-{j}"),
                    &["self-hosted", "pod"],
                    "s",
                )
                .await;
        }
        let (calls0, claiming0) = self.stats().await;
        let start = Instant::now();
        gitea.admin_post(http, "hold", json!({"hold": false})).await;
        until("every executor Pod", || async {
            (self.pods().await >= base + jobs).then_some(())
        })
        .await;
        let last_created_ms = start.elapsed().as_secs_f64() * 1000.0;
        let (calls1, claiming1) = self.stats().await;
        Round {
            calls: calls1 - calls0,
            claiming: claiming1 - claiming0,
            last_created_ms,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_forgejo TENANTCI_BIN [JOBS] [ROUNDS]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (jobs, rounds) = (arg(2, 50), arg(3, 3));
    let mut rows = Vec::new();
    for forge in ["gitea", "forgejo"] {
        progress(&format!("{forge}: {rounds} rounds of {jobs} jobs"));
        // Capacity for every round's jobs: executors are not run, so their slots stay taken.
        let mut w = World::start(&bin, forge, jobs * rounds).await;
        let mut results = Vec::new();
        for i in 0..rounds {
            let r = w.round(i, jobs, i * jobs).await;
            progress(&format!(
                "{forge} round {i}: {} calls ({} claiming), last executor after {:.0} ms",
                r.calls, r.claiming, r.last_created_ms
            ));
            results.push(r);
        }
        let _ = w.dispatcher.terminate_within(Duration::from_secs(30));
        rows.push((forge, results));
    }
    println!(
        "{jobs} jobs released at once, {rounds} rounds per forge, capacity {}; medians over the rounds.\n",
        jobs * rounds
    );
    println!(
        "| forge | FetchTask calls | of which claimed tasks | tasks per claiming call | release -> last executor Pod created |"
    );
    println!("|---|---|---|---|---|");
    for (forge, results) in &rows {
        let calls = median(results.iter().map(|r| r.calls as f64).collect());
        let claiming = median(results.iter().map(|r| r.claiming as f64).collect());
        let ms = median(results.iter().map(|r| r.last_created_ms).collect());
        println!(
            "| {forge} | {calls:.0} | {claiming:.0} | {:.1} | {ms:.0} ms |",
            jobs as f64 / claiming.max(1.0)
        );
    }
}
