//! Dispatch benchmark: claim -> executor Pod created through `tenantci dispatch run` (FetchTask,
//! JetStream, pod worker) against the raw path (FetchTask + Secret + Pod create in this process,
//! no queue), in one run on one `tenantci sim --gitea` and one nats-server; and the dispatcher's
//! RSS idle and with 1000 claimed assignments. Prints Markdown on stdout, progress on stderr.
//! `scripts/bench-dispatch.sh` builds it and writes docs/benchmarks/dispatch.md.
//!
//! Latency, both paths, per task: from the Gitea double's claim (the task's `started_at`, taken
//! under the double's lock when FetchTask picks the job) to the return of the Pod create
//! (dispatcher: its `executor started` JSON log line, written right after Secret and Pod
//! creates returned; raw: this process's clock after the Pod create). All on one host, one wall
//! clock, microsecond resolution. The dispatcher's `claimed and queued` line (after the PubAck)
//! splits its latency into scheduler and queue + worker parts.
//!
//! Usage: bench_dispatch TENANTCI_BIN [TASKS=500] [HELD=1000] [SEQUENTIAL=100]
//! (BENCH_KEEP=1 keeps the temporary directory with every log.)

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use prost::Message as _;
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient, TasksVersion};
use tenantci_core::forge::gitea::proto::RegisterRequest;
use tenantci_dispatch::backend::pod;
use tenantci_dispatch::backend::pod::manifest::{self, COMPONENT_SELECTOR};
use tenantci_dispatch::capability;
use tenantci_dispatch::claim::routing;
use tenantci_dispatch::config::{Config, files};
use tenantci_dispatch::queue::assignment::{Assignment, SealingKey};
use tenantci_dispatch::task::spec::ExecutorSpec;
use tenantci_dispatch::task_id::TaskId;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::procfs::{cpu_time, memory};
use tenantci_testkit::world::{self, EXECUTOR_IMAGE as IMAGE, NAMESPACE, Options, World};

mod logtail;
mod report;

use logtail::LogTail;
use report::{Cpu, Idle, Memory, PathResult, dispatch_result, millis_between, parse_time, stats};

/// A deadlock guard per phase, not a measurement.
const DEADLINE: Duration = Duration::from_secs(120);
/// The raw path's runner has this extra label and its jobs ask for it, so the dispatcher's
/// registration (self-hosted, pod) can never claim them.
const RAW_LABEL: &str = "bench-raw";

fn progress(msg: &str) {
    eprintln!("bench_dispatch: {msg}");
}

/// One `tenantci dispatch run` child with a JSON log.
struct Dispatcher {
    proc: world::Dispatcher,
    tail: LogTail,
    capacity: u32,
}

/// The testkit's dispatcher world ([`tenantci_testkit::world`]) and the config `dispatch
/// init` wrote, which every dispatcher runs with its own overrides.
struct Bench {
    w: World,
    config: PathBuf,
    runs: usize,
    /// Jobs enqueued so far (names only).
    jobs: usize,
}

impl Bench {
    /// Starts a dispatcher with pod capacity `capacity` and waits until it leads.
    async fn dispatcher(&mut self, name: &str, capacity: u32, env: &[(&str, &str)]) -> Dispatcher {
        self.runs += 1;
        let log = self
            .w
            .dir
            .path()
            .join(format!("dispatcher-{}-{name}.log", self.runs));
        let mut cmd = self.w.command();
        cmd.args(["--log-format", "json"])
            .env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_CAPACITY_POD", capacity.to_string())
            // Any free port: the benchmark reads no status API.
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0")
            .env("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL", "50ms")
            // Longer than a phase: no keep-alive UpdateTask calls inside the latency windows.
            .env("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5m");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = world::Dispatcher::spawn(cmd, name, &self.config, &log).await;
        let mut d = Dispatcher {
            proc,
            tail: LogTail::open(&log),
            capacity,
        };
        d.tail
            .until("the scheduler lease", |t| t.leading, || {})
            .await;
        d
    }

    fn cpu(&self, d: &Dispatcher) -> Cpu {
        Cpu {
            dispatcher: cpu_time(d.proc.pid()),
            nats: cpu_time(self.w.nats.pid()),
        }
    }

    fn cpu_since(&self, d: &Dispatcher, before: &Cpu) -> Cpu {
        let now = self.cpu(d);
        Cpu {
            dispatcher: now.dispatcher - before.dispatcher,
            nats: now.nats - before.nats,
        }
    }

    /// SIGTERM (the dispatcher must drain and exit 0), then delete every executor.
    async fn stop(&self, name: &str, mut d: Dispatcher) -> LogTail {
        let code = d.proc.terminate_within(Duration::from_secs(30));
        assert_eq!(code, Some(0), "{name}: the dispatcher drains and exits 0");
        d.tail.poll();
        if !d.tail.errors.is_empty() {
            progress(&format!(
                "{name}: {} warnings/errors in the dispatcher log, first: {}",
                d.tail.errors.len(),
                d.tail.errors[0]
            ));
        }
        self.clear_executors().await;
        d.tail
    }

    async fn enqueue(&mut self, runs_on: &[&str]) {
        self.jobs += 1;
        let name = format!("bench-{}", self.jobs);
        let secret = format!("bench-secret-{}-{}", self.jobs, "x".repeat(32));
        let http = self.w.http();
        self.w.gitea.enqueue(http, &name, runs_on, &secret).await;
    }

    /// Plays the official runner of `task` from its Secret's files (Declare, FetchTask,
    /// UpdateLog, UpdateTask SUCCESS through the facade), then waits until the dispatcher
    /// deleted the executor, which frees its slot.
    async fn execute(&self, task: i64) {
        let name = manifest::object_name(TaskId::new(task));
        let secret = Api::<Secret>::namespaced(self.w.kube.clone(), NAMESPACE)
            .get(&name)
            .await
            .unwrap();
        let pods = Api::<Pod>::namespaced(self.w.kube.clone(), NAMESPACE);
        let pod = pods.get(&name).await.unwrap();
        Executor::from_objects(&secret, &pod).run(task).await;
        let until = Instant::now() + DEADLINE;
        while pods.get_opt(&name).await.unwrap().is_some() {
            assert!(
                Instant::now() < until,
                "the executor of {task} was not deleted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The double's claim time of each task.
    async fn claimed_at(&self, tasks: impl Iterator<Item = i64>) -> BTreeMap<i64, DateTime<Utc>> {
        let mut out = BTreeMap::new();
        for t in tasks {
            let v = self.w.task(t).await;
            out.insert(t, parse_time(v["started_at"].as_str().unwrap()));
        }
        out
    }

    /// Cancels every executor's task at the Gitea double, then deletes every executor Pod and
    /// Secret (tenant-admin), so each phase starts empty. Cancelled first: the next
    /// dispatcher's recovery finds the claim ledger's entries without objects and would start
    /// tasks Gitea still has open again (as it must after a real loss), inside the next
    /// phase's window.
    async fn clear_executors(&self) {
        let lp = ListParams::default().labels(COMPONENT_SELECTOR);
        let dp = DeleteParams::default();
        let pods = Api::<Pod>::namespaced(self.w.kube.clone(), NAMESPACE)
            .list(&lp)
            .await
            .unwrap();
        for pod in pods {
            let task = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(tenantci_dispatch::task::spec::TASK_ID_LABEL))
                .cloned()
                .unwrap_or_default();
            let resp = self
                .w
                .http()
                .post(format!("{}/tasks/{task}/cancel", self.w.gitea.admin_url))
                .send()
                .await
                .unwrap();
            assert!(
                resp.status().is_success(),
                "cancel task {task}: {}",
                resp.status()
            );
        }
        Api::<Pod>::namespaced(self.w.kube.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
        Api::<Secret>::namespaced(self.w.kube.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
    }
}

async fn idle(b: &Bench, d: &Dispatcher, window: Duration) -> Idle {
    let before = b.cpu(d);
    tokio::time::sleep(window).await;
    Idle {
        capacity: d.capacity,
        mem: memory(d.proc.pid()),
        cpu: b.cpu_since(d, &before),
        window,
    }
}

/// `n` tasks one at a time: each job is enqueued once the previous task ran to completion
/// through the facade and its executor was deleted, so no task waits behind another.
async fn sequential(b: &mut Bench, d: &mut Dispatcher, n: usize) -> PathResult {
    progress(&format!("{n} tasks one at a time, capacity {}", d.capacity));
    let before = b.cpu(d);
    let seen = d.tail.started.len();
    for i in 0..n {
        b.enqueue(&["self-hosted", "pod"]).await;
        d.tail
            .until("the executor", |t| t.started.len() > seen + i, || {})
            .await;
        let task = *d.tail.started.keys().next_back().unwrap();
        b.execute(task).await;
    }
    let cpu = b.cpu_since(d, &before);
    let claimed = b.claimed_at(d.tail.started.keys().copied()).await;
    dispatch_result(&claimed, &d.tail.queued, &d.tail.started, cpu)
}

/// The raw path, `n` jobs queued first; one loop: FetchTask, seal, Secret + Pod create.
async fn raw(b: &mut Bench, n: usize) -> PathResult {
    progress(&format!("raw path, {n} tasks"));
    let cfg = Config::load(&b.config).unwrap();
    let gitea = raw_runner(b).await;
    for _ in 0..n {
        b.enqueue(&["self-hosted", "pod", RAW_LABEL]).await;
    }
    let RawTarget {
        secrets,
        pods,
        capability_key,
        sealing_key,
        ca_pem,
    } = raw_target(b, &cfg).await;
    let pp = PostParams::default();
    let mut version = TasksVersion::default();
    let mut done: Vec<(i64, DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let until = Instant::now() + DEADLINE;
    while done.len() < n {
        assert!(Instant::now() < until, "the raw path timed out");
        let Some(task) = gitea.poll(&mut version).await.unwrap() else {
            continue;
        };
        let fetched: DateTime<Utc> = SystemTime::now().into();
        let labels = routing::runs_on(task.workflow_payload.as_deref().unwrap_or_default());
        let sealed = Assignment::seal(
            &sealing_key,
            &task.id.to_string(),
            1,
            pod::KIND,
            labels.clone(),
            &task.encode_to_vec(),
        )
        .unwrap();
        let spec = ExecutorSpec {
            namespace: NAMESPACE.into(),
            task_id: TaskId::new(task.id),
            attempt: 1,
            assignment_id: capability::assignment_id(TaskId::new(task.id), 1),
            capability: capability_key.token(TaskId::new(task.id), 1),
            facade_url: cfg.facade.url.clone(),
            facade_ca_pem: ca_pem.clone(),
            gitea: tenantci_dispatch::task::spec::GiteaForExecutors {
                url: "http://127.0.0.1:3000".into(),
                ca_pem: None,
            },
            labels,
            runner_name: cfg.gitea.runner_name.clone(),
            executor: cfg.executor.clone(),
            identity: None,
            class: None,
            cache_grant: None,
        };
        secrets
            .create(&pp, &manifest::desired_secret(&spec, &sealed.to_json()))
            .await
            .unwrap();
        pods.create(&pp, &manifest::desired_pod(&spec))
            .await
            .unwrap();
        done.push((task.id, fetched, SystemTime::now().into()));
    }
    raw_result(b, &done, n).await
}

/// Raw path setup step: registers the raw runner; a Gitea client with its credentials.
async fn raw_runner(b: &Bench) -> RunnerClient {
    let runner = RunnerClient::new(ClientConfig::new(&b.w.gitea.url))
        .unwrap()
        .register(&RegisterRequest {
            name: "bench-raw".into(),
            token: b.w.gitea.registration_token.clone(),
            labels: vec!["self-hosted".into(), "pod".into(), RAW_LABEL.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    RunnerClient::new(ClientConfig::new(&b.w.gitea.url))
        .unwrap()
        .with_credentials(Credentials::from_runner(&runner))
}

/// What the raw path creates objects with and seals assignments with.
struct RawTarget {
    secrets: Api<Secret>,
    pods: Api<Pod>,
    capability_key: capability::CapabilityKey,
    sealing_key: SealingKey,
    ca_pem: String,
}

/// Raw path setup step: the dispatcher's own credential and files.
async fn raw_target(b: &Bench, cfg: &Config) -> RawTarget {
    // The dispatcher's own credential and files: the same RBAC path, the same objects.
    let kube = tenantci_core::kube_client::from_kubeconfig(
        &b.w.dir.path().join("dispatch").join(files::KUBECONFIG),
    )
    .await
    .unwrap();
    let secrets = Api::<Secret>::namespaced(kube.clone(), NAMESPACE);
    let pods = Api::<Pod>::namespaced(kube, NAMESPACE);
    let capability_key = capability::load_key(&cfg.facade.capability_key_file).unwrap();
    let sealing_key = SealingKey::load_or_create(&cfg.nats.sealing_key_file).unwrap();
    let ca_pem = std::fs::read_to_string(&cfg.facade.ca_cert_file).unwrap();
    RawTarget {
        secrets,
        pods,
        capability_key,
        sealing_key,
        ca_pem,
    }
}

/// Raw path result step: latencies from the claim times, then the executors cleared.
async fn raw_result(
    b: &mut Bench,
    done: &[(i64, DateTime<Utc>, DateTime<Utc>)],
    n: usize,
) -> PathResult {
    let claimed = b.claimed_at(done.iter().map(|d| d.0)).await;
    let (mut total, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for (t, fetched, created) in done {
        let c = claimed[t];
        total.push(millis_between(c, *created));
        first.push(millis_between(c, *fetched));
        second.push(millis_between(*fetched, *created));
    }
    let window = millis_between(*claimed.values().min().unwrap(), done.last().unwrap().2);
    b.clear_executors().await;
    PathResult {
        tasks: n,
        per_sec: n as f64 / (window / 1000.0),
        total: stats(total),
        first: stats(first),
        second: stats(second),
        max_backlog: 0,
        cpu: Cpu {
            dispatcher: Duration::ZERO,
            nats: Duration::ZERO,
        },
    }
}

/// `n` jobs queued at Gitea first, then a dispatcher with `capacity` claims them all. Returns
/// the result, the memory when every executor exists (max over `settle`) and the peak RSS.
async fn burst(
    b: &mut Bench,
    name: &str,
    n: usize,
    capacity: u32,
    settle: Duration,
    env: &[(&str, &str)],
) -> (PathResult, Memory, u64) {
    progress(&format!(
        "{name}: {n} tasks queued at Gitea, then a dispatcher with capacity {capacity}"
    ));
    for _ in 0..n {
        b.enqueue(&["self-hosted", "pod"]).await;
    }
    let mut d = b.dispatcher(name, capacity, env).await;
    let pid = d.proc.pid();
    let before = b.cpu(&d);
    d.tail
        .until("every executor", |t| t.started.len() >= n, || {})
        .await;
    let cpu = b.cpu_since(&d, &before);
    let mut held = Memory::default();
    let until = Instant::now() + settle;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let m = memory(pid);
        if m.rss > held.rss {
            held = m;
        }
    }
    let peak = memory(pid).hwm;
    let tail = b.stop(name, d).await;
    let claimed = b.claimed_at(tail.started.keys().copied()).await;
    (
        dispatch_result(&claimed, &tail.queued, &tail.started, cpu),
        held,
        peak,
    )
}

/// The testkit's world with `bin` (which must have the `sim` feature): one `tenantci sim
/// --gitea`, one nats-server and `dispatch init`, in a directory under /var/tmp.
async fn setup(bin: PathBuf) -> Bench {
    let tmp = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    // The simulator does only API work, the same for both paths.
    let mut w = Options::new(bin)
        .dir(tmp)
        .sim_log()
        .nats_in_dir()
        .api_only()
        .start()
        .await;
    // One dispatcher runs at a time, so the facade's free port is advertised as bound.
    let config = w.init(&["--executor-image", IMAGE, "--proxy-image", IMAGE]);
    Bench {
        w,
        config,
        runs: 0,
        jobs: 0,
    }
}

/// `--idle SIM_BIN NAME=BIN...`: the idle dispatcher (capacity 4, 6 s once it leads) of each
/// binary on the same simulator, queue and config: what a build profile or feature set costs
/// (scripts/bench-release.sh). Prints one Markdown row per binary.
async fn idle_only(args: &[String]) {
    let sim_bin = PathBuf::from(
        args.first()
            .expect("usage: bench_dispatch --idle SIM_BIN NAME=BIN..."),
    );
    let mut b = setup(sim_bin).await;
    println!("| build | binary | idle RSS | anonymous | file-backed | CPU |");
    println!("|---|---:|---:|---:|---:|---:|");
    for spec in &args[1..] {
        let (name, bin) = spec.split_once('=').expect("NAME=BIN");
        b.w.bin = PathBuf::from(bin);
        let size = std::fs::metadata(bin).unwrap().len();
        let d = b.dispatcher(name, 4, &[]).await;
        let i = idle(&b, &d, Duration::from_secs(6)).await;
        b.stop(name, d).await;
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        println!(
            "| {name} | {:.1} MiB | {} | {} | {} | {:.1}% |",
            size as f64 / (1024.0 * 1024.0),
            mib(i.mem.rss),
            mib(i.mem.anon),
            mib(i.mem.file),
            100.0 * i.cpu.dispatcher.as_secs_f64() / i.window.as_secs_f64()
        );
    }
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--idle") {
        return idle_only(&args[2..]).await;
    }
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_dispatch TENANTCI_BIN [TASKS] [HELD] [SEQUENTIAL]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, held_n, seq_n) = (arg(2, 500), arg(3, 1000), arg(4, 100));
    let mut b = setup(bin).await;
    // Capacities: the default, the largest below the consumer's max_waiting (512 pull requests
    // by default), and the high capacity.
    let (low, mid, high) = (4u32, n.min(512) as u32, held_n.max(n) as u32);
    let window = Duration::from_secs(6);

    progress("idle dispatchers");
    let mut idles = Vec::new();
    let mut d = b.dispatcher("default", low, &[]).await;
    idles.push(idle(&b, &d, window).await);
    let seq = sequential(&mut b, &mut d, seq_n).await;
    b.stop("default", d).await;
    let mut d = b.dispatcher("high", high, &[]).await;
    idles.push(idle(&b, &d, window).await);
    let seq_high = sequential(&mut b, &mut d, seq_n).await;
    b.stop("high", d).await;
    if mid != low && mid != high {
        let d = b.dispatcher("mid", mid, &[]).await;
        idles.push(idle(&b, &d, window).await);
        b.stop("mid", d).await;
    }
    let raw = raw(&mut b, n).await;
    let (disp, with_n, _) = burst(&mut b, "burst", n, mid, Duration::from_secs(3), &[]).await;
    let (disp_high, _, _) = burst(&mut b, "burst-high", n, high, Duration::ZERO, &[]).await;
    // Keep-alive every 5 s here: the held window includes it over every unfetched task.
    let (held, held_mem, held_peak) = burst(
        &mut b,
        "held",
        held_n,
        high,
        Duration::from_secs(8),
        &[("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5s")],
    )
    .await;
    let sim_rss = memory(b.w.sim().pid()).rss;

    report::print(report::Report {
        n,
        held_n,
        low,
        mid,
        high,
        raw,
        disp,
        seq,
        disp_high,
        seq_high,
        held,
        idles,
        with_n,
        held_mem,
        held_peak,
        sim_rss,
    });
    if std::env::var_os("BENCH_KEEP").is_some() {
        progress(&format!("kept {} (logs)", b.w.keep_dir().display()));
    }
}
