//! The scale benchmark's table: one row per N and build, its API columns those of the backend
//! measured (the tenant apiserver's for Pods, OpenSandbox's for VM sandboxes).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Backend, Counts};

pub struct Row {
    build: String,
    n: usize,
    burst: Burst,
    /// Apiserver requests per second in the window, by verb.
    apiserver: BTreeMap<String, f64>,
    /// OpenSandbox API calls per second in the window, by route, and sandboxes listed a
    /// second (every page's items).
    opensandbox: BTreeMap<String, f64>,
    listed: f64,
    /// In the window: TCP connections the Gitea double and the OpenSandbox double accepted,
    /// and the claim ledger's writes.
    connections: (u64, u64),
    ledger: u64,
    /// Gitea calls per running task per minute (relayed UpdateLog, the rest but FetchTask),
    /// and FetchTask per second.
    gitea: (f64, f64, f64),
    cores: f64,
    /// The dispatcher's RSS at the end of the window, and its peak (VmHWM) at the end.
    rss_mib: (f64, f64),
    update_log: (Duration, Duration),
    /// Pickup medians: idle, while N run.
    pickup: (Duration, Duration),
}

/// The burst: N jobs enqueued at once.
pub struct Burst {
    /// Until N executors were created, and until N tasks were fetched.
    pub created: Duration,
    pub fetched: Duration,
    /// Over the burst (enqueue to N fetched): the backend API's creates a second (the
    /// apiserver's POSTs, Pods and Secrets; OpenSandbox's sandbox creates), and the
    /// dispatcher's CPU in cores: which of the two bounds it.
    pub posts: f64,
    pub cores: f64,
    /// The claim ledger's writes per task of the burst (the pickups' tasks are before it).
    pub ledger_per_task: f64,
}

impl Burst {
    pub fn new(
        backend: Backend,
        n: usize,
        (created, fetched): (Duration, Duration),
        (start, end): (&Counts, &Counts),
    ) -> Burst {
        let secs = (end.at - start.at).as_secs_f64();
        let posts = |c: &Counts| -> u64 {
            match backend {
                Backend::Pod => c
                    .apiserver
                    .iter()
                    .filter(|((verb, _), _)| verb == "POST")
                    .map(|(_, n)| n)
                    .sum(),
                Backend::Vm => c.opensandbox.get(CREATE).copied().unwrap_or(0),
            }
        };
        Burst {
            created,
            fetched,
            posts: posts(end).saturating_sub(posts(start)) as f64 / secs,
            cores: (end.cpu - start.cpu).as_secs_f64() / secs,
            ledger_per_task: end.ledger.saturating_sub(start.ledger) as f64 / n as f64,
        }
    }
}

/// A build that did not reach N executors within the guard: how far it got.
pub struct Stalled {
    pub build: String,
    pub n: usize,
    pub created: usize,
    pub fetched: usize,
    pub after: Duration,
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
    burst: Burst,
    (before, after): (&Counts, &Counts),
    mut latencies: Vec<Duration>,
    (idle, loaded): (Vec<Duration>, Vec<Duration>),
    (resident_kib, peak_kib): (u64, u64),
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
    let opensandbox = after
        .opensandbox
        .iter()
        .map(|(route, n)| {
            let was = before.opensandbox.get(route).copied().unwrap_or(0);
            (route.clone(), n.saturating_sub(was) as f64 / secs)
        })
        .collect();
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
        opensandbox,
        listed: after.listed.saturating_sub(before.listed) as f64 / secs,
        connections: (
            after.connections.0.saturating_sub(before.connections.0),
            after.connections.1.saturating_sub(before.connections.1),
        ),
        ledger: after.ledger.saturating_sub(before.ledger),
        gitea: (
            per_task_min(&|m| m == "UpdateLog"),
            per_task_min(&|m| m != "UpdateLog" && m != "FetchTask"),
            delta(&|m| m == "FetchTask") / secs,
        ),
        cores: (after.cpu - before.cpu).as_secs_f64() / secs,
        rss_mib: (resident_kib as f64 / 1024.0, peak_kib as f64 / 1024.0),
        update_log: (percentile(&latencies, 50.0), percentile(&latencies, 99.0)),
        pickup: (median(idle), median(loaded)),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// The Lifecycle API's create and list routes, as the double counts them.
const CREATE: &str = "POST /sandboxes";
const LIST: &str = "GET /sandboxes";

/// The VM backend's API columns: list pages and sandboxes listed a second, the other
/// OpenSandbox calls a second, and the apiserver's requests a second (the Lease).
fn sandbox_calls(r: &Row) -> String {
    let pages = r.opensandbox.get(LIST).copied().unwrap_or(0.0);
    let other: f64 = r
        .opensandbox
        .iter()
        .filter(|(route, _)| *route != LIST)
        .map(|(_, n)| n)
        .sum();
    let apiserver: f64 = r.apiserver.values().sum();
    format!("{pages:.2} | {:.0} | {other:.2} | {apiserver:.2}", r.listed)
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

const HEADER_POD: &str = "| N | build | LIST/s | GET/s | WATCH/s | writes/s | Gitea /task/min: UpdateLog + other | FetchTask/s | dispatcher cores | RSS MiB: window / peak | UpdateLog p50 / p99 ms | pickup idle / loaded ms (ratio) | burst -> N created / N fetched s (POST/s, dispatcher cores) | window: new conns to Gitea, ledger writes | ledger writes / burst task |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
const HEADER_VM: &str = "| N | build | OpenSandbox list pages/s | sandboxes listed/s | other OpenSandbox calls/s | apiserver req/s | Gitea /task/min: UpdateLog + other | FetchTask/s | dispatcher cores | RSS MiB: window / peak | UpdateLog p50 / p99 ms | pickup idle / loaded ms (ratio) | burst -> N created / N fetched s (creates/s, dispatcher cores) | window: new conns to Gitea / OpenSandbox, ledger writes | ledger writes / burst task |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";

pub fn table(backend: Backend, rows: &[Result<Row, Stalled>]) -> String {
    let (header, api): (_, fn(&Row) -> String) = match backend {
        Backend::Pod => (HEADER_POD, verbs),
        Backend::Vm => (HEADER_VM, sandbox_calls),
    };
    let mut out = String::from(header);
    for r in rows {
        out.push_str(&match r {
            Ok(r) => {
                let conns = match backend {
                    Backend::Pod => r.connections.0.to_string(),
                    Backend::Vm => format!("{} / {}", r.connections.0, r.connections.1),
                };
                measured(r, api(r), conns)
            }
            Err(s) => stalled(s),
        });
    }
    out
}

fn measured(r: &Row, api: String, conns: String) -> String {
    let ratio = r.pickup.1.as_secs_f64() / r.pickup.0.as_secs_f64().max(1e-9);
    format!(
        "| {} | {} | {} | {:.1} + {:.2} | {:.1} | {:.3} | {:.1} / {:.1} | {} / {} | {} / {} ({:.2}x) | {:.1} / {:.1} ({:.0}, {:.2}) | {}, {} | {:.1} |\n",
        r.n,
        r.build,
        api,
        r.gitea.0,
        r.gitea.1,
        r.gitea.2,
        r.cores,
        r.rss_mib.0,
        r.rss_mib.1,
        ms(r.update_log.0),
        ms(r.update_log.1),
        ms(r.pickup.0),
        ms(r.pickup.1),
        ratio,
        r.burst.created.as_secs_f64(),
        r.burst.fetched.as_secs_f64(),
        r.burst.posts,
        r.burst.cores,
        conns,
        r.ledger,
        r.burst.ledger_per_task,
    )
}

/// The burst's guard ran out: no steady state to measure, the figure it reached instead.
fn stalled(s: &Stalled) -> String {
    format!(
        "| {} | {} | - | - | - | - | - | - | - | - | - | - | not reached: {} created, {} fetched after {:.0} s (the guard) | - | - |\n",
        s.n,
        s.build,
        s.created,
        s.fetched,
        s.after.as_secs_f64(),
    )
}
