//! VM dispatch benchmark (issue 14): claim -> sandbox created through `tenantci dispatch run`
//! with the VM backend, beside the raw Lifecycle API create and the pod path, in one run on one
//! `tenantci sim --gitea --opensandbox` and one nats-server. Prints Markdown on stdout,
//! progress on stderr; `scripts/bench-vm.sh` builds it and writes docs/benchmarks/vm.md.
//!
//! Latency per task: from the Gitea double's claim (the task's `started_at`) to the return of
//! the create: for the dispatcher its `sandbox created` JSON log line (right after the
//! Lifecycle API create returned) or, pod path, `executor started`; for the raw loop this
//! process's clock after the create. One host, one wall clock, microseconds.
//!
//! Usage: bench_vm TENANTCI_BIN [TASKS=400] [SEQUENTIAL=100]
//! (BENCH_KEEP=1 keeps the temporary directory with every log.)

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

// The latency arithmetic and the log reader are bench_dispatch's; the parts of them only
// that bench prints are unused here.
#[allow(dead_code)]
#[path = "../bench_dispatch/logtail.rs"]
mod logtail;
#[allow(dead_code)]
#[path = "../bench_dispatch/report.rs"]
mod report;

mod raw;
mod table;
mod world;

use logtail::LogTail;
use report::{Cpu, PathResult, Stats, dispatch_result, millis_between, stats};
use world::{Dispatcher, World};

const NAMESPACE: &str = "dynamic-runner";
/// A deadlock guard per phase, not a measurement.
const DEADLINE: Duration = Duration::from_secs(120);
/// The consumer's `max_waiting` (pull requests) by default: capacity stays at or below it.
const MAX_WAITING: usize = 512;

fn progress(msg: &str) {
    eprintln!("bench_vm: {msg}");
}

fn no_cpu() -> Cpu {
    Cpu {
        dispatcher: Duration::ZERO,
        nats: Duration::ZERO,
    }
}

/// The dispatcher's latencies of the tasks it claimed in this run (ascending ids: claim
/// order), `tasks` of them by index: claim -> the `end` line, split at `claimed and queued`.
async fn measured(w: &World, d: &Dispatcher, end: End, tasks: Range<usize>) -> PathResult {
    let t = &d.tail;
    let ids: Vec<i64> = t.queued.keys().copied().collect();
    let claimed = w.claimed_at(ids[tasks].iter().copied()).await;
    dispatch_result(&claimed, &t.queued, end.of(t), no_cpu())
}

/// The dispatcher's log line a task's latency ends at.
#[derive(Clone, Copy)]
enum End {
    /// `sandbox created`: the Lifecycle API create returned (VM backend).
    SandboxCreated,
    /// `executor started`: Secret + Pod or the sandbox created, and the claim ledger noted it.
    ExecutorStarted,
}

impl End {
    fn of(self, t: &LogTail) -> &BTreeMap<i64, DateTime<Utc>> {
        match self {
            End::SandboxCreated => &t.sandboxes,
            End::ExecutorStarted => &t.started,
        }
    }
}

/// Tasks claimed in this run with both their `end` and `executor started` lines in.
fn ready(t: &LogTail, end: End) -> usize {
    t.queued
        .keys()
        .filter(|k| end.of(t).contains_key(k) && t.started.contains_key(k))
        .count()
}

/// `n` jobs queued at Gitea, then a fresh dispatcher claims them all; then `seq` jobs one at
/// a time, each enqueued once the previous one's executor exists (a slot is free for each).
async fn phase(w: &mut World, vm: bool, n: usize, seq: usize, capacity: usize) -> Phase {
    let (name, runs_on, end) = if vm {
        ("vm", ["self-hosted", "vm"], End::SandboxCreated)
    } else {
        ("pod", ["self-hosted", "pod"], End::ExecutorStarted)
    };
    progress(&format!(
        "{name}: {n} queued at Gitea, then a dispatcher with capacity {capacity}; then {seq} one at a time"
    ));
    for _ in 0..n {
        w.enqueue(&runs_on).await;
    }
    let mut d = w.dispatcher(name, capacity).await;
    d.tail
        .until("every executor", |t| ready(t, end) >= n, || {})
        .await;
    for i in 1..=seq {
        w.enqueue(&runs_on).await;
        d.tail
            .until("the executor", |t| ready(t, end) >= n + i, || {})
            .await;
    }
    let (all_burst, all_one) = (0..n, n..n + seq);
    let t = &d.tail;
    // VM only: what the worker does between the two lines (the claim ledger's `started`
    // note, one JetStream KV write), the cost of one such round trip here.
    let ledger_note = vm.then(|| {
        stats(
            t.queued
                .keys()
                .map(|k| millis_between(t.sandboxes[k], t.started[k]))
                .collect(),
        )
    });
    let phase = Phase {
        ledger_note,
        burst: measured(w, &d, end, all_burst.clone()).await,
        one: measured(w, &d, end, all_one.clone()).await,
        started: (
            measured(w, &d, End::ExecutorStarted, all_burst).await,
            measured(w, &d, End::ExecutorStarted, all_one).await,
        ),
    };
    // Executors and sandboxes stay: the next dispatcher recovers them instead of starting
    // them again, so no recovery work runs inside its latency window.
    w.stop(name, d);
    phase
}

pub struct Phase {
    pub burst: PathResult,
    pub one: PathResult,
    /// Burst and one at a time up to `executor started` (after the claim-ledger note).
    pub started: (PathResult, PathResult),
    /// VM: `sandbox created` -> `executor started`, every task of the phase.
    pub ledger_note: Option<Stats>,
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_vm TENANTCI_BIN [TASKS] [SEQUENTIAL]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (n, seq) = (arg(2, 400), arg(3, 100));
    // Every task of a phase holds a slot to the end of the run (nothing executes them).
    let capacity = n + seq;
    assert!(
        capacity <= MAX_WAITING,
        "TASKS + SEQUENTIAL must be at most {MAX_WAITING} (the consumer's max_waiting)"
    );
    let mut w = World::start(bin, capacity).await;
    let raw = raw::run(&mut w, n, "bench-raw-vm", false).await;
    let raw_list = raw::run(&mut w, n, "bench-raw-vm-list", true).await;
    let vm = phase(&mut w, true, n, seq, capacity).await;
    let pod = phase(&mut w, false, n, seq, capacity).await;
    table::print(&table::Results {
        n,
        seq,
        capacity,
        raw,
        raw_list,
        vm,
        pod,
    });
    if std::env::var_os("BENCH_KEEP").is_some() {
        progress(&format!("kept {} (logs)", w.keep_dir().display()));
    }
}
