//! Simulator benchmark: GET pod and create pod throughput and p99 from a kube-rs client, and the
//! simulator's RSS with 10k pods stored. Runs the real `tenantci sim` binary as a child (so the
//! RSS is the server's alone) and prints a Markdown table.
//!
//! `scripts/bench-sim.sh` builds and runs it.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use tenantci_testkit::kube::kube_client;
use tenantci_testkit::procfs::memory;
use tenantci_testkit::sim::SimProcess;

const CONCURRENCY: usize = 32;
const STORED: usize = 10_000;
const GETS: usize = 20_000;

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    }))
    .unwrap()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// Runs `n` calls of `f(i)` with CONCURRENCY in flight; returns (req/s, p99).
async fn drive<F, Fut>(n: usize, offset: usize, f: F) -> (f64, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                f(offset + i).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (n as f64 / start.elapsed().as_secs_f64(), p99(all))
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let bin = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/tenantci".into());
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&bin);
    cmd.stderr(Stdio::null());
    let sim = SimProcess::start(cmd, state.path(), &["bench"], &[]);
    let client = kube_client(&sim.tenant_admin("bench")).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let rss_idle = memory(sim.pid()).rss;

    let p = pods.clone();
    let (create_rps, create_p99) = drive(STORED, 0, move |i| {
        let p = p.clone();
        async move {
            p.create(&PostParams::default(), &pod(&format!("pod-{i}")))
                .await
                .unwrap();
        }
    })
    .await;
    let rss_full = memory(sim.pid()).rss;
    let p = pods.clone();
    let (get_rps, get_p99) = drive(GETS, 0, move |i| {
        let p = p.clone();
        async move {
            p.get(&format!("pod-{}", i % STORED)).await.unwrap();
        }
    })
    .await;
    sim.stop();
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| create pod, {CONCURRENCY} in flight ({STORED} pods) | {create_rps:.0} req/s, p99 {:.2} ms |",
        create_p99.as_secs_f64() * 1e3
    );
    println!(
        "| GET pod, {CONCURRENCY} in flight ({GETS} requests, {STORED} stored) | {get_rps:.0} req/s, p99 {:.2} ms |",
        get_p99.as_secs_f64() * 1e3
    );
    println!(
        "| simulator RSS idle | {:.1} MiB |",
        rss_idle as f64 / 1024.0
    );
    println!(
        "| simulator RSS with {STORED} pods | {:.1} MiB |",
        rss_full as f64 / 1024.0
    );
}
