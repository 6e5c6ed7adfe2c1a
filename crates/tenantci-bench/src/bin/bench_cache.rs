//! Cache benchmark (issue 29): a restore of MIB MiB through tenantci (the executor's
//! `tenantci executor-proxy` -> the cache on the facade's HTTPS listener -> a directory store)
//! against reading the same bytes from that directory directly, in one run, rotating which
//! goes first; a third path, the cache's HTTPS listener without the proxy, shows what each
//! hop costs; then four executors (four proxies) restoring at once, with the peak resident
//! set (VmHWM) of the process serving the cache.
//!
//! The cache runs in a child process of its own (this program, `BENCH_CACHE_SERVE=DIR`): the
//! dispatcher's cache routes (`cache::protocol::router`) over the facade's transport
//! (`forge::gitea::facade::spawn_router`, TLS), without the dispatcher's other parts (NATS,
//! the apiserver client), so its RSS is what the cache's streams cost.
//!
//! With `BENCH_CACHE_MOTO=<moto_server>` (scripts/bench-cache.sh sets it), the same restore
//! from an S3 bucket (moto, on loopback): the entry saved in the toolkit's 32 MiB ranges, then
//! read with `cache.s3_direct_downloads` (a lookup through the proxy, then the presigned GET
//! of the bucket) and without it (streamed by the cache), against the presigned GET alone
//! (reading the bytes from the storage directly).
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
use tenantci_dispatch::capability::CapabilityKey;
use tenantci_dispatch::task_id::TaskId;
use tenantci_testkit::cache::RawCache;
use tenantci_testkit::process::{Process, first_line, peak_rss_kib};

const REPOSITORY: &str = "bench/repo";
/// The job's `ACTIONS_RUNTIME_TOKEN`, which every cache call but the download carries.
const RUNTIME_TOKEN: &str = "bench-runtime-token";
const CHUNK: usize = 1 << 20;

fn progress(msg: &str) {
    eprintln!("bench_cache: {msg}");
}

/// The S3 bucket the S3 rows use, at moto.
const BUCKET: &str = "bench";

/// Child mode: serve the cache over `dir` (or, with `BENCH_CACHE_S3=ENDPOINT`, the bucket
/// there; `BENCH_CACHE_S3_DIRECT=1` for direct downloads) with TLS from
/// `dir/../{cert,key}.pem`.
async fn serve(dir: PathBuf) {
    let key_hex = std::env::var("BENCH_CACHE_KEY").unwrap();
    let key = CapabilityKey::from_bytes(&hex::decode(key_hex).unwrap()).unwrap();
    let mut store = settings::CacheSettings::in_dir(&dir);
    if let Ok(endpoint) = std::env::var("BENCH_CACHE_S3") {
        store.dir = None;
        store.s3_bucket = Some(BUCKET.into());
        store.s3_endpoint = Some(endpoint);
        store.s3_region = Some("us-east-1".into());
        store.s3_direct_downloads = std::env::var_os("BENCH_CACHE_S3_DIRECT").is_some();
    }
    let cache = Cache::open(
        &store,
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
    let n = fetch(http, &location(http, api, key).await).await;
    (start.elapsed().as_secs_f64(), n)
}

/// The lookup's `archiveLocation` of `key`.
async fn location(http: &reqwest::Client, api: &str, key: &str) -> String {
    let hit: Value = raw(http, api).lookup(key).await.json().await.unwrap();
    hit["archiveLocation"].as_str().expect("a hit").to_string()
}

/// GETs `url` to its end; the bytes read.
async fn fetch(http: &reqwest::Client, url: &str) -> u64 {
    let resp = http.get(url).send().await.unwrap();
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    let mut body = resp.bytes_stream();
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        n += chunk.unwrap().len() as u64;
    }
    n
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
    grant::mint(
        key,
        TaskId::new(1),
        1,
        expires,
        &grant::task_cache(&task).unwrap(),
    )
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
    let (ca, ca_file) = write_facade_pki(work.path());
    let key = CapabilityKey::generate();
    let (mut server, facade) = spawn_cache(&store, &key, None);
    let g = bench_grant(&key);
    let mut proxies: Vec<(Process, String)> =
        (0..4).map(|_| proxy(bin, &facade, &ca_file)).collect();
    let apis: Vec<String> = proxies
        .iter()
        .map(|(_, a)| format!("{a}{}/{g}/_apis/artifactcache", protocol::PREFIX))
        .collect();
    let http = reqwest::Client::new();
    let https = direct_client(&ca);
    let facade_api = format!("{facade}{}/{g}/_apis/artifactcache", protocol::PREFIX);
    progress(&format!("saving {mib} MiB"));
    save(&http, &apis[0], "bench", mib).await;
    let idle_rss = peak_rss_kib(server.pid());

    let times = timed_rounds(&store, &http, &apis[0], &https, &facade_api, rounds, mib).await;
    let four = restore_four_at_once(&apis, mib).await;
    let peak_rss = peak_rss_kib(server.pid());
    for (p, _) in &mut proxies {
        p.terminate(Duration::from_secs(10));
    }
    server.kill();

    report(rounds, mib, times, four, idle_rss, peak_rss);
    if let Some(moto) = std::env::var_os("BENCH_CACHE_MOTO") {
        let s3 = S3Bench {
            bin,
            moto: PathBuf::from(moto),
            work: work.path(),
            ca_file: &ca_file,
            key: &key,
            rounds,
            mib,
        };
        s3.run().await;
    }
}

/// Setup step: a CA and the facade's server certificate under `work`; the CA and its file.
fn write_facade_pki(work: &Path) -> (tenantci_core::pki::CertificateAuthority, PathBuf) {
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
    std::fs::write(work.join("cert.pem"), &leaf.cert_pem).unwrap();
    std::fs::write(work.join("key.pem"), &leaf.key_pem).unwrap();
    let ca_file = work.join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    (ca, ca_file)
}

/// Setup step: the client for the restore with the job's hop left out.
fn direct_client(ca: &tenantci_core::pki::CertificateAuthority) -> reqwest::Client {
    // The same restore with the job's hop left out: straight to the cache over TLS, HTTP/1.1
    // as the proxy's cache road speaks it.
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .http1_only()
        .build()
        .unwrap()
}

/// Measuring step: a warm-up of each path, then `rounds` rounds rotating their order.
async fn timed_rounds(
    store: &Path,
    http: &reqwest::Client,
    api: &str,
    https: &reqwest::Client,
    facade_api: &str,
    rounds: usize,
    mib: usize,
) -> [Vec<f64>; 3] {
    // Warm-up each (page cache, connections), then rounds alternating the order.
    read_store(store).await;
    restore(http, api, "bench").await;
    restore(https, facade_api, "bench").await;
    // One list of timings per path: 0 the directory, 1 through the proxy, 2 the cache alone.
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        progress(&format!("round {}/{rounds}", round + 1));
        for i in 0..3 {
            let path = (round + i) % 3;
            let (secs, bytes) = match path {
                0 => read_store(store).await,
                1 => restore(http, api, "bench").await,
                _ => restore(https, facade_api, "bench").await,
            };
            assert_eq!(bytes, (mib << 20) as u64);
            times[path].push(secs);
        }
    }
    times
}

/// Measuring step: every proxy restoring at once; the seconds it took.
async fn restore_four_at_once(apis: &[String], mib: usize) -> f64 {
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
    four
}

/// A cache server child over `store` (or the bucket at `s3`'s endpoint, with direct
/// downloads when its flag is set); the process and its HTTPS URL.
fn spawn_cache(store: &Path, key: &CapabilityKey, s3: Option<(&str, bool)>) -> (Process, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env("BENCH_CACHE_SERVE", store)
        .env("BENCH_CACHE_KEY", hex::encode(key.as_bytes()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some((endpoint, direct)) = s3 {
        // moto takes any credentials.
        cmd.env("BENCH_CACHE_S3", endpoint)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench");
        if direct {
            cmd.env("BENCH_CACHE_S3_DIRECT", "1");
        }
    }
    let mut server = Process::spawn(&mut cmd);
    let line = first_line(server.child().stdout.take().unwrap(), "the cache server");
    let facade = format!("https://{}", line.strip_prefix("listening ").unwrap());
    (server, facade)
}

/// The S3 rows: one entry in a moto bucket, read three ways.
struct S3Bench<'a> {
    bin: &'a str,
    moto: PathBuf,
    work: &'a Path,
    ca_file: &'a Path,
    key: &'a CapabilityKey,
    rounds: usize,
    mib: usize,
}

impl S3Bench<'_> {
    async fn run(&self) {
        let moto = tenantci_testkit::moto::Moto::start(&self.moto).await;
        moto.bucket(BUCKET).await;
        let endpoint = moto.url.clone();
        let http = reqwest::Client::new();
        let store = self.work.join("store-s3");
        let g = bench_grant(self.key);
        let api = |facade: &str| {
            let (p, a) = proxy(self.bin, facade, self.ca_file);
            (
                p,
                format!("{a}{}/{g}/_apis/artifactcache", protocol::PREFIX),
            )
        };
        let (mut direct, direct_facade) = spawn_cache(&store, self.key, Some((&endpoint, true)));
        let (mut streamed, streamed_facade) =
            spawn_cache(&store, self.key, Some((&endpoint, false)));
        let (mut direct_proxy, direct_api) = api(&direct_facade);
        let (mut streamed_proxy, streamed_api) = api(&streamed_facade);

        progress(&format!("S3: saving {} MiB in 32 MiB ranges", self.mib));
        let commit = save_in_ranges(&http, &direct_api, "bench-s3", self.mib).await;
        let presigned = location(&http, &direct_api, "bench-s3").await;
        fetch(&http, &presigned).await;
        // 0 the bucket directly, 1 direct downloads, 2 streamed by the cache.
        let mut times: [Vec<f64>; 3] = Default::default();
        for round in 0..self.rounds {
            progress(&format!("S3 round {}/{}", round + 1, self.rounds));
            for i in 0..3 {
                let path = (round + i) % 3;
                let (secs, bytes) = match path {
                    0 => {
                        let start = Instant::now();
                        let n = fetch(&http, &presigned).await;
                        (start.elapsed().as_secs_f64(), n)
                    }
                    1 => restore(&http, &direct_api, "bench-s3").await,
                    _ => restore(&http, &streamed_api, "bench-s3").await,
                };
                assert_eq!(bytes, (self.mib << 20) as u64);
                times[path].push(secs);
            }
        }
        for p in [&mut direct_proxy, &mut streamed_proxy] {
            p.terminate(Duration::from_secs(10));
        }
        direct.kill();
        streamed.kill();
        drop(moto);
        report_s3(self.rounds, self.mib, times, commit);
    }
}

/// Saves `mib` MiB under `key` as the toolkit does: 32 MiB ranges (the last shorter), then the
/// commit; the commit's seconds (it joins the ranges with direct downloads on).
async fn save_in_ranges(http: &reqwest::Client, api: &str, key: &str, mib: usize) -> f64 {
    const RANGE: usize = 32;
    let raw = raw(http, api);
    let size = (mib << 20) as u64;
    let id = raw.reserved(key, size).await;
    for first in (0..mib).step_by(RANGE) {
        let n = RANGE.min(mib - first);
        let start = (first << 20) as u64;
        let body = vec![(first % 251) as u8; n << 20];
        let resp = raw
            .patch(id, start, start + (n << 20) as u64 - 1, body)
            .await;
        assert_eq!(resp.status(), 200);
    }
    let start = Instant::now();
    assert_eq!(raw.commit(id, size).await.status(), 200);
    start.elapsed().as_secs_f64()
}

fn report_s3(rounds: usize, mib: usize, times: [Vec<f64>; 3], commit: f64) {
    let [bucket, direct, streamed] = times.map(median);
    let rate = |secs: f64| mib as f64 / secs;
    let base = rate(bucket);
    println!();
    println!(
        "| path, S3 bucket (moto) | median of {rounds} restores of {mib} MiB (s) | MiB/s | ratio |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| GET of the entry's object from the bucket (baseline) | {bucket:.3} | {base:.0} | 1.00x |"
    );
    println!(
        "| `s3_direct_downloads`: lookup through `executor-proxy`, then the presigned GET | {direct:.3} | {:.0} | **{:.2}x** |",
        rate(direct),
        rate(direct) / base
    );
    println!(
        "| streamed by the cache through `executor-proxy` (HTTPS) | {streamed:.3} | {:.0} | {:.2}x |",
        rate(streamed),
        rate(streamed) / base
    );
    println!();
    println!(
        "The commit that joined the {mib} MiB entry's {} ranges into one object took {commit:.2} s.",
        mib.div_ceil(32)
    );
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
