//! The Markdown tables `scripts/bench-vm.sh` writes into docs/benchmarks/vm.md.

use crate::Phase;
use crate::raw::Raw;
use crate::report::{PathResult, Stats, ms, row};

/// Everything one run measured.
pub struct Results {
    pub n: usize,
    pub seq: usize,
    pub capacity: usize,
    pub raw: Raw,
    pub raw_list: Raw,
    pub vm: Phase,
    pub pod: Phase,
}

/// `a - b` at p50 and p99 (bold: the overhead the goal is about), the tasks/s ratio.
fn diff(path: &str, a: &PathResult, b: &PathResult, ratio: bool) -> String {
    let ratio = if ratio {
        format!("{:.2}x", a.per_sec / b.per_sec)
    } else {
        String::new()
    };
    format!(
        "| {path} | | {ratio} | {} | **{}** | |",
        ms(a.total.p50 - b.total.p50),
        ms(a.total.p99 - b.total.p99)
    )
}

fn stats_row(path: &str, s: &Stats) -> String {
    format!(
        "| {path} | | | {} | {} | {} |",
        ms(s.p50),
        ms(s.p99),
        ms(s.max)
    )
}

fn split(path: &str, first: &str, second: &str, r: &PathResult) -> String {
    format!(
        "| {path} | {first}: {} / {} | {second}: {} / {} |",
        ms(r.first.p50),
        ms(r.first.p99),
        ms(r.second.p50),
        ms(r.second.p99)
    )
}

pub fn print(r: &Results) {
    print_totals(r);
    println!();
    print_parts(r);
}

/// Step 1: the claim -> created table, each path and its overhead over raw.
fn print_totals(r: &Results) {
    let Results {
        n,
        seq,
        capacity: c,
        raw,
        raw_list,
        vm,
        pod,
    } = r;
    let (raw, list) = (&raw.path, raw_list.list.as_ref().unwrap());
    let raw_list = &raw_list.path;
    println!("| path | tasks | tasks/s | claim -> created p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    let lines = [
        row("raw vm: one loop, FetchTask + seal + create, no queue", raw),
        row(
            "raw vm + list: the same with the list-by-metadata before the create",
            raw_list,
        ),
        stats_row("(the list call alone)", list),
        row(
            &format!("`dispatch run` vm, {n} queued at Gitea, capacity {c}"),
            &vm.burst,
        ),
        diff(
            "**vm dispatch - raw vm create** (goal: p99 <= 2 ms)",
            &vm.burst,
            raw,
            true,
        ),
        diff("**vm dispatch - raw vm + list**", &vm.burst, raw_list, true),
        row(&format!("`dispatch run` vm, {seq} one at a time"), &vm.one),
        diff("**vm one at a time - raw vm create**", &vm.one, raw, false),
        diff(
            "**vm one at a time - raw vm + list**",
            &vm.one,
            raw_list,
            false,
        ),
        stats_row(
            "(vm: `sandbox created` -> `executor started`, the claim ledger's note, all tasks)",
            vm.ledger_note.as_ref().unwrap(),
        ),
        row(
            &format!(
                "`dispatch run` pod, {n} queued at Gitea, capacity {c} (to `executor started`)"
            ),
            &pod.burst,
        ),
        row(
            &format!("`dispatch run` pod, {seq} one at a time (to `executor started`)"),
            &pod.one,
        ),
    ];
    for l in lines {
        println!("{l}");
    }
}

/// Step 2: the table splitting each path into its first and second part.
fn print_parts(r: &Results) {
    let Results {
        n,
        raw,
        raw_list,
        vm,
        pod,
        ..
    } = r;
    let (raw, raw_list) = (&raw.path, &raw_list.path);
    println!("| path | first part p50 / p99 ms | second part p50 / p99 ms |");
    println!("|---|---|---|");
    let lines = [
        split(
            "raw vm",
            "claim -> FetchTask returned",
            "-> create returned",
            raw,
        ),
        split(
            "raw vm + list",
            "claim -> FetchTask returned",
            "-> list + create returned",
            raw_list,
        ),
        split(
            &format!("vm, {n} queued"),
            "claim -> queued (PubAck)",
            "-> `sandbox created`",
            &vm.burst,
        ),
        split(
            "vm, one at a time",
            "claim -> queued (PubAck)",
            "-> `sandbox created`",
            &vm.one,
        ),
        split(
            &format!("vm, {n} queued"),
            "claim -> queued",
            "-> `executor started` (ledger noted)",
            &vm.started.0,
        ),
        split(
            "vm, one at a time",
            "claim -> queued",
            "-> `executor started` (ledger noted)",
            &vm.started.1,
        ),
        split(
            &format!("pod, {n} queued"),
            "claim -> queued",
            "-> `executor started`",
            &pod.burst,
        ),
        split(
            "pod, one at a time",
            "claim -> queued",
            "-> `executor started`",
            &pod.one,
        ),
    ];
    for l in lines {
        println!("{l}");
    }
}
