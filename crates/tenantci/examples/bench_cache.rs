//! Cache benchmark (issue 29): a restore of MIB MiB through tenantci (the executor's
//! `tenantci executor-proxy` -> the cache on the facade's HTTPS listener -> a directory store)
//! against reading the same bytes from that directory directly, in one run, rotating which
//! goes first; a third path, the cache's HTTPS listener without the proxy, shows what each
//! hop costs; then four executors (four proxies) restoring at once, with the peak resident
//! set (VmHWM) of the process serving the cache.
//!
//! The cache runs in a child process of its own (this example, `BENCH_CACHE_SERVE=DIR`): the
//! dispatcher's cache routes (`cache::protocol::router`) over the facade's transport
//! (`forge::gitea::facade::spawn_router`, TLS), without the dispatcher's other parts (NATS,
//! the apiserver client), so its RSS is what the cache's streams cost.
//!
//! Prints Markdown on stdout, progress on stderr; `scripts/bench-cache.sh` writes it into
//! docs/benchmarks/cache.md.
//!
//! Usage: bench_cache TENANTCI_BIN [ROUNDS=3] [MIB=200]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tenantci_dispatch::cache::{Cache, grant, protocol, settings};
use tenantci_dispatch::facade::capability::CapabilityKey;
use tenantci_testkit::cache::RawCache;
use tenantci_testkit::process::{Process, first_line, peak_rss_kib};

const REPOSITORY: &str = "bench/repo";
/// The job's `ACTIONS_RUNTIME_TOKEN`, which every cache call but the download carries.
const RUNTIME_TOKEN: &str = "bench-runtime-token";
const CHUNK: usize = 1 << 20;

fn progress(msg: &str) {
    eprintln!("bench_cache: {msg}");
}

/// Child mode: serve the cache over `dir` with TLS from `dir/../{cert,key}.pem`.
async fn serve(dir: PathBuf) {
    let key_hex = std::env::var("BENCH_CACHE_KEY").unwrap();
    let key = CapabilityKey::from_bytes(&hex::decode(key_hex).unwrap()).unwrap();
    let cache = Cache::open(
        &settings::Cache::in_dir(&dir),
        key,
        Arc::new(tenantci_dispatch::metrics::Metrics::default()),
    )
    .unwrap();
    let parent = dir.parent().unwrap();
    let tls = tenantci_core::forge::gitea::facade::tls_config(
        &std::fs::read_to_string(parent.join("cert.pem")).unwrap(),
        &std::fs::read_to_string(parent.join("key.pem")).unwrap(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle =
        tenantci_core::forge::gitea::facade::spawn_router(listener, tls, protocol::router(cache))
            .unwrap();
    println!("listening {}", handle.local_addr);
    std::future::pending::<()>().await;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Saves `mib` MiB under `key` through `api` (one PATCH, streamed).
async fn save(http: &reqwest::Client, api: &str, key: &str, mib: usize) {
    let body = futures::stream::iter(0..mib)
        .map(|i| Ok::<_, std::io::Error>(vec![(i % 251) as u8; CHUNK]));
    raw(http, api)
        .save(key, (mib << 20) as u64, reqwest::Body::wrap_stream(body))
        .await;
}

/// Restores `key` through `api` as the toolkit does (lookup, then a GET of the location);
/// seconds and bytes.
async fn restore(http: &reqwest::Client, api: &str, key: &str) -> (f64, u64) {
    let start = Instant::now();
    let hit: Value = raw(http, api).lookup(key).await.json().await.unwrap();
    let mut body = http
        .get(hit["archiveLocation"].as_str().expect("a hit"))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        n += chunk.unwrap().len() as u64;
    }
    (start.elapsed().as_secs_f64(), n)
}

fn raw(http: &reqwest::Client, api: &str) -> RawCache {
    RawCache {
        http: http.clone(),
        api: api.to_string(),
        token: RUNTIME_TOKEN.into(),
    }
}

/// The grant a task of [`REPOSITORY`] on its default branch gets, valid for an hour.
fn bench_grant(key: &CapabilityKey) -> String {
    let context = serde_json::json!({
        "repository": REPOSITORY,
        "ref": "refs/heads/main",
        "gitea_runtime_token": RUNTIME_TOKEN,
    });
    let task = tenantci_core::forge::gitea::proto::Task {
        id: 1,
        context: Some(tenantci_core::forge::gitea::json::struct_from_json(
            context.as_object().unwrap().clone(),
        )),
        ..Default::default()
    };
    let expires = time::OffsetDateTime::now_utc().unix_timestamp() + 3600;
    grant::mint(key, 1, 1, expires, &grant::task_cache(&task).unwrap())
}

/// Reads every part file under `dir` (the same bytes, straight from the storage).
async fn read_store(dir: &Path) -> (f64, u64) {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains("/parts/") {
                files.push(p);
            }
        }
    }
    let start = Instant::now();
    let mut n = 0u64;
    let mut buf = vec![0u8; 256 << 10];
    for f in files {
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::File::open(f).await.unwrap();
        loop {
            let got = file.read(&mut buf).await.unwrap();
            if got == 0 {
                break;
            }
            n += got as u64;
        }
    }
    (start.elapsed().as_secs_f64(), n)
}

fn proxy(bin: &str, facade: &str, ca: &Path) -> (Process, String) {
    let mut p = Process::spawn(
        Command::new(bin)
            .args([
                "executor-proxy",
                "--listen",
                "127.0.0.1:0",
                "--facade-url",
                facade,
            ])
            .arg("--facade-ca")
            .arg(ca)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let line = first_line(p.child().stdout.take().unwrap(), "executor-proxy");
    let addr = line.strip_prefix("listening ").unwrap().to_string();
    (p, addr)
}

#[tokio::main]
async fn main() {
    if let Some(dir) = std::env::var_os("BENCH_CACHE_SERVE") {
        return serve(PathBuf::from(dir)).await;
    }
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .expect("usage: bench_cache TENANTCI_BIN [ROUNDS] [MIB]");
    let rounds: usize = args.get(2).map_or(3, |a| a.parse().unwrap());
    let mib: usize = args.get(3).map_or(200, |a| a.parse().unwrap());

    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let ca = tenantci_core::pki::CertificateAuthority::generate(
        "bench facade CA",
        Duration::from_secs(3600),
    )
    .unwrap();
    let leaf = tenantci_core::pki::issue::server_cert(
        &ca,
        "facade",
        &["127.0.0.1".into()],
        Duration::from_secs(3600),
    )
    .unwrap();
    std::fs::write(work.path().join("cert.pem"), &leaf.cert_pem).unwrap();
    std::fs::write(work.path().join("key.pem"), &leaf.key_pem).unwrap();
    let ca_file = work.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let key = CapabilityKey::generate();
    let mut server = Process::spawn(
        Command::new(std::env::current_exe().unwrap())
            .env("BENCH_CACHE_SERVE", &store)
            .env("BENCH_CACHE_KEY", hex::encode(key.as_bytes()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let line = first_line(server.child().stdout.take().unwrap(), "the cache server");
    let facade = format!("https://{}", line.strip_prefix("listening ").unwrap());
    let g = bench_grant(&key);
    let mut proxies: Vec<(Process, String)> =
        (0..4).map(|_| proxy(bin, &facade, &ca_file)).collect();
    let apis: Vec<String> = proxies
        .iter()
        .map(|(_, a)| format!("{a}{}/{g}/_apis/artifactcache", protocol::PREFIX))
        .collect();
    let http = reqwest::Client::new();
    // The same restore with the job's hop left out: straight to the cache over TLS, HTTP/1.1
    // as the proxy's cache road speaks it.
    let https = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .http1_only()
        .build()
        .unwrap();
    let facade_api = format!("{facade}{}/{g}/_apis/artifactcache", protocol::PREFIX);
    progress(&format!("saving {mib} MiB"));
    save(&http, &apis[0], "bench", mib).await;
    let idle_rss = peak_rss_kib(server.pid());

    // Warm-up each (page cache, connections), then rounds alternating the order.
    read_store(&store).await;
    restore(&http, &apis[0], "bench").await;
    restore(&https, &facade_api, "bench").await;
    // One list of timings per path: 0 the directory, 1 through the proxy, 2 the cache alone.
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        progress(&format!("round {}/{rounds}", round + 1));
        for i in 0..3 {
            let path = (round + i) % 3;
            let (secs, bytes) = match path {
                0 => read_store(&store).await,
                1 => restore(&http, &apis[0], "bench").await,
                _ => restore(&https, &facade_api, "bench").await,
            };
            assert_eq!(bytes, (mib << 20) as u64);
            times[path].push(secs);
        }
    }
    progress("four executors at once");
    let start = Instant::now();
    let all = futures::future::join_all(apis.iter().map(|api| {
        let http = reqwest::Client::new();
        let api = api.clone();
        async move { restore(&http, &api, "bench").await }
    }))
    .await;
    let four = start.elapsed().as_secs_f64();
    assert!(all.iter().all(|(_, n)| *n == (mib << 20) as u64));
    let peak_rss = peak_rss_kib(server.pid());
    for (p, _) in &mut proxies {
        p.terminate(Duration::from_secs(10));
    }
    server.kill();

    report(rounds, mib, times, four, idle_rss, peak_rss);
}

/// The Markdown table: per path (0 the directory, 1 through the proxy, 2 the cache alone) the
/// median restore, then the four-at-once line with the cache server's RSS (KiB in).
fn report(
    rounds: usize,
    mib: usize,
    times: [Vec<f64>; 3],
    four: f64,
    idle_rss: u64,
    peak_rss: u64,
) {
    let [direct, through, alone] = times;
    let (d, t, c) = (median(direct), median(through), median(alone));
    let (d_rate, t_rate, c_rate) = (mib as f64 / d, mib as f64 / t, mib as f64 / c);
    println!("| path | median of {rounds} restores of {mib} MiB (s) | MiB/s | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| read from the cache directory directly (baseline) | {d:.3} | {d_rate:.0} | 1.00x |"
    );
    println!(
        "| through `executor-proxy` and the cache (HTTPS) | {t:.3} | {t_rate:.0} | **{:.2}x** |",
        t_rate / d_rate
    );
    println!(
        "| the cache's HTTPS listener alone, no proxy (one hop) | {c:.3} | {c_rate:.0} | {:.2}x |",
        c_rate / d_rate
    );
    println!();
    println!(
        "Four executors restoring {mib} MiB each at once: {four:.2} s ({:.0} MiB/s together). \
         Peak RSS of the process serving the cache: {:.1} MiB after the save, **{:.1} MiB** after the four parallel restores.",
        (4 * mib) as f64 / four,
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );
}
