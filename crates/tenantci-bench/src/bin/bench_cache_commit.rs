//! Cache commit benchmark (issue 45): commits of the shared cache under concurrency, before
//! and after its commit became atomic, in one run. COMMITTERS uploads are reserved and
//! uploaded (untimed), then committed at once (released together from a barrier); the figure
//! is commit calls answered per second, from the release to the last answer. Two shapes:
//! every upload under one key and version (one may win, the rest are 409) and every upload
//! under a key of its own (all win: what the fix must not slow down).
//!
//! Each side is a cache server child (the `bench_cache` program's serve mode: the
//! dispatcher's cache routes over the facade's TLS transport): BEFORE built from the commit
//! before the fix, AFTER from this tree, each over its own directory (and, with
//! `BENCH_CACHE_MOTO`, its own moto bucket). Rounds alternate which side goes first.
//!
//! Prints Markdown on stdout, progress on stderr; scripts/bench-cache.sh writes it into
//! docs/benchmarks/cache.md.
//!
//! Usage: bench_cache_commit BEFORE_SERVER AFTER_SERVER [ROUNDS=5] [COMMITTERS=20]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenantci_dispatch::cache::{grant, protocol};
use tenantci_dispatch::capability::CapabilityKey;
use tenantci_dispatch::task_id::TaskId;
use tenantci_testkit::cache::RawCache;
use tenantci_testkit::moto::Moto;
use tenantci_testkit::process::{Process, first_line};

const REPOSITORY: &str = "bench/repo";
const RUNTIME_TOKEN: &str = "bench-runtime-token";
/// Bytes per upload: the commit is measured, not the upload.
const SIZE: usize = 1024;

fn progress(msg: &str) {
    eprintln!("bench_cache_commit: {msg}");
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

/// A cache server child (`server`, the bench_cache program) over `store`, or over moto's
/// bucket at `s3`; the process and its HTTPS URL.
fn spawn_cache(
    server: &str,
    store: &Path,
    key: &CapabilityKey,
    s3: Option<&str>,
) -> (Process, String) {
    let mut cmd = Command::new(server);
    cmd.env("BENCH_CACHE_SERVE", store)
        .env("BENCH_CACHE_KEY", hex::encode(key.as_bytes()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(endpoint) = s3 {
        // moto takes any credentials.
        cmd.env("BENCH_CACHE_S3", endpoint)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench");
    }
    let mut p = Process::spawn(&mut cmd);
    let line = first_line(p.child().stdout.take().unwrap(), "the cache server");
    let url = format!("https://{}", line.strip_prefix("listening ").unwrap());
    (p, url)
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    OneKey,
    DistinctKeys,
}

/// One round on `cache`: `n` uploads reserved and uploaded, then committed at once; the
/// seconds from the release to the last answer and how many answered 200.
async fn round(cache: &RawCache, shape: Shape, tag: &str, n: usize) -> (f64, usize) {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let key = match shape {
            Shape::OneKey => format!("{tag}-one"),
            Shape::DistinctKeys => format!("{tag}-{i}"),
        };
        let id = cache.reserved(&key, SIZE as u64).await;
        let put = cache.patch(id, 0, SIZE as u64 - 1, vec![7u8; SIZE]).await;
        assert_eq!(put.status(), 200, "upload of `{key}`");
        ids.push(id);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(n + 1));
    let commits: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let (cache, barrier) = (cache.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                cache.commit(id, SIZE as u64).await.status().as_u16()
            })
        })
        .collect();
    barrier.wait().await;
    let start = Instant::now();
    let mut made = 0;
    for c in commits {
        match c.await.unwrap() {
            200 => made += 1,
            409 => {}
            other => panic!("a commit answered {other}"),
        }
    }
    (start.elapsed().as_secs_f64(), made)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One side's timings and entries made, per shape.
#[derive(Default)]
struct Side {
    secs: [Vec<f64>; 2],
    made: [Vec<usize>; 2],
}

struct Bench {
    https: reqwest::Client,
    grant: String,
    rounds: usize,
    committers: usize,
}

impl Bench {
    /// Both sides, `rounds` times (after one warm-up each), alternating which goes first.
    async fn run(&self, urls: [&str; 2], store: &str) -> [Side; 2] {
        let caches = urls.map(|u| RawCache {
            http: self.https.clone(),
            api: format!("{u}{}/{}/_apis/artifactcache", protocol::PREFIX, self.grant),
            token: RUNTIME_TOKEN.into(),
        });
        let mut sides = [Side::default(), Side::default()];
        for r in 0..=self.rounds {
            progress(&format!("{store}: round {r}/{} (0: warm-up)", self.rounds));
            for k in 0..2 {
                let s = (r + k) % 2;
                for (j, shape) in [Shape::OneKey, Shape::DistinctKeys].into_iter().enumerate() {
                    let tag = format!("s{s}-r{r}-{j}");
                    let (secs, made) = round(&caches[s], shape, &tag, self.committers).await;
                    if r > 0 {
                        sides[s].secs[j].push(secs);
                        sides[s].made[j].push(made);
                    }
                }
            }
        }
        sides
    }

    /// The table's rows of one store.
    fn rows(&self, store: &str, sides: &[Side; 2]) -> String {
        let mut out = String::new();
        for (j, shape) in ["one key", "distinct keys"].into_iter().enumerate() {
            let rate = |s: &Side| self.committers as f64 / median(s.secs[j].clone());
            let made = |s: &Side| {
                let (lo, hi) = (s.made[j].iter().min(), s.made[j].iter().max());
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo == hi => format!("{lo}"),
                    (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
                    _ => "-".into(),
                }
            };
            let (before, after) = (rate(&sides[0]), rate(&sides[1]));
            out.push_str(&format!(
                "| {store}, {shape} | {before:.0} | {after:.0} | **{:.2}x** | {} | {} |\n",
                after / before,
                made(&sides[0]),
                made(&sides[1]),
            ));
        }
        out
    }
}

/// Both servers over directories under `work`, then (with moto) over a bucket each.
async fn measure(b: &Bench, servers: [&str; 2], key: &CapabilityKey, work: &Path) -> String {
    let mut rows = String::new();
    // The serve mode reads its TLS beside its store: both stores are in `work`.
    let store = |i: usize| work.join(format!("store-{i}"));
    let procs: Vec<_> = (0..2)
        .map(|i| spawn_cache(servers[i], &store(i), key, None))
        .collect();
    let sides = b.run([&procs[0].1, &procs[1].1], "directory").await;
    rows.push_str(&b.rows("directory", &sides));
    drop(procs);
    if let Some(moto) = std::env::var_os("BENCH_CACHE_MOTO") {
        let motos = [
            Moto::start(Path::new(&moto)).await,
            Moto::start(Path::new(&moto)).await,
        ];
        for m in &motos {
            m.bucket("bench").await;
        }
        let procs: Vec<_> = (0..2)
            .map(|i| spawn_cache(servers[i], &store(i), key, Some(&motos[i].url)))
            .collect();
        let sides = b.run([&procs[0].1, &procs[1].1], "S3 (moto)").await;
        rows.push_str(&b.rows("S3 bucket (moto)", &sides));
    }
    rows
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_cache_commit BEFORE_SERVER AFTER_SERVER [ROUNDS] [COMMITTERS]";
    let (before, after) = (args.get(1).expect(usage), args.get(2).expect(usage));
    let rounds: usize = args.get(3).map_or(5, |a| a.parse().expect(usage));
    let committers: usize = args.get(4).map_or(20, |a| a.parse().expect(usage));

    let work = tempfile::tempdir().unwrap();
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
    // The serve mode reads its TLS from its store's parent.
    std::fs::write(work.path().join("cert.pem"), &leaf.cert_pem).unwrap();
    std::fs::write(work.path().join("key.pem"), &leaf.key_pem).unwrap();
    let key = CapabilityKey::generate();
    let https = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap())
        .http1_only()
        .build()
        .unwrap();
    let b = Bench {
        https,
        grant: bench_grant(&key),
        rounds,
        committers,
    };
    let rows = measure(&b, [before, after], &key, work.path()).await;
    println!(
        "| store, {committers} commits at once | before: commits/s | after: commits/s | after/before | entries made per round, before | after |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    print!("{rows}");
    println!();
    println!(
        "Median of {rounds} rounds each (after a warm-up), sides alternating; commits/s = {committers} commit calls / seconds from their release to the last answer."
    );
}
