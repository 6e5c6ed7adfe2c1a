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
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use prost::Message as _;
use serde_json::{Value, json};
use tenantci::dispatch::capability;
use tenantci::dispatch::config::{Config, files};
use tenantci::dispatch::executor::{self, COMPONENT_SELECTOR, ExecutorSpec};
use tenantci::dispatch::routing;
use tenantci::forge::gitea::client::{ClientConfig, Credentials, RunnerClient, TasksVersion};
use tenantci::forge::gitea::proto::{
    DeclareRequest, LogRow, RegisterRequest, TaskResult, TaskState, UpdateLogRequest,
    UpdateTaskRequest,
};
use tenantci::queue::Backend;
use tenantci::queue::assignment::{Assignment, SealingKey};
use tenantci::queue::permissions;

const NAMESPACE: &str = "dynamic-runner";
const IMAGE: &str =
    "gitea/act_runner@sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// A deadlock guard per phase, not a measurement.
const DEADLINE: Duration = Duration::from_secs(120);
/// The raw path's runner has this extra label and its jobs ask for it, so the dispatcher's
/// registration (self-hosted, pod) can never claim them.
const RAW_LABEL: &str = "bench-raw";

fn progress(msg: &str) {
    eprintln!("bench_dispatch: {msg}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (and reaped) when dropped, so a panic leaves nothing behind.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    /// SIGTERM, then wait up to `grace` before SIGKILL; the exit code.
    fn terminate(&mut self, grace: Duration) -> Option<i32> {
        let mut c = self.0.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let until = Instant::now() + grace;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.code();
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A process's memory from /proc/<pid>/status, in KiB.
#[derive(Clone, Copy, Default)]
struct Memory {
    rss: u64,
    hwm: u64,
    /// Heap, stacks: what the process allocated.
    anon: u64,
    /// Mapped files, mostly the binary's own code pages (shared with every other process
    /// running the same binary).
    file: u64,
}

fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// User + system CPU time of a process.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3; utime is 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // USER_HZ is 100 on every Linux architecture.
    Duration::from_secs_f64(f.iter().sum::<u64>() as f64 / 100.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn ms(d: f64) -> String {
    format!("{d:.2}")
}

fn parse_time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("timestamp {s:?}: {e}"))
        .with_timezone(&Utc)
}

fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap() as f64 / 1000.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[derive(Clone, Copy)]
struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
}

fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(f64::total_cmp);
    Stats {
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
        max: *v.last().unwrap(),
    }
}

/// `tenantci sim --gitea` as a child; Pods stay Pending (`--max-nodes 0`), so the simulator
/// does only API work, the same for both paths.
struct Sim {
    proc: Proc,
    gitea_url: String,
    admin_url: String,
    registration_token: String,
    tenant_admin: PathBuf,
}

impl Sim {
    fn start(bin: &Path, dir: &Path) -> Sim {
        let state = dir.join("state");
        let mut child = Command::new(bin)
            .args(["sim", "--cluster", "ci", "--gitea", "--max-nodes", "0"])
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("sim.log")).unwrap())
            .spawn()
            .expect("spawn tenantci sim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let proc = Proc(Some(child));
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the simulator's ready line {line:?}: {e}"));
        let gitea: Value =
            serde_json::from_slice(&std::fs::read(state.join("gitea.json")).unwrap()).unwrap();
        Sim {
            proc,
            gitea_url: gitea["url"].as_str().unwrap().into(),
            admin_url: gitea["adminUrl"].as_str().unwrap().into(),
            registration_token: gitea["registrationToken"].as_str().unwrap().into(),
            tenant_admin: ready["clusters"][0]["tenantAdminKubeconfig"]
                .as_str()
                .unwrap()
                .into(),
        }
    }
}

/// nats-server on a free loopback port with the generated users and JetStream under `dir`.
struct Nats {
    proc: Proc,
    url: String,
    secrets: PathBuf,
}

impl Nats {
    fn start(dir: &Path) -> Nats {
        let secrets = dir.join("nats-secrets");
        let auth = dir.join("nats-auth.conf");
        permissions::write_nats_config(&secrets, &auth).unwrap();
        let log = dir.join("nats.log");
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:-1\"\njetstream {{ store_dir: \"{}\" }}\nlog_file: \"{}\"\ninclude ./nats-auth.conf\n",
                dir.join("jetstream").display(),
                log.display()
            ),
        )
        .unwrap();
        let proc = Proc(Some(
            Command::new("nats-server")
                .arg("-c")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server on PATH (scripts/bench-dispatch.sh installs it)"),
        ));
        let until = Instant::now() + Duration::from_secs(20);
        let marker = "Listening for client connections on 127.0.0.1:";
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let (true, Some(i)) = (text.contains("Server is ready"), text.find(marker)) {
                let digits: String = text[i + marker.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                break digits;
            }
            assert!(Instant::now() < until, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Nats {
            proc,
            url: format!("nats://127.0.0.1:{port}"),
            secrets,
        }
    }
}

impl Nats {
    fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// The dispatcher's JSON log, read as it grows.
struct LogTail {
    file: std::fs::File,
    partial: String,
    /// task id -> time of `claimed and queued` / `executor started`.
    queued: BTreeMap<i64, DateTime<Utc>>,
    started: BTreeMap<i64, DateTime<Utc>>,
    leading: bool,
    errors: Vec<String>,
}

impl LogTail {
    fn open(path: &Path) -> LogTail {
        LogTail {
            file: std::fs::File::open(path).unwrap(),
            partial: String::new(),
            queued: BTreeMap::new(),
            started: BTreeMap::new(),
            leading: false,
            errors: Vec::new(),
        }
    }

    fn poll(&mut self) {
        let mut buf = String::new();
        self.file.read_to_string(&mut buf).unwrap();
        self.partial.push_str(&buf);
        let Some(end) = self.partial.rfind('\n') else {
            return;
        };
        let complete: String = self.partial.drain(..=end).collect();
        for line in complete.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = || parse_time(v["timestamp"].as_str().unwrap());
            let task = v["task"].as_i64();
            match (v["message"].as_str().unwrap_or(""), task) {
                ("claimed and queued", Some(t)) => {
                    self.queued.insert(t, at());
                }
                ("executor started", Some(t)) => {
                    self.started.insert(t, at());
                }
                (m, _) if m.starts_with("acquired the scheduler lease") => self.leading = true,
                _ => {}
            }
            if matches!(v["level"].as_str(), Some("ERROR" | "WARN")) {
                self.errors.push(line.to_string());
            }
        }
    }

    /// Reads until `done(self)`, calling `each` every 20 ms.
    async fn until(&mut self, what: &str, done: impl Fn(&Self) -> bool, mut each: impl FnMut()) {
        let until = Instant::now() + DEADLINE;
        loop {
            self.poll();
            each();
            if done(self) {
                return;
            }
            assert!(Instant::now() < until, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One `tenantci dispatch run` child with a JSON log.
struct Dispatcher {
    proc: Proc,
    tail: LogTail,
    capacity: u32,
}

/// Dispatcher and nats-server CPU time spent while `f` ran.
struct Cpu {
    dispatcher: Duration,
    nats: Duration,
}

struct Bench {
    bin: PathBuf,
    dir: PathBuf,
    sim: Sim,
    nats: Nats,
    config: PathBuf,
    admin: kube::Client,
    http: reqwest::Client,
    runs: usize,
    /// Jobs enqueued so far (names only).
    jobs: usize,
}

impl Bench {
    /// Starts a dispatcher with pod capacity `capacity` and waits until it leads.
    async fn dispatcher(&mut self, name: &str, capacity: u32, env: &[(&str, &str)]) -> Dispatcher {
        self.runs += 1;
        let log = self
            .dir
            .join(format!("dispatcher-{}-{name}.log", self.runs));
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--log-format", "json", "dispatch", "run", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_CAPACITY_POD", capacity.to_string())
            .env(
                "TENANTCI_DISPATCH_STATUS_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL", "50ms")
            // Longer than a phase: no keep-alive UpdateTask calls inside the latency windows.
            .env("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5m");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn tenantci dispatch run");
        let mut d = Dispatcher {
            proc: Proc(Some(child)),
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
            nats: cpu_time(self.nats.pid()),
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
        let code = d.proc.terminate(Duration::from_secs(30));
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
        let labels = runs_on.join(", ");
        let body = json!({
            "name": name,
            "runs_on": runs_on,
            "workflow_payload": format!("name: {name}\njobs:\n  build:\n    runs-on: [{labels}]\n    steps:\n      - run: make test\n"),
            "secrets": {"DEPLOY_KEY": format!("bench-secret-{}-{}", self.jobs, "x".repeat(32))},
        });
        let r = self
            .http
            .post(format!("{}/jobs", self.sim.admin_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "enqueue: {}", r.status());
    }

    /// Plays the official runner of `task` from its Secret's files (Declare, FetchTask,
    /// UpdateLog, UpdateTask SUCCESS through the facade), then waits until the dispatcher
    /// deleted the executor, which frees its slot.
    async fn execute(&self, task: i64) {
        let name = executor::object_name(task);
        let secret = Api::<Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .get(&name)
            .await
            .unwrap();
        let data = secret.data.unwrap();
        let runner: Value = serde_json::from_slice(&data[executor::RUNNER_KEY].0).unwrap();
        let mut cfg = ClientConfig::new(runner["address"].as_str().unwrap());
        cfg.ca_pem = Some(String::from_utf8(data[executor::CA_KEY].0.clone()).unwrap());
        let c = RunnerClient::new(cfg)
            .unwrap()
            .with_credentials(Credentials {
                uuid: runner["uuid"].as_str().unwrap().into(),
                token: runner["token"].as_str().unwrap().into(),
            });
        c.declare(&DeclareRequest {
            version: "bench".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        let fetched = c.fetch_task(0).await.unwrap().task.expect("the task");
        assert_eq!(fetched.id, task);
        c.update_log(&UpdateLogRequest {
            task_id: task,
            index: 0,
            rows: vec![LogRow {
                time: None,
                content: "ok".into(),
            }],
            no_more: true,
        })
        .await
        .unwrap();
        c.update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: task,
                result: TaskResult::Success as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
        let pods = Api::<Pod>::namespaced(self.admin.clone(), NAMESPACE);
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
            let v: Value = self
                .http
                .get(format!("{}/tasks/{t}", self.sim.admin_url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            out.insert(t, parse_time(v["started_at"].as_str().unwrap()));
        }
        out
    }

    /// Deletes every executor Pod and Secret (tenant-admin), so each phase starts empty.
    async fn clear_executors(&self) {
        let lp = ListParams::default().labels(COMPONENT_SELECTOR);
        let dp = DeleteParams::default();
        Api::<Pod>::namespaced(self.admin.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
        Api::<Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
    }
}

/// What one path measured.
struct PathResult {
    tasks: usize,
    per_sec: f64,
    total: Stats,
    /// Dispatcher: claim -> queued and queued -> Pod created. Raw: claim -> FetchTask
    /// returned and FetchTask returned -> Pod created.
    first: Stats,
    second: Stats,
    /// Dispatcher only: most tasks claimed but not yet started at one time.
    max_backlog: usize,
    cpu: Cpu,
}

/// Per-task latencies from the double's claim times and the dispatcher's log.
fn dispatch_result(claimed: &BTreeMap<i64, DateTime<Utc>>, tail: &LogTail, cpu: Cpu) -> PathResult {
    let (mut total, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for (t, c) in claimed {
        let (q, s) = (tail.queued[t], tail.started[t]);
        total.push(millis_between(*c, s));
        first.push(millis_between(*c, q));
        second.push(millis_between(q, s));
    }
    let start = claimed.values().min().unwrap();
    let end = tail.started.values().max().unwrap();
    let mut events: Vec<(DateTime<Utc>, i64)> = tail
        .queued
        .values()
        .map(|t| (*t, 1))
        .chain(tail.started.values().map(|t| (*t, -1)))
        .collect();
    events.sort();
    let (mut depth, mut max_backlog) = (0i64, 0i64);
    for (_, d) in events {
        depth += d;
        max_backlog = max_backlog.max(depth);
    }
    PathResult {
        tasks: claimed.len(),
        per_sec: claimed.len() as f64 / (millis_between(*start, *end) / 1000.0),
        total: stats(total),
        first: stats(first),
        second: stats(second),
        max_backlog: max_backlog as usize,
        cpu,
    }
}

/// An idle leader: its memory after `window`, and CPU over it (dispatcher, nats-server).
struct Idle {
    capacity: u32,
    mem: Memory,
    cpu: Cpu,
    window: Duration,
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
    dispatch_result(&claimed, &d.tail, cpu)
}

/// The raw path, `n` jobs queued first; one loop: FetchTask, seal, Secret + Pod create.
async fn raw(b: &mut Bench, n: usize) -> PathResult {
    progress(&format!("raw path, {n} tasks"));
    let cfg = Config::load(&b.config).unwrap();
    let runner = RunnerClient::new(ClientConfig::new(&b.sim.gitea_url))
        .unwrap()
        .register(&RegisterRequest {
            name: "bench-raw".into(),
            token: b.sim.registration_token.clone(),
            labels: vec!["self-hosted".into(), "pod".into(), RAW_LABEL.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let gitea = RunnerClient::new(ClientConfig::new(&b.sim.gitea_url))
        .unwrap()
        .with_credentials(Credentials::from_runner(&runner));
    for _ in 0..n {
        b.enqueue(&["self-hosted", "pod", RAW_LABEL]).await;
    }
    // The dispatcher's own credential and files: the same RBAC path, the same objects.
    let kube =
        tenantci::tenant::client::from_kubeconfig(&b.dir.join("dispatch").join(files::KUBECONFIG))
            .await
            .unwrap();
    let secrets = Api::<Secret>::namespaced(kube.clone(), NAMESPACE);
    let pods = Api::<Pod>::namespaced(kube, NAMESPACE);
    let capability_key = capability::load_key(&cfg.facade.capability_key_file).unwrap();
    let sealing_key = SealingKey::load_or_create(&cfg.nats.sealing_key_file).unwrap();
    let ca_pem = std::fs::read_to_string(&cfg.facade.ca_cert_file).unwrap();
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
            Backend::Pod,
            labels.clone(),
            &task.encode_to_vec(),
        )
        .unwrap();
        let spec = ExecutorSpec {
            namespace: NAMESPACE.into(),
            task_id: task.id,
            attempt: 1,
            assignment_id: capability::assignment_id(task.id, 1),
            capability: capability_key.token(task.id, 1),
            facade_url: cfg.facade.url.clone(),
            facade_ca_pem: ca_pem.clone(),
            labels,
            runner_name: cfg.gitea.runner_name.clone(),
            image: cfg.executor.image.clone(),
        };
        secrets
            .create(&pp, &executor::desired_secret(&spec, &sealed.to_json()))
            .await
            .unwrap();
        pods.create(&pp, &executor::desired_pod(&spec))
            .await
            .unwrap();
        done.push((task.id, fetched, SystemTime::now().into()));
    }
    let claimed = b.claimed_at(done.iter().map(|d| d.0)).await;
    let (mut total, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for (t, fetched, created) in &done {
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
    (dispatch_result(&claimed, &tail, cpu), held, peak)
}

fn row(path: &str, r: &PathResult) -> String {
    format!(
        "| {path} | {} | {:.0} | {} | {} | {} |",
        r.tasks,
        r.per_sec,
        ms(r.total.p50),
        ms(r.total.p99),
        ms(r.total.max)
    )
}

/// The difference to raw; the tasks/s ratio only where both ran flat out.
fn diff(path: &str, r: &PathResult, raw: &PathResult, ratio: bool) -> String {
    let ratio = if ratio {
        format!("{:.2}x", r.per_sec / raw.per_sec)
    } else {
        String::new()
    };
    format!(
        "| {path} | | {ratio} | {} | **{}** | |",
        ms(r.total.p50 - raw.total.p50),
        ms(r.total.p99 - raw.total.p99)
    )
}

fn split(path: &str, first: &str, r: &PathResult) -> String {
    format!(
        "| {path} | {first}: {} / {} | -> Pod created: {} / {} |",
        ms(r.first.p50),
        ms(r.first.p99),
        ms(r.second.p50),
        ms(r.second.p99)
    )
}

fn per_task(d: Duration, r: &PathResult) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0 / r.tasks as f64)
}

fn pct(d: Duration, window: Duration) -> String {
    format!("{:.0}%", d.as_secs_f64() * 100.0 / window.as_secs_f64())
}

#[tokio::main]
async fn main() {
    tenantci::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_dispatch TENANTCI_BIN [TASKS] [HELD] [SEQUENTIAL]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, held_n, seq_n) = (arg(2, 500), arg(3, 1000), arg(4, 100));
    let tmp = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let dir = tmp.path().to_path_buf();

    let sim = Sim::start(&bin, &dir);
    let nats = Nats::start(&dir);
    let admin = tenantci::tenant::client::from_kubeconfig(&sim.tenant_admin)
        .await
        .unwrap();
    let token = dir.join("registration-token");
    tenantci::fsutil::write_new_atomic(&token, sim.registration_token.as_bytes(), 0o600).unwrap();
    let config = dir.join("dispatch").join("config.toml");
    let init = Command::new(&bin)
        .args([
            "dispatch",
            "init",
            "--cluster",
            "ci",
            "--executor-image",
            IMAGE,
        ])
        .args(["--gitea-url", &sim.gitea_url, "--nats", &nats.url])
        .arg("--facade-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--registration-token-file")
        .arg(&token)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--nats-secrets-dir")
        .arg(&nats.secrets)
        .arg("--out")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("init.log")).unwrap())
        .status()
        .unwrap();
    assert!(
        init.success(),
        "tenantci dispatch init failed:\n{}",
        std::fs::read_to_string(dir.join("init.log")).unwrap_or_default()
    );
    let mut b = Bench {
        bin,
        dir: dir.clone(),
        sim,
        nats,
        config,
        admin,
        http: reqwest::Client::new(),
        runs: 0,
        jobs: 0,
    };
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
    let sim_rss = memory(b.sim.proc.pid()).rss;
    b.sim.proc.terminate(Duration::from_secs(10));

    println!("| path | tasks | tasks/s | claim -> Pod created p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "{}",
        row(
            "raw: one loop, FetchTask + seal + Secret + Pod create, no queue",
            &raw
        )
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {n} queued at Gitea, capacity {mid}"),
            &disp
        )
    );
    println!(
        "{}",
        diff("**dispatch - raw** (goal: p99 <= 2 ms)", &disp, &raw, true)
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, one task at a time, capacity {low}"),
            &seq
        )
    );
    println!("{}", diff("**one at a time - raw**", &seq, &raw, false));
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {n} queued at Gitea, capacity {high}"),
            &disp_high
        )
    );
    println!(
        "{}",
        diff(
            &format!("**capacity {high} - raw**"),
            &disp_high,
            &raw,
            true
        )
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, one task at a time, capacity {high}"),
            &seq_high
        )
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {held_n} queued at Gitea, capacity {high}"),
            &held
        )
    );
    println!();
    println!("| path | first part p50 / p99 ms | second part p50 / p99 ms |");
    println!("|---|---|---|");
    println!("{}", split("raw", "claim -> FetchTask returned", &raw));
    for (name, r) in [
        (format!("dispatch, {n} queued, capacity {mid}"), &disp),
        (format!("dispatch, one at a time, capacity {low}"), &seq),
        (format!("dispatch, {n} queued, capacity {high}"), &disp_high),
        (
            format!("dispatch, one at a time, capacity {high}"),
            &seq_high,
        ),
        (format!("dispatch, {held_n} queued, capacity {high}"), &held),
    ] {
        println!("{}", split(&name, "claim -> queued (PubAck)", r));
    }
    println!();
    println!(
        "| run | most claimed, not yet started, at once | dispatcher CPU ms/task | nats-server CPU ms/task |"
    );
    println!("|---|---:|---:|---:|");
    for (name, r) in [
        (format!("{n} queued, capacity {mid}"), &disp),
        (format!("one at a time, capacity {low}"), &seq),
        (format!("{n} queued, capacity {high}"), &disp_high),
        (format!("one at a time, capacity {high}"), &seq_high),
        (format!("{held_n} queued, capacity {high}"), &held),
    ] {
        println!(
            "| {name} | {} | {} | {} |",
            r.max_backlog,
            per_task(r.cpu.dispatcher, r),
            per_task(r.cpu.nats, r)
        );
    }
    println!();
    let split_rss = |m: &Memory| {
        format!(
            "{} MiB ({} anonymous + {} file-backed)",
            mib(m.rss),
            mib(m.anon),
            mib(m.file)
        )
    };
    println!("| dispatcher | RSS | goal | CPU: dispatcher / nats-server |");
    println!("|---|---|---:|---|");
    idles.sort_by_key(|i| i.capacity);
    for i in &idles {
        println!(
            "| idle leader, capacity {} ({} s) | {} | <= 20 MiB | {} / {} of a core |",
            i.capacity,
            i.window.as_secs(),
            split_rss(&i.mem),
            pct(i.cpu.dispatcher, i.window),
            pct(i.cpu.nats, i.window)
        );
    }
    println!(
        "| {n} unfetched executors, capacity {mid} (after the burst, max over 3 s) | {} | | |",
        split_rss(&with_n)
    );
    println!(
        "| {held_n} claimed assignments held, capacity {high} (all started, unfetched; max over 8 s with reconciler passes and keep-alive rounds) | {} | <= 60 MiB | |",
        split_rss(&held_mem)
    );
    println!(
        "| peak (VmHWM) over the {held_n} burst | {} MiB | <= 60 MiB | |",
        mib(held_peak)
    );
    println!("| (simulator, at the end: {} MiB) | | | |", mib(sim_rss));
    drop(b);
    if std::env::var_os("BENCH_KEEP").is_some() {
        progress(&format!("kept {} (logs)", tmp.keep().display()));
    }
}
