//! Status API benchmark (issue 43): what one `GET /v1/status` (and the page at `/`) costs
//! against `GET /healthz` on the same listener (the baseline: the HTTP round trip alone),
//! with no task held and with TASKS executors running, in one run on one `tenantci sim
//! --gitea` and one nats-server. A status request reads the registry, the claim ledger's
//! writes since the previous request (`task::mirror`) and lists each backend's executors
//! once; the ratio says what that adds to the round trip.
//!
//! Beside it, with TASKS running, the read the status made before the mirror: one ledger GET
//! per task held, concurrently (`Ledger::get`, as `ci-worker`, on the same nats-server).
//!
//! Per load: REQUESTS sequential GETs of each path from one keep-alive client; p50 and p95.
//! Prints Markdown on stdout, progress on stderr; `scripts/bench-status.sh` writes it into
//! docs/benchmarks/status.md.
//!
//! Usage: bench_status TENANTCI_BIN [TASKS=20] [REQUESTS=200]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tenantci_dispatch::task_id::TaskId;

use serde_json::Value;
use tenantci_testkit::world::{Dispatcher, Options, World};

/// A deadlock guard per wait, not a measurement.
const DEADLINE: Duration = Duration::from_secs(120);

fn progress(msg: &str) {
    eprintln!("bench_status: {msg}");
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50 and p95 in ms of REQUESTS GETs of `path`.
async fn measure(http: &reqwest::Client, d: &Dispatcher, path: &str, n: usize) -> (f64, f64) {
    let url = format!("http://{}{path}", d.status_address());
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let resp = http.get(&url).send().await.unwrap();
        assert!(resp.status().is_success(), "{url}: {}", resp.status());
        resp.bytes().await.unwrap();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.95))
}

/// Until `/v1/status` lists `n` tasks whose executors run.
async fn running(http: &reqwest::Client, d: &Dispatcher, n: usize) {
    let url = format!("http://{}/v1/status", d.status_address());
    // A thousand executors start at the simulator's pace: allow 300 ms each beyond the floor.
    let end = Instant::now() + DEADLINE.max(Duration::from_millis(300) * n as u32);
    loop {
        let doc: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        let held = doc["tasks"].as_array().unwrap();
        if held.iter().filter(|t| t["state"] == "running").count() == n {
            return;
        }
        assert!(
            Instant::now() < end,
            "timed out waiting for {n} running tasks"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ledger's part of one `/v1/status`, `n` times each, as p50 and p95 in ms: before the
/// mirror, every held task's entry read concurrently (one NATS round trip per task held);
/// now, the mirror's catch-up with no write since the previous request (one direct get).
async fn ledger_reads(
    w: &World,
    d: &Dispatcher,
    http: &reqwest::Client,
    n: usize,
) -> [(f64, f64); 2] {
    use tenantci_dispatch::task::ledger::Ledger;
    use tenantci_dispatch::task::mirror::Mirror;
    let url = format!("http://{}/v1/status", d.status_address());
    let doc: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
    let tasks: Vec<TaskId> = doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| TaskId::new(t["task"].as_i64().unwrap()))
        .collect();
    let worker = w.nats.client("ci-worker").await;
    let ledger = Ledger::open(&async_nats::jetstream::new(worker))
        .await
        .unwrap();
    let (mut before, mut after) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mirror = Mirror::new(ledger.clone());
    assert_eq!(mirror.of(tasks.iter().copied()).await.len(), tasks.len());
    for _ in 0..n {
        let t = Instant::now();
        let read = futures::future::join_all(tasks.iter().map(|t| ledger.get(*t))).await;
        assert!(read.iter().all(|r| matches!(r, Ok(Some(_)))), "{read:?}");
        before.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        assert_eq!(mirror.of(tasks.iter().copied()).await.len(), tasks.len());
        after.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    [before, after].map(|mut ms| {
        ms.sort_by(f64::total_cmp);
        (percentile(&ms, 0.5), percentile(&ms, 0.95))
    })
}

struct Row {
    load: String,
    path: &'static str,
    p50: f64,
    p95: f64,
    baseline: f64,
}

async fn rows(http: &reqwest::Client, d: &Dispatcher, load: &str, n: usize) -> Vec<Row> {
    let (base50, base95) = measure(http, d, "/healthz", n).await;
    let mut out = vec![Row {
        load: load.into(),
        path: "/healthz (baseline)",
        p50: base50,
        p95: base95,
        baseline: base50,
    }];
    for path in ["/v1/status", "/"] {
        let (p50, p95) = measure(http, d, path, n).await;
        out.push(Row {
            load: load.into(),
            path,
            p50,
            p95,
            baseline: base50,
        });
    }
    out
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .expect("usage: bench_status TENANTCI_BIN [TASKS] [REQUESTS]"),
    );
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (tasks, requests) = (arg(2, 20), arg(3, 200));
    let mut w: World = Options::new(bin)
        .dir(tempfile::tempdir().unwrap())
        .sim_log()
        .start()
        .await;
    w.write_inputs(u32::try_from(tasks).unwrap()).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    progress("idle");
    let mut table = rows(&http, &d, "no task held", requests).await;
    for i in 0..tasks {
        w.enqueue(&format!("bench-{i}"), "s").await;
    }
    running(&http, &d, tasks).await;
    progress(&format!("{tasks} running"));
    let load = format!("{tasks} executors running");
    let mut loaded = rows(&http, &d, &load, requests).await;
    let [before, after] = ledger_reads(&w, &d, &http, requests).await;
    let paths = [
        "the ledger's part before: one GET per task held",
        "the ledger's part now: the mirror's catch-up, no new write",
    ];
    for (path, (p50, p95)) in paths.into_iter().zip([before, after]) {
        loaded.push(Row {
            load: load.clone(),
            path,
            p50,
            p95,
            baseline: loaded[0].baseline,
        });
    }
    table.extend(loaded);
    println!(
        "{requests} sequential GETs per row from one keep-alive client; debug build; {tasks} executor Pods at the simulator.\n"
    );
    println!("| load | path | p50 | p95 | p50 vs /healthz |");
    println!("|---|---|---|---|---|");
    for r in table {
        println!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.1}x |",
            r.load,
            r.path,
            r.p50,
            r.p95,
            r.p50 / r.baseline
        );
    }
}
