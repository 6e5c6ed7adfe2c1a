//! Passthrough benchmark (issue 29): an artifact upload of MIB MiB straight to the Gitea double
//! (the baseline) against the same upload through `tenantci executor-proxy --gitea-url`, in
//! one run, alternating which goes first in each round. The double hashes the body as it
//! streams (`gitea::web`), so both paths end in the same work; the proxy's cost is its copy.
//! Also the proxy's peak resident set (VmHWM) before and after: streaming keeps it flat.
//!
//! Prints Markdown on stdout, progress on stderr; `scripts/bench-passthrough.sh` writes it into
//! docs/benchmarks/passthrough.md.
//!
//! Usage: bench_passthrough TENANTCI_BIN [ROUNDS=5] [MIB=64]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tenantci_core::forge::gitea::json::struct_to_json;
use tenantci_core::forge::gitea::proto::RegisterRequest;
use tenantci_core::forge::gitea::{ClientConfig, Credentials, RunnerClient, TasksVersion};
use tenantci_core::pki::CertificateAuthority;
use tenantci_sim::gitea::{GiteaDouble, GiteaHandle, JobSpec};
use tenantci_testkit::process::{Process, first_line, peak_rss_kib};

const CHUNK: usize = 256 << 10;

fn progress(msg: &str) {
    eprintln!("bench_passthrough: {msg}");
}

/// Uploads `mib` MiB to `base`'s artifact sink; seconds taken.
async fn upload(http: &reqwest::Client, base: &str, token: &str, mib: usize) -> f64 {
    let chunks = (mib << 20) / CHUNK;
    let body = futures::stream::iter(0..chunks)
        .map(|i| Ok::<_, std::io::Error>(vec![(i % 251) as u8; CHUNK]));
    let start = Instant::now();
    let answer: Value = http
        .put(format!(
            "{base}/api/actions_pipeline/_apis/pipelines/workflows/1/artifacts/bench?itemPath=bench/blob"
        ))
        .header("authorization", format!("Bearer {token}"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .expect("the upload")
        .json()
        .await
        .expect("the sink's answer");
    let took = start.elapsed().as_secs_f64();
    assert_eq!(answer["bytes"], (chunks * CHUNK) as u64, "{answer}");
    took
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: bench_passthrough TENANTCI_BIN [ROUNDS] [MIB]");
    let rounds: usize = args.get(2).map_or(5, |a| a.parse().unwrap());
    let mib: usize = args.get(3).map_or(64, |a| a.parse().unwrap());

    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let gitea = GiteaDouble::start(listen).await.expect("the Gitea double");
    let token = live_task_token(&gitea).await;

    let dir = tempfile::tempdir().unwrap();
    let (mut proxy, via) = spawn_proxy(bin, dir.path(), &gitea.base_url);
    let idle_rss = peak_rss_kib(proxy.pid());

    let (direct, proxied) = timed_uploads(&gitea.base_url, &via, &token, rounds, mib).await;
    let peak_rss = peak_rss_kib(proxy.pid());
    proxy.terminate(Duration::from_secs(10));

    print_report(rounds, mib, direct, proxied, idle_rss, peak_rss);
}

/// Setup step: registers a runner and fetches a live task; its runtime token.
async fn live_task_token(gitea: &GiteaHandle) -> String {
    // A live task, for its runtime token (the sink takes live job tokens only).
    let client = RunnerClient::new(ClientConfig::new(&gitea.base_url)).unwrap();
    let runner = client
        .register(&RegisterRequest {
            name: "bench".into(),
            token: gitea.registration_token.clone(),
            labels: vec!["bench".into()],
            ..Default::default()
        })
        .await
        .expect("register");
    let client = client.with_credentials(Credentials::from_runner(&runner));
    gitea.double.enqueue(JobSpec {
        name: "bench".into(),
        runs_on: vec!["bench".into()],
        workflow_payload: "jobs: {}\n".into(),
        ..Default::default()
    });
    let task = client
        .poll(&mut TasksVersion::default())
        .await
        .expect("fetch")
        .expect("the task");
    let context = struct_to_json(task.context.as_ref().unwrap());
    context["gitea_runtime_token"].as_str().unwrap().to_string()
}

/// Setup step: `tenantci executor-proxy` in front of `gitea_url`; the process and its address.
fn spawn_proxy(bin: &str, dir: &Path, gitea_url: &str) -> (Process, String) {
    let ca = CertificateAuthority::generate("unused facade CA", Duration::from_secs(3600)).unwrap();
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let mut proxy = Process::spawn(
        Command::new(bin)
            .args(["executor-proxy", "--listen", "127.0.0.1:0"])
            .args(["--facade-url", "https://127.0.0.1:9"])
            .arg("--facade-ca")
            .arg(&ca_file)
            .args(["--gitea-url", gitea_url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let line = first_line(proxy.child().stdout.take().unwrap(), "executor-proxy");
    let via = line
        .strip_prefix("listening ")
        .expect("the proxy's address")
        .to_string();
    (proxy, via)
}

/// Measuring step: a warm-up each, then `rounds` rounds alternating the order.
async fn timed_uploads(
    base: &str,
    via: &str,
    token: &str,
    rounds: usize,
    mib: usize,
) -> (Vec<f64>, Vec<f64>) {
    let http = reqwest::Client::new();
    // One warm-up each: connections, allocator.
    upload(&http, base, token, 8).await;
    upload(&http, via, token, 8).await;
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        progress(&format!("round {}/{rounds}", round + 1));
        if round % 2 == 0 {
            direct.push(upload(&http, base, token, mib).await);
            proxied.push(upload(&http, via, token, mib).await);
        } else {
            proxied.push(upload(&http, via, token, mib).await);
            direct.push(upload(&http, base, token, mib).await);
        }
    }
    (direct, proxied)
}

/// Report step: the Markdown table and the proxy's peak RSS.
fn print_report(
    rounds: usize,
    mib: usize,
    direct: Vec<f64>,
    proxied: Vec<f64>,
    idle_rss: u64,
    peak_rss: u64,
) {
    let (d, p) = (median(direct), median(proxied));
    let (d_rate, p_rate) = (mib as f64 / d, mib as f64 / p);
    println!("| path | median of {rounds} uploads of {mib} MiB (s) | MiB/s | ratio |");
    println!("|---|---:|---:|---:|");
    println!("| straight to the Gitea double (baseline) | {d:.3} | {d_rate:.0} | 1.00x |");
    println!(
        "| through `executor-proxy --gitea-url` | {p:.3} | {p_rate:.0} | **{:.2}x** |",
        p_rate / d_rate
    );
    println!();
    println!(
        "The proxy's peak RSS: {:.1} MiB before the uploads, {:.1} MiB after {} uploads of {mib} MiB.",
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0,
        rounds + 1
    );
}
