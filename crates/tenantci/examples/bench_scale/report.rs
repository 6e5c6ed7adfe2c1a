//! The scale benchmark's table: one row per N and build.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Counts;

pub struct Row {
    build: String,
    n: usize,
    /// Burst -> N executors created, -> N tasks fetched.
    burst: (Duration, Duration),
    /// Apiserver requests per second in the window, by verb.
    apiserver: BTreeMap<String, f64>,
    /// Gitea calls per running task per minute (relayed UpdateLog, the rest but FetchTask),
    /// and FetchTask per second.
    gitea: (f64, f64, f64),
    cores: f64,
    peak_mib: f64,
    update_log: (Duration, Duration),
    /// Pickup medians: idle, while N run.
    pickup: (Duration, Duration),
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    percentile(&v, 50.0)
}

pub fn row(
    build: &str,
    n: usize,
    burst: (Duration, Duration),
    (before, after): (&Counts, &Counts),
    mut latencies: Vec<Duration>,
    (idle, loaded): (Vec<Duration>, Vec<Duration>),
    peak_kib: u64,
) -> Row {
    let secs = (after.at - before.at).as_secs_f64();
    let mut apiserver: BTreeMap<String, f64> = BTreeMap::new();
    for ((verb, _), count) in &after.apiserver {
        *apiserver.entry(verb.clone()).or_default() += *count as f64;
    }
    for ((verb, _), count) in &before.apiserver {
        *apiserver.entry(verb.clone()).or_default() -= *count as f64;
    }
    apiserver.values_mut().for_each(|v| *v /= secs);
    let calls = |c: &Counts, pick: &dyn Fn(&str) -> bool| -> f64 {
        c.gitea
            .iter()
            .filter(|(m, _)| pick(m))
            .map(|(_, n)| *n as f64)
            .sum()
    };
    let delta = |pick: &dyn Fn(&str) -> bool| calls(after, pick) - calls(before, pick);
    let per_task_min = |pick: &dyn Fn(&str) -> bool| delta(pick) / n as f64 / (secs / 60.0);
    latencies.sort();
    Row {
        build: build.to_string(),
        n,
        burst,
        apiserver,
        gitea: (
            per_task_min(&|m| m == "UpdateLog"),
            per_task_min(&|m| m != "UpdateLog" && m != "FetchTask"),
            delta(&|m| m == "FetchTask") / secs,
        ),
        cores: (after.cpu - before.cpu).as_secs_f64() / secs,
        peak_mib: peak_kib as f64 / 1024.0,
        update_log: (percentile(&latencies, 50.0), percentile(&latencies, 99.0)),
        pickup: (median(idle), median(loaded)),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn verbs(r: &Row) -> String {
    let get = |v: &str| r.apiserver.get(v).copied().unwrap_or(0.0);
    let writes: f64 = ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
        .iter()
        .map(|v| get(v))
        .sum();
    format!(
        "{:.2} | {:.2} | {:.2} | {:.2}",
        get("LIST"),
        get("GET"),
        get("WATCH"),
        writes
    )
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| N | build | LIST/s | GET/s | WATCH/s | writes/s | Gitea /task/min: UpdateLog + other | FetchTask/s | dispatcher cores | peak RSS MiB | UpdateLog p50 / p99 ms | pickup idle / loaded ms (ratio) | burst -> N created / N fetched s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let ratio = r.pickup.1.as_secs_f64() / r.pickup.0.as_secs_f64().max(1e-9);
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} + {:.2} | {:.1} | {:.3} | {:.1} | {} / {} | {} / {} ({:.2}x) | {:.1} / {:.1} |\n",
            r.n,
            r.build,
            verbs(r),
            r.gitea.0,
            r.gitea.1,
            r.gitea.2,
            r.cores,
            r.peak_mib,
            ms(r.update_log.0),
            ms(r.update_log.1),
            ms(r.pickup.0),
            ms(r.pickup.1),
            ratio,
            r.burst.0.as_secs_f64(),
            r.burst.1.as_secs_f64(),
        ));
    }
    out
}
