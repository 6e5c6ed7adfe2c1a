//! Pickup benchmark (issue 16): job created -> claimed, and FetchTask calls per idle second,
//! for three ways of running `tenantci dispatch run`, side by side in one run on one
//! `tenantci sim --gitea` and one nats-server:
//!
//! - **act_runner-style** (the baseline): `gitea.fetch_interval` = `_idle` = 2s, no webhook.
//! - **poll-only defaults**: 200ms while tasks came in the last 5 minutes, then 2s.
//! - **webhook**: the Gitea double delivers signed `workflow_job` webhooks to the receiver,
//!   with the default 5s safety-net poll.
//!
//! Per mode: a fresh dispatcher (capacity 1), then JOBS jobs created one at a time after idle
//! pauses of 1-3 s (uniformly random, so a poll timer cannot phase-lock with them); each is
//! run to completion through the facade before the next pause. Latency is the double's own
//! clock: the job's `created_at` (enqueue) to its task's `started_at` (the FetchTask that
//! claimed it), microseconds. Then an idle window of IDLE seconds: FetchTask calls the double
//! answered, divided by the window. Prints Markdown on stdout, progress on stderr;
//! `scripts/bench-pickup.sh` writes it into docs/benchmarks/pickup.md.
//!
//! Usage: bench_pickup TENANTCI_BIN [JOBS=20] [IDLE=10]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::Value;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::world::{Dispatcher, EXECUTOR_IMAGE as IMAGE, NAMESPACE, Options, World};

const SECRET: &str = "bench-webhook-secret";
/// A deadlock guard per wait, not a measurement.
const DEADLINE: Duration = Duration::from_secs(60);

fn progress(msg: &str) {
    eprintln!("bench_pickup: {msg}");
}

/// The testkit's dispatcher world ([`tenantci_testkit::world`]) and the config the next
/// mode's dispatcher runs.
struct Bench {
    w: World,
    config: PathBuf,
}

struct Mode {
    name: &'static str,
    env: Vec<(&'static str, String)>,
    webhook: bool,
}

struct Result {
    name: &'static str,
    pickups_ms: Vec<f64>,
    idle_per_s: f64,
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
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Bench {
    async fn admin(&self, path: &str) -> Value {
        self.w.gitea.admin(self.w.http(), path).await
    }

    /// A dispatcher child with `mode`'s environment, once it leads.
    async fn dispatcher(&self, mode: &Mode) -> Dispatcher {
        let mut cmd = self.w.command();
        cmd.env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_CAPACITY_POD", "1")
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0");
        for (k, v) in &mode.env {
            cmd.env(k, v);
        }
        let log = self.w.dir.path().join(format!("{}.log", mode.name));
        let d = Dispatcher::spawn(cmd, "dispatch run", &self.config, &log).await;
        d.wait_leader(true).await;
        d
    }

    /// Enqueues one job, waits for its claim, runs it through the facade; the pickup in ms.
    async fn one(&self, i: usize) -> f64 {
        let job = self
            .w
            .gitea
            .enqueue(
                self.w.http(),
                &format!("pickup-{i}"),
                &["self-hosted", "pod"],
                "s",
            )
            .await;
        let task = until("the claim", || async {
            self.admin(&format!("jobs/{job}")).await["task_id"].as_i64()
        })
        .await;
        let (j, t) = (
            self.admin(&format!("jobs/{job}")).await,
            self.admin(&format!("tasks/{task}")).await,
        );
        let at = |v: &Value| {
            chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
                .unwrap()
                .timestamp_micros()
        };
        let pickup = (at(&t["started_at"]) - at(&j["created_at"])) as f64 / 1000.0;
        let secrets = Api::<Secret>::namespaced(self.w.kube.clone(), NAMESPACE);
        let name = format!("gitea-task-{task}");
        let secret = until("the executor Secret", || async {
            secrets.get_opt(&name).await.ok()?
        })
        .await;
        let pods =
            Api::<k8s_openapi::api::core::v1::Pod>::namespaced(self.w.kube.clone(), NAMESPACE);
        let pod = until("the executor Pod", || async {
            pods.get_opt(&name).await.ok()?
        })
        .await;
        Executor::from_objects(&secret, &pod).run(task).await;
        until("the executor to be deleted", || async {
            secrets.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
        pickup
    }

    async fn run(&self, mode: &Mode, jobs: usize, idle: Duration) -> Result {
        progress(&format!("{}: {jobs} jobs after idle pauses", mode.name));
        let mut d = self.dispatcher(mode).await;
        if mode.webhook {
            let addr = d.webhook.expect("a webhook receiver");
            let url = format!("http://{addr}/webhooks/gitea");
            self.w.gitea.add_hook(self.w.http(), &url, SECRET).await;
        }
        let mut pickups_ms = Vec::new();
        for i in 0..jobs {
            tokio::time::sleep(Duration::from_millis(rand::random_range(1000..3000))).await;
            pickups_ms.push(self.one(i).await);
        }
        progress(&format!("{}: {}s idle", mode.name, idle.as_secs()));
        let before = self.w.fetch_calls().await;
        tokio::time::sleep(idle).await;
        let idle_per_s = (self.w.fetch_calls().await - before) as f64 / idle.as_secs_f64();
        assert_eq!(
            d.terminate_within(Duration::from_secs(30)),
            Some(0),
            "drains"
        );
        Result {
            name: mode.name,
            pickups_ms,
            idle_per_s,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn print(results: &[Result], jobs: usize, idle: Duration) {
    let base = &results[0];
    let p50 = |r: &Result| {
        let mut s = r.pickups_ms.clone();
        s.sort_by(f64::total_cmp);
        (percentile(&s, 0.5), percentile(&s, 0.95))
    };
    let (b50, _) = p50(base);
    println!(
        "{jobs} jobs per mode, created one at a time after 1-3 s idle pauses; idle window {} s; capacity 1.\n",
        idle.as_secs()
    );
    println!("| mode | created -> claimed p50 | p95 | p50 vs baseline | FetchTask/s idle |");
    println!("|---|---|---|---|---|");
    for r in results {
        let (a, b) = p50(r);
        println!(
            "| {} | {a:.1} ms | {b:.1} ms | {:.3}x | {:.2} |",
            r.name,
            a / b50,
            r.idle_per_s
        );
    }
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_pickup TENANTCI_BIN [JOBS] [IDLE]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (jobs, idle) = (arg(2, 20), Duration::from_secs(arg(3, 10) as u64));
    let (mut b, dir) = start(bin).await;
    let polling_config = write_polling_config(&b.config, &dir);
    let results = run_modes(&mut b, polling_config, &dir, jobs, idle).await;
    print(&results, jobs, idle);
}

/// Setup step: the world, the webhook secret and the config `init` wrote.
async fn start(bin: PathBuf) -> (Bench, PathBuf) {
    let mut w = Options::new(bin)
        .dir(tempfile::tempdir().unwrap())
        .sim_log()
        .nats_in_dir()
        .start()
        .await;
    let dir = w.dir.path().to_path_buf();
    let secret = dir.join("webhook.secret");
    tenantci_core::fsutil::write_new_atomic(&secret, format!("{SECRET}\n").as_bytes(), 0o600)
        .unwrap();
    let flags: Vec<std::ffi::OsString> = vec![
        "--executor-image".into(),
        IMAGE.into(),
        "--proxy-image".into(),
        IMAGE.into(),
        "--webhook-listen".into(),
        "127.0.0.1:0".into(),
        "--webhook-secret-file".into(),
        secret.into(),
    ];
    let config = w.init(&flags);
    (Bench { w, config }, dir)
}

/// Setup step: a copy of `config` without its `[webhook]` section; the copy's path.
fn write_polling_config(config: &Path, dir: &Path) -> PathBuf {
    // The config `init` wrote has the webhook; the polling modes switch it off by pointing
    // its interval keys at polling and dropping the receiver (an override cannot remove a
    // section, so they use a copy of the config without it).
    let polling_config = dir.join("dispatch").join("polling.toml");
    let text = std::fs::read_to_string(config).unwrap();
    let cut = text
        .find("[webhook]")
        .expect("init wrote a webhook section");
    let rest = &text[cut..];
    let end = rest[1..]
        .find("\n[")
        .map(|i| cut + i + 2)
        .unwrap_or(text.len());
    std::fs::write(&polling_config, format!("{}{}", &text[..cut], &text[end..])).unwrap();
    polling_config
}

/// Measuring step: the three modes, one after the other, in the table's order.
async fn run_modes(
    b: &mut Bench,
    polling_config: PathBuf,
    dir: &Path,
    jobs: usize,
    idle: Duration,
) -> Vec<Result> {
    let polling = |name, interval: &str| Mode {
        name,
        env: vec![
            (
                "TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL",
                interval.to_string(),
            ),
            ("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL_IDLE", "2s".into()),
        ],
        webhook: false,
    };
    let mut results = Vec::new();
    b.config = polling_config;
    results.push(
        b.run(
            &polling("act_runner-style 2 s poll (baseline)", "2s"),
            jobs,
            idle,
        )
        .await,
    );
    results.push(
        b.run(
            &polling("poll-only defaults (200 ms, 2 s after 5 min idle)", "200ms"),
            jobs,
            idle,
        )
        .await,
    );
    b.config = dir.join("dispatch").join("config.toml");
    results.push(
        b.run(
            &Mode {
                name: "webhook + 5 s safety-net poll",
                env: vec![],
                webhook: true,
            },
            jobs,
            idle,
        )
        .await,
    );
    results
}
