//! Front benchmark (issue 44): the runner's requests straight to the tenant apiserver (the
//! baseline, as on the gateway host) against the same requests through `front connect` and
//! `front serve`, side by side in one run, alternating which goes first in each round:
//! a large LIST (MiB/s), one small GET at a time on a kept-alive connection (p50, and what the
//! front adds to it), a watch streaming OBJECTS events (replayed from the apiserver's history),
//! and the front's resident memory with 500 open tunnels.
//!
//! Prints Markdown on stdout, progress on stderr; `scripts/bench-front.sh` writes it into
//! docs/benchmarks/front.md.
//!
//! Usage: bench_front TENANTCI_BIN [ROUNDS=11] [OBJECTS=6000]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::Value;
use tenantci_testkit::kube::kube_client;
use tenantci_testkit::process::{Process, first_line, peak_rss_kib};
use tenantci_testkit::sim::SimProcess;

const NS: &str = "gitlab-runner";
const TUNNELS: usize = 500;

fn progress(msg: &str) {
    eprintln!("bench_front: {msg}");
}

fn run(cmd: &mut Command) {
    let o = cmd.output().expect("run tenantci");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `tenantci ARGS` as a server, after its JSON ready line.
fn server(bin: &str, args: &[&str]) -> (Process, Value) {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut p = Process::spawn(&mut cmd);
    let line = first_line(p.child().stdout.take().unwrap(), args[1]);
    (p, serde_json::from_str(&line).unwrap())
}

/// The runner's credential as reqwest presents it, trusting the apiserver's serving CA only.
fn client(creds: &Path) -> reqwest::Client {
    let read = |f: &str| std::fs::read(creds.join(f)).unwrap();
    let mut pem = read("tls.crt");
    pem.extend(read("tls.key"));
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&read("ca.crt")).unwrap())
        .identity(reqwest::Identity::from_pem(&pem).unwrap())
        .build()
        .unwrap()
}

/// Seconds for one LIST of every ConfigMap in the namespace, and its size in bytes.
async fn list(http: &reqwest::Client, base: &str) -> (f64, usize) {
    let start = Instant::now();
    let body = http
        .get(format!("{base}/api/v1/namespaces/{NS}/configmaps"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    (start.elapsed().as_secs_f64(), body.len())
}

/// Latencies of `n` small GETs, one at a time on one kept-alive connection.
async fn gets(http: &reqwest::Client, base: &str, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let r = http
            .get(format!(
                "{base}/api/v1/namespaces/{NS}/configmaps/bench-{}",
                i % 100
            ))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        r.bytes().await.unwrap();
        out.push(start.elapsed().as_secs_f64());
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Seconds to replay `n` ADDED events from `rv` (the store's history: the events stream as
/// fast as the apiserver encodes them and the path carries them).
async fn replay(http: &reqwest::Client, base: &str, rv: &str, n: usize) -> f64 {
    let url = format!("{base}/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}");
    let start = Instant::now();
    let mut body = http.get(url).send().await.unwrap().bytes_stream();
    let (mut seen, mut buf) = (0, Vec::new());
    while seen < n {
        buf.extend_from_slice(&body.next().await.expect("the watch ended").unwrap());
        while let Some(at) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=at).collect();
            seen += usize::from(line.windows(7).any(|w| w == b"\"ADDED\""));
        }
    }
    start.elapsed().as_secs_f64()
}

fn config_map(name: &str, bytes: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"payload": "x".repeat(bytes)}
    }))
    .unwrap()
}

/// The front's resident set with no tunnel, then with `TUNNELS` open (each after one GET).
async fn memory(front_pid: u32, creds: &Path, base: &str) -> (u64, u64, u64) {
    let idle = current_rss_kib(front_pid);
    let mut held = Vec::new();
    for _ in 0..TUNNELS {
        let c = client(creds);
        let r = c
            .get(format!("{base}/api/v1/namespaces/{NS}/configmaps/bench-0"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        r.bytes().await.unwrap();
        held.push(c);
    }
    let open = current_rss_kib(front_pid);
    drop(held);
    (idle, open, peak_rss_kib(front_pid))
}

fn current_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct World {
    _sim: SimProcess,
    _front: Process,
    _connect: Process,
    front_pid: u32,
    creds: std::path::PathBuf,
    direct: String,
    through: String,
    cms: Api<ConfigMap>,
}

/// The runner's credential and RBAC (`bootstrap runner`), the front's files (`front init`),
/// its limits raised for 500 tunnels of one subject from one address (the benchmark's one
/// `front connect` opens them as fast as it can: the per-source rate too); the config's path.
fn prepare(bin: &str, root: &Path, creds: &Path, dir: &Path) -> std::path::PathBuf {
    std::fs::write(root.join("token"), "glrt-bench\n").unwrap();
    run(Command::new(bin)
        .args([
            "bootstrap",
            "runner",
            "--forge",
            "gitlab",
            "--cluster",
            "ci",
            "--gitlab-url",
            "https://gitlab.example.com",
        ])
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--credential-dir")
        .arg(creds)
        .arg("--config")
        .arg(root.join("config.toml"))
        .arg("--runner-token-file")
        .arg(root.join("token")));
    run(Command::new(bin)
        .args([
            "front",
            "init",
            "--cluster",
            "ci",
            "--name",
            "127.0.0.1",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--state-dir")
        .arg(root.join("state")));
    let config = dir.join("front.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text
        .replace("max_per_subject = 256", "max_per_subject = 1024")
        .replace("new_per_second = 200", "new_per_second = 5000")
        .replace(
            "new_per_second_per_source = 50",
            "new_per_second_per_source = 5000",
        );
    assert!(
        text.contains("new_per_second_per_source = 5000"),
        "front init's [limits] changed: {text}"
    );
    std::fs::write(&config, text).unwrap();
    config
}

async fn world(bin: &str, root: &Path) -> World {
    let mut sim_cmd = Command::new(bin);
    sim_cmd.stderr(Stdio::null());
    let sim = SimProcess::start(sim_cmd, &root.join("state"), &["ci"], &[]);
    let creds = root.join("creds");
    let dir = root.join("front");
    let config = prepare(bin, root, &creds, &dir);
    let (front, ready) = server(
        bin,
        &["front", "serve", "--config", config.to_str().unwrap()],
    );
    let bundle = root.join("bundle.json");
    run(Command::new(bin)
        .args([
            "front",
            "bundle",
            "--cluster",
            "ci",
            "--listen",
            "127.0.0.1:0",
            "--front",
            ready["listen"].as_str().unwrap(),
        ])
        .arg("--credential-dir")
        .arg(&creds)
        .arg("--front-ca")
        .arg(dir.join("front-ca.crt"))
        .arg("--out")
        .arg(&bundle));
    // 500 tunnels at once: above `front connect`'s default cap of local connections.
    let (connect, ready) = server(
        bin,
        &[
            "front",
            "connect",
            "--max-connections",
            "1024",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
    );
    let cms: Api<ConfigMap> = Api::namespaced(kube_client(&sim.tenant_admin("ci")).await, NS);
    World {
        front_pid: front.pid(),
        direct: sim.cluster_url("ci"),
        through: format!("https://{}", ready["listen"].as_str().unwrap()),
        _sim: sim,
        _front: front,
        _connect: connect,
        creds,
        cms,
    }
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: bench_front TENANTCI_BIN [ROUNDS] [OBJECTS]")
        .clone();
    let rounds: usize = args.get(2).map_or(11, |a| a.parse().unwrap());
    let objects: usize = args.get(3).map_or(6000, |a| a.parse().unwrap());
    let root = tempfile::tempdir().unwrap();
    let w = world(&bin, root.path()).await;
    progress(&format!("creating {objects} ConfigMaps of 1 KiB"));
    // The watches replay these creates from the store's history.
    let rv = w.cms.list_metadata(&Default::default()).await.unwrap();
    let rv = rv.metadata.resource_version.unwrap();
    for i in 0..objects {
        w.cms
            .create(
                &PostParams::default(),
                &config_map(&format!("bench-{i}"), 1024),
            )
            .await
            .unwrap();
    }
    let (lists, small, watches, size) = measure(&w, rounds, (&rv, objects)).await;
    let (idle, open, peak) = memory(w.front_pid, &w.creds, &w.through).await;
    report(
        rounds,
        size,
        lists,
        small,
        (watches, objects),
        (idle, open, peak),
    );
}

type Pair = [Vec<f64>; 2];

/// Every round: each path's LIST and 200 GETs (which goes first alternates), then one watch
/// round with both open. Round 0 warms up and is not counted.
async fn measure(
    w: &World,
    rounds: usize,
    (rv, events): (&str, usize),
) -> (Pair, Pair, Pair, usize) {
    let (direct, front) = (client(&w.creds), client(&w.creds));
    let (mut lists, mut small, mut watches, mut size) =
        ([vec![], vec![]], [vec![], vec![]], [vec![], vec![]], 0);
    for round in 0..=rounds {
        progress(&format!("round {round} of {rounds} (0 warms up)"));
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for &path in &order {
            let (http, base) = if path == 0 {
                (&direct, &w.direct)
            } else {
                (&front, &w.through)
            };
            let (took, bytes) = list(http, base).await;
            let lat = gets(http, base, 200).await;
            let streamed = replay(http, base, rv, events).await;
            if round > 0 {
                lists[path].push(took);
                small[path].extend(lat);
                watches[path].push(streamed);
                size = bytes;
            }
        }
    }
    (lists, small, watches, size)
}

fn report(
    rounds: usize,
    size: usize,
    lists: [Vec<f64>; 2],
    small: [Vec<f64>; 2],
    (watches, events): ([Vec<f64>; 2], usize),
    mem: (u64, u64, u64),
) {
    let mib = size as f64 / (1 << 20) as f64;
    let l = lists.map(median);
    let p = small.map(median);
    let wt = watches.map(median);
    println!(
        "| measurement (median of {rounds} rounds) | direct (baseline) | through the front | ratio |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| LIST of {:.1} MiB | {:.1} MiB/s | {:.1} MiB/s | **{:.2}x** |",
        mib,
        mib / l[0],
        mib / l[1],
        l[0] / l[1]
    );
    println!(
        "| small GET, one at a time, p50 | {:.3} ms | {:.3} ms | **+{:.3} ms** |",
        p[0] * 1e3,
        p[1] * 1e3,
        (p[1] - p[0]) * 1e3
    );
    println!(
        "| a watch replaying {events} ADDED events of 1 KiB | {:.0} events/s | {:.0} events/s | **{:.2}x** |",
        events as f64 / wt[0],
        events as f64 / wt[1],
        wt[0] / wt[1]
    );
    println!();
    println!(
        "The front's resident set: {:.1} MiB with no tunnel, {:.1} MiB with {TUNNELS} open tunnels ({:.1} KiB per tunnel); peak {:.1} MiB.",
        mem.0 as f64 / 1024.0,
        mem.1 as f64 / 1024.0,
        (mem.1.saturating_sub(mem.0)) as f64 / TUNNELS as f64,
        mem.2 as f64 / 1024.0
    );
}
