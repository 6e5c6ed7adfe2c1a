//! The runbook's three-node JetStream cluster, tested (issue 19): `queue init --replicas 3`
//! creates the stream, the consumers and the claim ledger as R3 raft groups, the dispatcher
//! is given every server's URL, and during 50 tasks first the server holding the dispatcher's
//! queue connection is killed with SIGKILL, then the dispatcher itself. Every task ends
//! exactly once, none is lost, the dispatcher logs the reconnect, and the killed server
//! rejoins.

use async_nats::jetstream;
use tenantci_dispatch::queue::{STREAM, ledger_bucket};
use tenantci_testkit::wait::eventually;

use super::harness::World;

const TASKS: usize = 50;

/// The replicas of `stream` as its leader reports them, and whether all are current.
async fn replicas(w: &World, stream: &str) -> Option<(usize, bool)> {
    let js = jetstream::new(w.peers[1].client("ci-admin").await);
    let info = js.get_stream(stream).await.ok()?.info().await.ok()?.clone();
    let cluster = info.cluster?;
    let peers = cluster.replicas;
    Some((peers.len() + 1, peers.iter().all(|p| p.current)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_three_node_queue_loses_no_task_to_kill9_of_a_server_or_the_dispatcher() {
    let mut w = World::start_clustered(4).await;
    for stream in [STREAM.to_string(), ledger_bucket::stream_name()] {
        assert_eq!(
            replicas(&w, &stream).await.map(|r| r.0),
            Some(3),
            "{stream} is R3"
        );
    }
    let mut d = w.dispatcher("d1").await;
    let mut jobs = Vec::new();
    for i in 0..TASKS {
        jobs.push(w.enqueue(&format!("job-{i}"), "s").await);
    }
    let mut killed = None;
    for (i, job) in jobs.iter().enumerate() {
        if i == TASKS / 3 {
            // The server the dispatcher's worker connection is on.
            let mut on = None;
            for (n, s) in std::iter::once(&w.nats).chain(&w.peers).enumerate() {
                if s.client_names()
                    .await
                    .iter()
                    .any(|c| c == "tenantci/ci-worker")
                {
                    on = Some(n);
                }
            }
            let n = on.expect("the dispatcher is connected to one of the servers");
            match n {
                0 => w.nats.kill9(),
                n => w.peers[n - 1].kill9(),
            }
            killed = Some(n);
        }
        if i == 2 * TASKS / 3 {
            d.kill9();
            d = w.dispatcher("d1").await;
        }
        let t = w.claimed(*job).await;
        w.executor(t).await.run(t).await;
    }
    w.assert_ran_once(&jobs).await;
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "one executor Pod per task: {:?}",
        w.watch.creations()
    );
    let log = d.log_text();
    assert!(log.contains("NATS connection lost; reconnecting"), "{log}");
    assert!(log.contains("NATS connection (re)established"), "{log}");
    w.all_cleaned_up().await;

    // The killed server rejoins and catches up.
    match killed.unwrap() {
        0 => w.nats.start_again(),
        n => w.peers[n - 1].start_again(),
    }
    eventually("the rejoined server to be current", || async {
        (replicas(&w, STREAM).await == Some((3, true))).then_some(())
    })
    .await;
}
