//! Concurrent commits of one key and version (issue 45): twenty jobs of one repository reserve
//! and upload the same key, are held at a barrier, and commit at the same moment. Entries are
//! immutable, so exactly one commit may answer 200 and one manifest exist; the others are 409.
//! Repeated for several rounds, against a directory and against an S3 bucket (moto).

use std::path::Path;
use std::sync::Arc;

use tenantci_testkit::cache::RawCache;
use tenantci_testkit::moto::Moto;

use super::{Job, moto_server, with_cache, with_s3_cache};
use crate::dispatch::harness::World;
use crate::util::scratch;

const COMMITTERS: usize = 20;
const ROUNDS: usize = 4;

/// One round: `COMMITTERS` uploads of `key`, committed together; the bytes the winner uploaded.
async fn commit_together(a: &RawCache, key: &str) -> Vec<u8> {
    let mut ids = Vec::with_capacity(COMMITTERS);
    for n in 0..COMMITTERS {
        let id = a.reserved(key, 3).await;
        assert_eq!(a.patch(id, 0, 2, vec![n as u8; 3]).await.status(), 200);
        ids.push(id);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(COMMITTERS));
    let commits: Vec<_> = ids
        .into_iter()
        .enumerate()
        .map(|(n, id)| {
            let (a, barrier) = (a.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                (n, a.commit(id, 3).await.status().as_u16())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in commits {
        answers.push(c.await.unwrap());
    }
    let won: Vec<usize> = answers
        .iter()
        .filter(|(_, s)| *s == 200)
        .map(|(n, _)| *n)
        .collect();
    let conflicts = answers.iter().filter(|(_, s)| *s == 409).count();
    assert_eq!(
        (won.len(), conflicts),
        (1, COMMITTERS - 1),
        "`{key}`: one commit 200, the rest 409: {answers:?}"
    );
    vec![won[0] as u8; 3]
}

/// Every round: one commit won, one manifest more exists (one per key), and a restore gets
/// the winner's bytes.
async fn rounds(a: &RawCache, manifests: impl AsyncFn() -> usize) {
    for round in 0..ROUNDS {
        let key = format!("race-{round}");
        let winner = commit_together(a, &key).await;
        assert_eq!(
            manifests().await,
            round + 1,
            "one manifest per key, `{key}` the last"
        );
        let bytes = a.restore(&key).await;
        assert_eq!(&bytes[..], &winner[..], "`{key}` restores the winner's");
    }
}

/// The manifests under a directory store's `dir` (a staged `<name>#<n>` is none).
fn dir_manifests(dir: &Path) -> usize {
    let mut n = 0;
    for repo in std::fs::read_dir(dir.join("v1")).unwrap().flatten() {
        let entries = std::fs::read_dir(repo.path().join("entries")).into_iter();
        n += entries
            .flatten()
            .flatten()
            .filter(|m| m.path().extension().is_some_and(|e| e == "json"))
            .count();
    }
    n
}

/// The manifests in moto's bucket `ci-cache`, from its listing (moto checks no signatures).
async fn bucket_manifests(http: &reqwest::Client, moto: &Moto) -> usize {
    let listing = http
        .get(format!("{}/ci-cache?list-type=2&prefix=v1/", moto.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    listing
        .split("<Key>")
        .filter_map(|k| k.split_once("</Key>"))
        .filter(|(key, _)| key.contains("/entries/"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_of_one_key_in_a_directory_make_one_entry() {
    let mut w = World::start(4).await;
    let store = scratch();
    let dir = store.path().join("cache");
    with_cache(&mut w, &dir, 64, 16);
    let _d = w.dispatcher("d1").await;
    let demo = Job::start(&w, "demo", "sim/demo").await;
    rounds(&demo.raw(w.http()), async || dir_manifests(&dir)).await;
    demo.finish(&w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_of_one_key_in_a_bucket_make_one_entry() {
    let moto = Moto::start(&moto_server()).await;
    let mut w = World::start(4).await;
    let _secrets = with_s3_cache(&mut w, &moto).await;
    let _d = w.dispatcher("d1").await;
    let demo = Job::start(&w, "demo", "sim/demo").await;
    let http = w.http().clone();
    rounds(&demo.raw(w.http()), async || {
        bucket_manifests(&http, &moto).await
    })
    .await;
    demo.finish(&w).await;
}
