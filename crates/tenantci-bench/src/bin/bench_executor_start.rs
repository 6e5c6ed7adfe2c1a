//! Warm against cold executor starts: the dispatcher's own executor Pod (`manifest::desired_pod`
//! with the default config: 1800m + the 10m sidecar on the runbook's 2-vCPU node) created on
//! `tenantci sim` with a scaled-down node boot, RUNS times cold (no node up: the Pod waits
//! for a node to be rented and boot) and RUNS times warm (one pause pod sized by
//! `tenant prewarm --dispatch-config`'s function holds a booted node; the executor preempts
//! it), in one process. Start latency is create -> Running as a client sees it. Writes
//! docs/benchmarks/executor-start.md. Run with `scripts/bench.sh executor-start`
//! (RUNS=5 BOOT=4 by default).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use tenantci_core::node_image::NodeImage;
use tenantci_dispatch::backend::pod::manifest;
use tenantci_dispatch::sizing::ExecutorSettings;
use tenantci_dispatch::task::spec::ExecutorSpec;
use tenantci_dispatch::task_id::TaskId;
use tenantci_runner::tenant::prewarm;
use tenantci_sim::{self as sim, SimConfig, nodes::NodeConfig};

const NAMESPACE: &str = "dynamic-runner";

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn spec(task: i64, x: &ExecutorSettings) -> ExecutorSpec {
    ExecutorSpec {
        namespace: NAMESPACE.into(),
        task_id: TaskId::new(task),
        attempt: 1,
        assignment_id: format!("task-{task}-attempt-1"),
        capability: "bench-capability".into(),
        facade_url: "https://127.0.0.1:8443".into(),
        facade_ca_pem: "-----BEGIN CERTIFICATE-----\n".into(),
        gitea: tenantci_dispatch::task::spec::GiteaForExecutors {
            url: "http://127.0.0.1:3000".into(),
            ca_pem: None,
        },
        labels: vec!["self-hosted".into(), "pod".into()],
        runner_name: "bench".into(),
        executor: x.clone(),
        identity: None,
        class: None,
        cache_grant: None,
    }
}

/// Polls `done` every 50 ms (a benchmark's set-up, not a measurement).
async fn until<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) {
    while !done().await {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Start latencies (seconds) of `runs` executors, warm or cold.
async fn starts(warm: bool, runs: usize, boot: Duration) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let handle = sim::start(SimConfig {
        state_dir: dir.path().join("state"),
        clusters: vec!["ci".into()],
        // In-process and never restarted: nothing to keep across a restart.
        persist: false,
        spire_crd: true,
        nodes: NodeConfig {
            image: NodeImage::default(),
            boot,
            idle: Duration::from_secs(1),
            max_nodes: 10,
        },
    })
    .await
    .unwrap();
    let client = tenantci_core::kube_client::from_kubeconfig(
        &handle.info.clusters[0].tenant_admin_kubeconfig,
    )
    .await
    .unwrap();
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let x = ExecutorSettings::with_images(
        format!("gitea/runner@sha256:{}", "a".repeat(64)),
        format!("tenantci@sha256:{}", "b".repeat(64)),
    );
    if warm {
        let p = tenantci_dispatch::backend::pod::pause::prewarm_spec(&x, NAMESPACE, 1);
        prewarm::apply(&client, &p, false).await.unwrap();
    }
    let pause = ListParams::default().labels("app.kubernetes.io/name=tenantci-pause");
    let mut out = Vec::new();
    for task in 1..=runs as i64 {
        if warm {
            until(|| async { pods.list(&pause).await.unwrap().items.iter().any(running) }).await;
        } else {
            until(|| async {
                nodes
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
            })
            .await;
        }
        let s = spec(task, &x);
        let pp = PostParams::default();
        secrets
            .create(&pp, &manifest::desired_secret(&s, b"{}"))
            .await
            .unwrap();
        let started = Instant::now();
        pods.create(&pp, &manifest::desired_pod(&s)).await.unwrap();
        let name = manifest::object_name(TaskId::new(task));
        await_condition(pods.clone(), &name, conditions::is_pod_running())
            .await
            .unwrap();
        out.push(started.elapsed().as_secs_f64());
        let dp = DeleteParams::default();
        pods.delete(&name, &dp).await.unwrap();
        secrets.delete(&name, &dp).await.unwrap();
        until(|| async { pods.get_opt(&name).await.unwrap().is_none() }).await;
    }
    handle.shutdown().await;
    out
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[s.len() / 2]
}

fn max(v: &[f64]) -> f64 {
    v.iter().cloned().fold(0.0, f64::max)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let runs: usize = env("RUNS", 5);
    let boot = Duration::from_secs_f64(env("BOOT", 4.0));
    let cold = starts(false, runs, boot).await;
    let warm = starts(true, runs, boot).await;
    eprintln!("cold {cold:?}\nwarm {warm:?}");
    let row = |what: &str, v: &[f64]| {
        format!(
            "| {what} | {runs} | {:.0} | {:.0} | {:.2}x |\n",
            median(v) * 1000.0,
            max(v) * 1000.0,
            median(v) / boot.as_secs_f64()
        )
    };
    let doc = format!(
        "## Executor Pods: warm against cold start\n\n\
         `crates/tenantci-bench/src/bin/bench_executor_start.rs` (`scripts/bench.sh executor-start`): the dispatcher's own \
         executor Pod (`manifest::desired_pod`, default config: runner 1800m / 1728Mi plus the 10m / 32Mi \
         executor-proxy sidecar, one per 2-vCPU node) created on `tenantci sim` with a {:.0} s node boot, \
         {runs} times cold (no node up) and {runs} times warm (one pause pod sized by `tenant prewarm \
         --dispatch-config`'s `prewarm_spec` holds a booted node), in one process. Start latency is \
         create -> Running as a client sees it.\n\n\
         | start | runs | p50 (ms) | max (ms) | p50 / node boot |\n\
         |---|---:|---:|---:|---:|\n{}{}\n\
         Warm starts {:.0}x sooner than cold at the median (goal: at least 4x at a 4 s boot). A warm \
         executor preempts the pause pod (priority -10) at once and runs on its node; the pause \
         Deployment's replacement rents the next node in the background, so the next executor is warm \
         again once that node has booted. The simulator pulls no image and starts no container \
         (Running = bound to a Ready node), so both figures leave out the image pull, which a warm \
         node saves only when it pulled the executor image before (a pause pod does not).\n",
        boot.as_secs_f64(),
        row("cold", &cold),
        row("warm", &warm),
        median(&cold) / median(&warm).max(1e-6),
    );
    print!("{doc}");
    std::fs::create_dir_all("docs/benchmarks").unwrap();
    std::fs::write("docs/benchmarks/executor-start.md", doc).unwrap();
}
