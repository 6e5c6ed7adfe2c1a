//! The pod backend observes its executors through watches (`backend::pod::observer`): with the
//! resync an hour away, only a watch event can explain what a test sees the dispatcher do. A
//! watch that ends (the apiserver restarting, 410 Gone) is taken up again with one list, and a
//! restarted dispatcher rebuilds its view from one list of each kind.

use std::time::Duration;

use tenantci_testkit::wait::eventually;

use super::harness::World;

/// A world whose dispatchers' resync is an hour: no pass in a test's lifetime comes from it.
async fn without_resync(pod_capacity: u32) -> World {
    let mut w = World::start(pod_capacity).await;
    w.base_mut().cluster.resync = Some(Duration::from_secs(3600).into());
    w
}

fn lists(requests: &std::collections::BTreeMap<(String, String), u64>, resource: &str) -> u64 {
    requests
        .get(&("LIST".to_string(), resource.to_string()))
        .copied()
        .unwrap_or(0)
}

/// Deletes `task`'s executor Pod behind the dispatcher's back and waits for the FAILURE the
/// reconciler reports for it: the watch's DELETED event wakes a pass, which waits out the Pod
/// create grace (`POD_CREATE_GRACE`, the Secret being young) with a timer of its own.
async fn pod_deleted_and_failed(w: &World, task: i64) {
    w.delete_pod(task).await;
    w.assert_fails_saying(task, "vanished").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_pod_deleted_behind_the_dispatchers_back_is_noticed_through_the_watch() {
    let w = without_resync(2).await;
    let before = w.apiserver_requests().await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let t = w
        .claimed(w.enqueue("watched", "s3cr3t-watched").await)
        .await;
    let ex = w.executor(t).await;
    // Fetched: no start deadline is pending, so no timer wakes the reconciler either.
    assert_eq!(ex.fetch().await.id, t);
    pod_deleted_and_failed(&w, t).await;
    let after = w.apiserver_requests().await;
    assert_eq!(
        (
            lists(&after, "secrets") - lists(&before, "secrets"),
            lists(&after, "pods") - lists(&before, "pods"),
        ),
        (1, 1),
        "one list of each when the dispatcher started, watch events since: {after:?}"
    );
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_ended_by_an_apiserver_restart_lists_once_and_loses_or_doubles_no_task() {
    let w = without_resync(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let a = w.claimed(w.enqueue("before", "s3cr3t-before").await).await;
    let ea = w.executor(a).await;
    assert_eq!(ea.fetch().await.id, a);
    let before = w.apiserver_requests().await;

    // Every watch ends; watching again from the last version seen answers 410 Gone.
    w.restart_apiserver();
    let relisted = eventually("the dispatcher's watches listed again", || async {
        let now = w.apiserver_requests().await;
        (lists(&now, "secrets") > lists(&before, "secrets")).then_some(now)
    })
    .await;
    assert_eq!(
        lists(&relisted, "secrets"),
        lists(&before, "secrets") + 1,
        "one list after the 410, not one per retry: {relisted:?}"
    );

    // The watch is back: a task claimed now runs to its end, and the one claimed before
    // finishes once; a Pod deleted behind its back is noticed without a resync.
    let b = w.claimed(w.enqueue("after", "s3cr3t-after").await).await;
    ea.finish(a, &[&format!("ran task {a}")]).await;
    w.executor(b).await.run(b).await;
    let c = w
        .claimed(w.enqueue("deleted", "s3cr3t-deleted").await)
        .await;
    assert_eq!(w.executor(c).await.fetch().await.id, c);
    pod_deleted_and_failed(&w, c).await;
    w.all_cleaned_up().await;
    w.assert_succeeded_once(a).await;
    w.assert_succeeded_once(b).await;
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "no executor started twice: {:?}",
        w.watch.creations()
    );
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_killed_with_50_executors_rebuilds_its_view_from_one_list_each() {
    const N: usize = 50;
    let w = without_resync(N as u32).await;
    let mut d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let mut tasks = Vec::new();
    for i in 0..N {
        let job = w.enqueue(&format!("job-{i}"), &format!("s3cr3t-{i}")).await;
        tasks.push(w.claimed(job).await);
    }
    let mut executors = Vec::new();
    for t in &tasks {
        let ex = w.executor(*t).await;
        assert_eq!(ex.fetch().await.id, *t);
        executors.push(ex);
    }
    d.kill9();
    let before = w.apiserver_requests().await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    for (t, ex) in tasks.iter().zip(&executors) {
        ex.finish(*t, &[&format!("ran task {t}")]).await;
    }
    // Read before the test's own lists (cleaned up) add to the count.
    let after = w.apiserver_requests().await;
    w.all_cleaned_up().await;
    for t in &tasks {
        w.assert_succeeded_once(*t).await;
    }
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "no executor started twice: {:?}",
        w.watch.creations()
    );
    assert_eq!(w.watch.creations().len(), N);
    assert_eq!(
        (
            lists(&after, "secrets") - lists(&before, "secrets"),
            lists(&after, "pods") - lists(&before, "pods"),
        ),
        (1, 1),
        "the restarted dispatcher's view comes from one list of each: {after:?}"
    );
    drop(d);
}
