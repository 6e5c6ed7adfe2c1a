//! Scale benchmark: one `tenantci dispatch run` with N executors running at once, N = 100, 300,
//! 1000 by default, for each dispatcher binary given (the baseline first), in one run: the
//! simulator (`tenantci sim --gitea`, API work only: Pods stay Pending, so every executor costs
//! the apiserver the same for both builds), a real nats-server, and this process playing the N
//! runners through the facade (`player`). Prints Markdown on stdout, progress on stderr;
//! `scripts/bench-scale.sh` builds both binaries and writes docs/benchmarks/scale.md.
//!
//! Per N and build: the time from a burst of N jobs to N executor Pods created and to N tasks
//! fetched; then a steady-state window in which only the dispatcher talks to the apiserver
//! (the player reads each Secret once, before it) and to Gitea (the facade relays the runners'
//! UpdateLog): apiserver requests per second by verb (the simulator's `apiserver_request_total`),
//! Gitea calls per running task per minute (the double's counts by method), the dispatcher's
//! CPU (cores) and UpdateLog round trips through the facade (p50/p99); pickup of one new task
//! (enqueue -> its runner has it) while N run, against idle; the dispatcher's peak RSS.
//!
//! With `--backend vm` the executors are OpenSandbox sandboxes (`sim --opensandbox`, the
//! double counting its API calls by route and the sandboxes its lists return), played from
//! the double's admin view; the VM backend polls the Lifecycle API (there is no watch), and
//! its API columns are that API's.
//!
//! Usage: bench_scale SIM_BIN [NAME=DISPATCHER_BIN ...] [--backend pod|vm] [--sizes 100,300,1000]
//! [--window 20] (the simulator always runs from SIM_BIN, which counts requests by verb).

mod player;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tenantci_dispatch::config::override_var;
use tenantci_testkit::procfs::{cpu_time, memory};
use tenantci_testkit::world::{self, Options, World, apiserver_requests};

use player::{Players, Source};
use report::{Row, Stalled};

/// A guard per phase, not a measurement: a burst that has not reached N by then is reported
/// as the figure it reached.
const DEADLINE: Duration = Duration::from_secs(300);
/// Pickup samples, idle and loaded.
const PICKUPS: usize = 3;

fn progress(msg: &str) {
    eprintln!("bench_scale: {msg}");
}

/// The backend whose executors a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Pod,
    Vm,
}

struct Args {
    sim: PathBuf,
    builds: Vec<(String, PathBuf)>,
    backend: Backend,
    sizes: Vec<usize>,
    window: Duration,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let sim = PathBuf::from(
        it.next()
            .expect("usage: bench_scale SIM_BIN [NAME=BIN ...]"),
    );
    let (mut builds, mut sizes, mut window) = (Vec::new(), vec![100, 300, 1000], 20);
    let mut backend = Backend::Pod;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => {
                backend = match it.next().as_deref() {
                    Some("pod") => Backend::Pod,
                    Some("vm") => Backend::Vm,
                    other => panic!("--backend takes pod or vm, not {other:?}"),
                }
            }
            "--sizes" => {
                let list = it.next().expect("--sizes 100,300");
                sizes = list
                    .split(',')
                    .map(|n| n.parse().expect("a size"))
                    .collect();
            }
            "--window" => window = it.next().and_then(|w| w.parse().ok()).expect("--window 20"),
            build => {
                let (name, bin) = build.split_once('=').expect("NAME=DISPATCHER_BIN");
                builds.push((name.to_string(), PathBuf::from(bin)));
            }
        }
    }
    if builds.is_empty() {
        builds.push(("this build".into(), sim.clone()));
    }
    Args {
        sim,
        builds,
        backend,
        sizes,
        window: Duration::from_secs(window),
    }
}

/// Polls `f` every 50 ms until it yields `Some`, or `None` once [`DEADLINE`] has passed (what
/// the phases wait on has no event here).
async fn within<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= DEADLINE {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// As [`within`], a phase that must finish: the guard running out is a failure.
async fn until<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    within(f)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what} ({DEADLINE:?}, the guard)"))
}

/// A world with a dispatcher of `bin` whose `backend` has capacity `n + 1` (room for the
/// loaded pickup), led.
async fn world_for(
    sim: &Path,
    bin: &Path,
    backend: Backend,
    n: usize,
) -> (World, world::Dispatcher) {
    let capacity = n as u32 + 1;
    let mut w = match backend {
        Backend::Pod => Options::new(sim).api_only(),
        Backend::Vm => Options::new(sim).api_only().opensandbox(),
    }
    .start()
    .await;
    match backend {
        Backend::Pod => w.write_inputs(capacity).await,
        Backend::Vm => {
            // One Pod slot, unused: only vm jobs are enqueued.
            w.write_inputs(1).await;
            let key = w.opensandbox().api_key_file.clone();
            w.with_vm(capacity, &key);
        }
    }
    w.base_mut().facade.url = "https://127.0.0.1:0".into();
    w.bin = bin.to_path_buf();
    let config = w.config_only("d1");
    let mut cmd = w.command();
    // The production defaults, not the test world's short timings (a lease renewed every
    // 250 ms, a keep-alive every second).
    cmd.env("RUST_LOG", "warn,tenantci=info");
    for (key, value) in [
        ("gitea.fetch_interval", "200ms"),
        ("gitea.fetch_interval_idle", "2s"),
        ("gitea.keepalive_interval", "1m"),
        ("leader.lease_duration", "15s"),
        ("leader.renew_deadline", "10s"),
        ("leader.retry_period", "2s"),
    ] {
        cmd.env(override_var(key), value);
    }
    let log = w.dir.path().join("d1.log");
    let d = world::Dispatcher::spawn(cmd, "d1", &config, &log).await;
    d.wait_leader(true).await;
    (w, d)
}

/// Enqueues one job for `backend`'s executors.
async fn enqueue(w: &World, backend: Backend, name: &str) {
    const SECRET: &str = "bench-secret-xxxxxxxxxxxxxxxxxxxxxxxx";
    match backend {
        Backend::Pod => w.enqueue(name, SECRET).await,
        Backend::Vm => w.enqueue_vm(name, SECRET).await,
    };
}

/// Enqueues one job and returns how long until its runner had the task.
async fn pickup(w: &World, backend: Backend, players: &Players, name: &str) -> Duration {
    let before = players.seen.lock().unwrap().fetched.len();
    let start = Instant::now();
    enqueue(w, backend, name).await;
    until("the new task fetched", || {
        (players.seen.lock().unwrap().fetched.len() > before).then(Instant::now)
    })
    .await;
    let took = start.elapsed();
    players.release();
    took
}

async fn pickups(w: &World, backend: Backend, players: &Players, phase: &str) -> Vec<Duration> {
    let mut out = Vec::new();
    for i in 0..PICKUPS {
        let live = players.seen.lock().unwrap().live;
        out.push(pickup(w, backend, players, &format!("{phase}-{i}")).await);
        // Its executor deleted (its slot free again) before the next one.
        until("the pickup task's executor deleted", || {
            (players.seen.lock().unwrap().live <= live).then_some(())
        })
        .await;
    }
    out
}

/// The steady-state window's counts: apiserver, OpenSandbox and Gitea calls, the
/// connections the doubles accepted, the claim ledger's writes, dispatcher CPU.
struct Counts {
    apiserver: BTreeMap<(String, String), u64>,
    /// OpenSandbox API calls by route, and the sandboxes its lists return (VM backend).
    opensandbox: BTreeMap<String, u64>,
    listed: u64,
    gitea: BTreeMap<String, u64>,
    /// TCP connections accepted by the Gitea double and (VM backend) the OpenSandbox double.
    connections: (u64, u64),
    /// The claim ledger's stream sequence: every write (put, delete) adds one.
    ledger: u64,
    cpu: Duration,
    at: Instant,
}

/// What the benchmark reads of one world: the world, its backend, and the claim ledger's
/// stream (as ci-admin).
struct Meter<'a> {
    w: &'a World,
    backend: Backend,
    js: async_nats::jetstream::Context,
}

impl<'a> Meter<'a> {
    async fn new(w: &'a World, backend: Backend) -> Meter<'a> {
        let js = async_nats::jetstream::new(w.nats.client("ci-admin").await);
        Meter { w, backend, js }
    }

    async fn ledger_writes(&self) -> u64 {
        let stream = format!("KV_{}", tenantci_dispatch::queue::ledger_bucket::BUCKET);
        let mut s = self
            .js
            .get_stream(&stream)
            .await
            .expect("the claim ledger's stream");
        s.info()
            .await
            .expect("the claim ledger's stream info")
            .state
            .last_sequence
    }
}

async fn counts(m: &Meter<'_>, pid: u32) -> Counts {
    let w = m.w;
    let (opensandbox, listed, sandbox_connections) = match m.backend {
        Backend::Pod => (BTreeMap::new(), 0, 0),
        Backend::Vm => {
            let stats = w.opensandbox().stats(w.http()).await;
            let calls = serde_json::from_value(stats["calls"].clone()).unwrap_or_default();
            let n = |k: &str| stats[k].as_u64().unwrap_or(0);
            (calls, n("listed"), n("connections"))
        }
    };
    let stats = w.gitea.admin(w.http(), "stats").await;
    let gitea = serde_json::from_value(stats["calls"].clone()).unwrap_or_default();
    Counts {
        apiserver: apiserver_requests(&w.kube).await,
        opensandbox,
        listed,
        connections: (
            stats["connections"].as_u64().unwrap_or(0),
            sandbox_connections,
        ),
        ledger: m.ledger_writes().await,
        gitea,
        cpu: cpu_time(pid),
        at: Instant::now(),
    }
}

/// Enqueues N jobs at once; the time until N executor Pods were created and N tasks fetched,
/// or how far the build got when a phase's guard ran out.
async fn burst(
    w: &World,
    backend: Backend,
    players: &Players,
    build: &str,
    n: usize,
) -> Result<(Duration, Duration), Stalled> {
    progress(&format!("{build} N={n}: burst"));
    let start = Instant::now();
    for i in 0..n {
        enqueue(w, backend, &format!("burst-{i}")).await;
    }
    let reached = |s: &player::Seen| (s.created.len(), s.fetched.len());
    let stalled = || {
        let (created, fetched) = reached(&players.seen.lock().unwrap());
        Stalled {
            build: build.to_string(),
            n,
            created: created.saturating_sub(PICKUPS),
            fetched: fetched.saturating_sub(PICKUPS),
            after: start.elapsed(),
        }
    };
    let all = |count: fn(&player::Seen) -> usize| {
        let s = players.seen.lock().unwrap();
        (count(&s) >= n + PICKUPS).then(|| start.elapsed())
    };
    let Some(created) = within(|| all(|s| s.created.len())).await else {
        return Err(stalled());
    };
    let Some(fetched) = within(|| all(|s| s.fetched.len())).await else {
        return Err(stalled());
    };
    Ok((created, fetched))
}

/// The steady-state window: the counts at its start and end, the dispatcher's RSS at its
/// end, and every UpdateLog round trip in it.
async fn steady(
    args: &Args,
    m: &Meter<'_>,
    d: &world::Dispatcher,
    players: &Players,
) -> (Counts, Counts, u64, Vec<Duration>) {
    let live = players.seen.lock().unwrap().live;
    progress(&format!(
        "{live} executors live: steady state for {:?}",
        args.window
    ));
    players.take_latencies();
    let before = counts(m, d.pid()).await;
    tokio::time::sleep(args.window).await;
    let after = counts(m, d.pid()).await;
    let resident = memory(d.pid()).rss;
    for (key, n) in &after.apiserver {
        let was = before.apiserver.get(key).copied().unwrap_or(0);
        if *n > was {
            progress(&format!("  window: {} {} x{}", key.0, key.1, n - was));
        }
    }
    for (route, n) in &after.opensandbox {
        let was = before.opensandbox.get(route).copied().unwrap_or(0);
        if *n > was {
            progress(&format!("  window: OpenSandbox {route} x{}", n - was));
        }
    }
    (before, after, resident, players.take_latencies())
}

async fn measure(args: &Args, build: &str, bin: &Path, n: usize) -> Result<Row, Stalled> {
    let backend = args.backend;
    let (w, mut d) = world_for(&args.sim, bin, backend, n).await;
    let players = Players::start(match backend {
        Backend::Pod => Source::Pods(w.kube.clone()),
        Backend::Vm => Source::Sandboxes(w.opensandbox().clone()),
    });
    let m = Meter::new(&w, backend).await;
    let idle = pickups(&w, backend, &players, "idle").await;
    let start = counts(&m, d.pid()).await;
    let burst = match burst(&w, backend, &players, build, n).await {
        Ok(times) => report::Burst::new(backend, n, times, (&start, &counts(&m, d.pid()).await)),
        Err(stalled) => {
            // Not waited for further: the world (dispatcher, simulator, nats-server) is
            // killed when it is dropped here.
            progress(&format!(
                "{build} N={n}: stalled at {} executors created, {} fetched, after {:.0} s",
                stalled.created,
                stalled.fetched,
                stalled.after.as_secs_f64()
            ));
            return Err(stalled);
        }
    };
    let (before, after, resident, latencies) = steady(args, &m, &d, &players).await;
    let loaded = pickups(&w, backend, &players, "loaded").await;
    players.release();
    until("every executor deleted", || {
        (players.seen.lock().unwrap().live == 0).then_some(())
    })
    .await;
    let peak = memory(d.pid()).hwm;
    let code = d.terminate_within(Duration::from_secs(30));
    assert_eq!(code, Some(0), "the dispatcher drains and exits 0");
    Ok(report::row(
        build,
        n,
        burst,
        (&before, &after),
        latencies,
        (idle, loaded),
        (resident, peak),
    ))
}

#[tokio::main]
async fn main() {
    let args = args();
    let mut rows = Vec::new();
    for n in &args.sizes {
        for (build, bin) in &args.builds {
            progress(&format!("{build} N={n}"));
            rows.push(measure(&args, build, bin, *n).await);
            // So far, on stderr: a run stopped later still leaves its figures in the log.
            progress(&format!("so far:\n{}", report::table(args.backend, &rows)));
        }
    }
    println!("{}", report::table(args.backend, &rows));
}
