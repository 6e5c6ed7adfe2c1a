//! Per-task latencies, percentiles and the Markdown tables the script writes into
//! docs/benchmarks/dispatch.md. `bench_vm` shares the latency part (`#[path]`).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use tenantci_testkit::procfs::Memory;

pub fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

pub fn ms(d: f64) -> String {
    format!("{d:.2}")
}

pub fn parse_time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("timestamp {s:?}: {e}"))
        .with_timezone(&Utc)
}

pub fn millis_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap() as f64 / 1000.0
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[derive(Clone, Copy)]
pub struct Stats {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(f64::total_cmp);
    Stats {
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
        max: *v.last().unwrap(),
    }
}

/// CPU time of the dispatcher and of nats-server over a phase.
pub struct Cpu {
    pub dispatcher: Duration,
    pub nats: Duration,
}

/// What one path measured.
pub struct PathResult {
    pub tasks: usize,
    pub per_sec: f64,
    pub total: Stats,
    /// Dispatcher: claim -> queued and queued -> Pod created. Raw: claim -> FetchTask
    /// returned and FetchTask returned -> Pod created.
    pub first: Stats,
    pub second: Stats,
    /// Dispatcher only: most tasks claimed but not yet started at one time.
    pub max_backlog: usize,
    pub cpu: Cpu,
}

/// Per-task latencies from the double's claim times and the dispatcher's log: claim ->
/// `started` (a task's executor-created time), split at `queued`.
pub fn dispatch_result(
    claimed: &BTreeMap<i64, DateTime<Utc>>,
    queued: &BTreeMap<i64, DateTime<Utc>>,
    started: &BTreeMap<i64, DateTime<Utc>>,
    cpu: Cpu,
) -> PathResult {
    let (mut total, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for (t, c) in claimed {
        let (q, s) = (queued[t], started[t]);
        total.push(millis_between(*c, s));
        first.push(millis_between(*c, q));
        second.push(millis_between(q, s));
    }
    let start = claimed.values().min().unwrap();
    let end = claimed.keys().map(|t| started[t]).max().unwrap();
    let mut events: Vec<(DateTime<Utc>, i64)> = claimed
        .keys()
        .map(|t| (queued[t], 1))
        .chain(claimed.keys().map(|t| (started[t], -1)))
        .collect();
    events.sort();
    let (mut depth, mut max_backlog) = (0i64, 0i64);
    for (_, d) in events {
        depth += d;
        max_backlog = max_backlog.max(depth);
    }
    PathResult {
        tasks: claimed.len(),
        per_sec: claimed.len() as f64 / (millis_between(*start, end) / 1000.0),
        total: stats(total),
        first: stats(first),
        second: stats(second),
        max_backlog: max_backlog as usize,
        cpu,
    }
}

pub fn row(path: &str, r: &PathResult) -> String {
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
pub fn diff(path: &str, r: &PathResult, raw: &PathResult, ratio: bool) -> String {
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

pub fn split(path: &str, first: &str, r: &PathResult) -> String {
    format!(
        "| {path} | {first}: {} / {} | -> Pod created: {} / {} |",
        ms(r.first.p50),
        ms(r.first.p99),
        ms(r.second.p50),
        ms(r.second.p99)
    )
}

pub fn per_task(d: Duration, r: &PathResult) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0 / r.tasks as f64)
}

pub fn pct(d: Duration, window: Duration) -> String {
    format!("{:.0}%", d.as_secs_f64() * 100.0 / window.as_secs_f64())
}

/// Everything one run measured.
pub struct Report {
    pub n: usize,
    pub held_n: usize,
    pub low: u32,
    pub mid: u32,
    pub high: u32,
    pub raw: PathResult,
    pub disp: PathResult,
    pub seq: PathResult,
    pub disp_high: PathResult,
    pub seq_high: PathResult,
    pub held: PathResult,
    pub idles: Vec<Idle>,
    pub with_n: Memory,
    pub held_mem: Memory,
    pub held_peak: u64,
    pub sim_rss: u64,
}

/// An idle leader: its memory after `window`, and CPU over it (dispatcher, nats-server).
pub struct Idle {
    pub capacity: u32,
    pub mem: Memory,
    pub cpu: Cpu,
    pub window: Duration,
}

pub fn print(mut r: Report) {
    print_latency_table(&r);
    println!();
    print_split_table(&r);
    println!();
    print_backlog_table(&r);
    println!();
    print_memory_table(&mut r);
}

/// Step 1: claim -> Pod created latency per path, with the differences to raw.
fn print_latency_table(r: &Report) {
    let Report {
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
        ..
    } = r;
    println!("| path | tasks | tasks/s | claim -> Pod created p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "{}",
        row(
            "raw: one loop, FetchTask + seal + Secret + Pod create, no queue",
            raw
        )
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {n} queued at Gitea, capacity {mid}"),
            disp
        )
    );
    println!(
        "{}",
        diff("**dispatch - raw** (goal: p99 <= 2 ms)", disp, raw, true)
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, one task at a time, capacity {low}"),
            seq
        )
    );
    println!("{}", diff("**one at a time - raw**", seq, raw, false));
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {n} queued at Gitea, capacity {high}"),
            disp_high
        )
    );
    println!(
        "{}",
        diff(&format!("**capacity {high} - raw**"), disp_high, raw, true)
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, one task at a time, capacity {high}"),
            seq_high
        )
    );
    println!(
        "{}",
        row(
            &format!("`dispatch run`, {held_n} queued at Gitea, capacity {high}"),
            held
        )
    );
}

/// Step 2: each path's latency split into its first and second part.
fn print_split_table(r: &Report) {
    let Report {
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
        ..
    } = r;
    println!("| path | first part p50 / p99 ms | second part p50 / p99 ms |");
    println!("|---|---|---|");
    println!("{}", split("raw", "claim -> FetchTask returned", raw));
    for (name, r) in [
        (format!("dispatch, {n} queued, capacity {mid}"), disp),
        (format!("dispatch, one at a time, capacity {low}"), seq),
        (format!("dispatch, {n} queued, capacity {high}"), disp_high),
        (
            format!("dispatch, one at a time, capacity {high}"),
            seq_high,
        ),
        (format!("dispatch, {held_n} queued, capacity {high}"), held),
    ] {
        println!("{}", split(&name, "claim -> queued (PubAck)", r));
    }
}

/// Step 3: the most tasks waiting at once, and CPU per task, per dispatcher run.
fn print_backlog_table(r: &Report) {
    let Report {
        n,
        held_n,
        low,
        mid,
        high,
        disp,
        seq,
        disp_high,
        seq_high,
        held,
        ..
    } = r;
    println!(
        "| run | most claimed, not yet started, at once | dispatcher CPU ms/task | nats-server CPU ms/task |"
    );
    println!("|---|---:|---:|---:|");
    for (name, r) in [
        (format!("{n} queued, capacity {mid}"), disp),
        (format!("one at a time, capacity {low}"), seq),
        (format!("{n} queued, capacity {high}"), disp_high),
        (format!("one at a time, capacity {high}"), seq_high),
        (format!("{held_n} queued, capacity {high}"), held),
    ] {
        println!(
            "| {name} | {} | {} | {} |",
            r.max_backlog,
            per_task(r.cpu.dispatcher, r),
            per_task(r.cpu.nats, r)
        );
    }
}

/// Step 4: dispatcher memory and idle CPU, idle leaders sorted by capacity.
fn print_memory_table(r: &mut Report) {
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
    r.idles.sort_by_key(|i| i.capacity);
    let Report {
        n,
        held_n,
        mid,
        high,
        idles,
        with_n,
        held_mem,
        held_peak,
        sim_rss,
        ..
    } = r;
    for i in idles.iter() {
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
        split_rss(with_n)
    );
    println!(
        "| {held_n} claimed assignments held, capacity {high} (all started, unfetched; max over 8 s with reconciler passes and keep-alive rounds) | {} | <= 60 MiB | |",
        split_rss(held_mem)
    );
    println!(
        "| peak (VmHWM) over the {held_n} burst | {} MiB | <= 60 MiB | |",
        mib(*held_peak)
    );
    println!("| (simulator, at the end: {} MiB) | | | |", mib(*sim_rss));
}
