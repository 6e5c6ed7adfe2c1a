//! Executor identity benchmark (issue 15): facade request latency with and without SPIFFE
//! mTLS, the TLS handshake amortised over a task's calls, in one run on one `tenantci sim
//! --gitea --spire` and one nats-server. Prints Markdown on stdout, progress on stderr;
//! `scripts/bench-identity.sh` builds it and writes docs/benchmarks/identity.md.
//!
//! Two dispatchers from one `dispatch init` config, one after the other: without
//! `[identity]` (server-only TLS + capability) and with it (SPIFFE mTLS + capability). For
//! each, one claimed task whose executor (this process) makes UpdateLog calls of one row:
//! - (a) server-only TLS straight to the facade, trusting the Secret's `ca.crt`;
//! - (d) through `tenantci executor-proxy` (identity off) on loopback;
//! - (b) SPIFFE mTLS straight to the facade with the task's SVID (the proxy's rustls config);
//! - (c) through `tenantci executor-proxy` with identity on (the real executor path).
//!
//! Kept-alive: ROUNDS rounds per path, each with a new client (and a new proxy process), its
//! first call (the connection and TLS handshake; through a proxy, the proxy's to the facade)
//! timed apart from the CALLS/ROUNDS that follow on the same connection; the paths of a
//! dispatcher alternate round by round. Fresh: FRESH calls per direct path, each on a new
//! connection, with session resumption off (a full handshake) and on.
//!
//! Usage: bench_identity TENANTCI_BIN [CALLS=2000] [FRESH=300] [ROUNDS=4]
//! (BENCH_KEEP=1 keeps the temporary directory with every log.)

use std::path::PathBuf;
use std::process::Command;

use tenantci_core::forge::gitea::proto::{TaskResult, TaskState, UpdateTaskRequest};
use tenantci_testkit::executor::{Executor, PodProxy};

mod calls;
mod table;
mod world;

use calls::{Conn, Task};
use table::Series;
use world::{Claimed, World};

/// Unrecorded calls per path before its rounds (the first requests a facade or proxy serves).
const WARM_UP: usize = 50;

fn progress(msg: &str) {
    eprintln!("bench_identity: {msg}");
}

struct Args {
    calls: usize,
    fresh: usize,
    rounds: usize,
}

impl Args {
    fn per_round(&self) -> usize {
        self.calls / self.rounds
    }
}

/// How one path reaches the facade.
enum Way<'a> {
    /// A new client (so a new connection) for each group of calls.
    Direct(&'a dyn Fn() -> reqwest::Client),
    /// A new `tenantci executor-proxy` for the round, identity on with this SVID endpoint.
    Proxy(Option<&'a str>),
}

/// A `tenantci executor-proxy` for `c`'s Pod, quiet (`RUST_LOG=warn`, as the sidecar logs).
fn proxy(w: &World, c: &Claimed, endpoint: Option<&str>) -> PodProxy {
    let mut cmd = Command::new(&w.bin);
    cmd.env("RUST_LOG", "warn");
    PodProxy::start_with(cmd, &c.secret, &c.pod, &[], endpoint)
}

/// One client (and through a proxy, one new proxy): with `out`, one call timed as the first
/// and `n` more; without, `n` untimed calls.
async fn calls(
    w: &World,
    c: &Claimed,
    task: &mut Task,
    way: &Way<'_>,
    n: usize,
    out: Option<&mut Series>,
) {
    let mut proc = None;
    let (http, base) = match way {
        Way::Direct(make) => (make(), task.facade_url.clone()),
        Way::Proxy(endpoint) => {
            let p = proxy(w, c, *endpoint);
            let base = p.address.clone();
            proc = Some(p);
            (calls::to_proxy(), base)
        }
    };
    match out {
        Some(s) => {
            s.first.push(task.update_log(&http, &base).await);
            for _ in 0..n {
                s.steady.push(task.update_log(&http, &base).await);
            }
        }
        None => {
            for _ in 0..n {
                task.update_log(&http, &base).await;
            }
        }
    }
    drop(proc);
}

/// The kept-alive rounds of two paths of one dispatcher, alternating which goes first.
async fn rounds(
    w: &World,
    c: &Claimed,
    task: &mut Task,
    args: &Args,
    x: (&str, Way<'_>),
    y: (&str, Way<'_>),
) -> (Series, Series) {
    let (mut sx, mut sy) = (Series::default(), Series::default());
    progress(&format!(
        "warm-up: {WARM_UP} calls each on {} and {}",
        x.0, y.0
    ));
    calls(w, c, task, &x.1, WARM_UP, None).await;
    calls(w, c, task, &y.1, WARM_UP, None).await;
    for r in 0..args.rounds {
        progress(&format!(
            "round {}/{}: {} calls each on {} and {}",
            r + 1,
            args.rounds,
            args.per_round(),
            x.0,
            y.0
        ));
        let n = args.per_round();
        if r % 2 == 0 {
            calls(w, c, task, &x.1, n, Some(&mut sx)).await;
            calls(w, c, task, &y.1, n, Some(&mut sy)).await;
        } else {
            calls(w, c, task, &y.1, n, Some(&mut sy)).await;
            calls(w, c, task, &x.1, n, Some(&mut sx)).await;
        }
    }
    (sx, sy)
}

/// `n` calls each on a new connection, full handshakes then resumable ones.
async fn fresh(
    w: &World,
    c: &Claimed,
    task: &mut Task,
    n: usize,
    make: &dyn Fn(Conn) -> reqwest::Client,
) -> (Series, Series) {
    let mut full = Series::default();
    let mut resumable = Series::default();
    let make_full = || make(Conn::FreshFull);
    let make_resumable = || make(Conn::FreshResumable);
    calls(w, c, task, &Way::Direct(&make_full), n, Some(&mut full)).await;
    calls(
        w,
        c,
        task,
        &Way::Direct(&make_resumable),
        n,
        Some(&mut resumable),
    )
    .await;
    (full, resumable)
}

/// The final state SUCCESS through `ex`, so the dispatcher cleans the task up.
async fn succeed(ex: &Executor, task: i64) {
    let done = ex
        .own()
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: task,
                result: TaskResult::Success as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    if let Err(e) = done {
        progress(&format!("warning: task {task} not finished: {e}"));
    }
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let argv: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        argv.get(1)
            .expect("usage: bench_identity TENANTCI_BIN [CALLS] [FRESH] [ROUNDS]"),
    );
    let arg = |i: usize, d: usize| argv.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let args = Args {
        calls: arg(2, 2000),
        fresh: arg(3, 300),
        rounds: arg(4, 4).max(1),
    };
    let mut w = World::start(bin).await;

    let off = identity_off(&mut w, &args).await;
    let on = identity_on(&mut w, &args).await;

    table::print(&table::Results {
        calls: args.calls - args.calls % args.rounds,
        rounds: args.rounds,
        fresh: args.fresh,
        a: off.direct,
        b: on.direct,
        c: on.proxied,
        d: off.proxied,
        a_full: off.full,
        b_full: on.full,
        a_resumable: off.resumable,
        b_resumable: on.resumable,
        a_resumes: off.resumes,
        b_resumes: on.resumes,
    });
    if std::env::var_os("BENCH_KEEP").is_some() {
        progress(&format!("kept {} (logs)", w.keep_dir().display()));
    }
}

/// What one dispatcher's phase measured: its direct and proxied paths, kept-alive and fresh.
struct Phase {
    direct: Series,
    proxied: Series,
    full: Series,
    resumable: Series,
    resumes: bool,
}

/// Step 1: the dispatcher without `[identity]`, paths (a) and (d).
async fn identity_off(w: &mut World, args: &Args) -> Phase {
    progress("identity off: dispatcher, one claimed task");
    let d = w.dispatcher(false).await;
    let c = w.claimed_task().await;
    let direct = Executor::from_objects(&c.secret, &c.pod);
    direct.fetch().await;
    let mut task = Task::from_objects(c.task, &c.secret, &c.pod);
    let ca = task
        .ca_pem
        .clone()
        .expect("identity off: the Secret has ca.crt");
    let keep = || calls::server_tls(&ca, Conn::KeepAlive);
    let (a, dd) = rounds(
        w,
        &c,
        &mut task,
        args,
        ("(a)", Way::Direct(&keep)),
        ("(d)", Way::Proxy(None)),
    )
    .await;
    progress(&format!("(a) fresh connections: {} each way", args.fresh));
    let (a_full, a_resumable) = fresh(w, &c, &mut task, args.fresh, &|conn| {
        calls::server_tls(&ca, conn)
    })
    .await;
    let a_resumes = calls::resumes(calls::server_tls_config(&ca), &task.facade_url).await;
    succeed(&direct, c.task).await;
    w.executors_gone().await;
    w.stop(d);
    Phase {
        direct: a,
        proxied: dd,
        full: a_full,
        resumable: a_resumable,
        resumes: a_resumes,
    }
}

/// Step 2: the dispatcher with `[identity]`, paths (b) and (c).
async fn identity_on(w: &mut World, args: &Args) -> Phase {
    progress("identity on: dispatcher, one claimed task, its entry");
    let d = w.dispatcher(true).await;
    let c = w.claimed_task().await;
    let endpoint = w.executor_entry(&c).await;
    let mut task = Task::from_objects(c.task, &c.secret, &c.pod);
    {
        let p = proxy(w, &c, Some(&endpoint));
        Executor::through(&c.secret, &p).fetch().await;
    }
    let svid = calls::svid_source(&endpoint).await;
    let facade_id = w.facade_id.clone();
    let keep = || calls::mtls(&svid, &facade_id, Conn::KeepAlive);
    let (b, cc) = rounds(
        w,
        &c,
        &mut task,
        args,
        ("(b)", Way::Direct(&keep)),
        ("(c)", Way::Proxy(Some(&endpoint))),
    )
    .await;
    progress(&format!("(b) fresh connections: {} each way", args.fresh));
    let (b_full, b_resumable) = fresh(w, &c, &mut task, args.fresh, &|conn| {
        calls::mtls(&svid, &facade_id, conn)
    })
    .await;
    let b_resumes = calls::resumes(calls::mtls_config(&svid, &facade_id), &task.facade_url).await;
    {
        let p = proxy(w, &c, Some(&endpoint));
        succeed(&Executor::through(&c.secret, &p), c.task).await;
    }
    w.executors_gone().await;
    w.stop(d);
    Phase {
        direct: b,
        proxied: cc,
        full: b_full,
        resumable: b_resumable,
        resumes: b_resumes,
    }
}
