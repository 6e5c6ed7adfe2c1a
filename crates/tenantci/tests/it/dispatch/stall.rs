//! Gitea frozen during a burst (issue 19): a FetchTask held by the freeze still claims a task
//! when Gitea thaws, and its answer must not be given up on, or the task is claimed and lost
//! until Gitea's 10-minute zombie sweep. The double's stall switch holds every RunnerService
//! call for 10 s, as a database lock or SIGSTOP would.

use std::time::Duration;

use super::harness::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gitea_frozen_for_10s_during_a_burst_leaves_no_task_open() {
    let w = World::start(2).await;
    let d = w.dispatcher("d1").await;
    let first = w.claimed(w.enqueue("before", "s").await).await;
    // With a slot free the scheduler keeps polling: its next FetchTask is held by the freeze,
    // and the burst enqueued meanwhile gives it a task to claim when Gitea thaws.
    w.gitea
        .stall(&reqwest::Client::new(), Duration::from_secs(10))
        .await;
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(w.enqueue(&format!("burst-{i}"), "s").await);
    }
    w.executor(first).await.run(first).await;
    for job in &jobs {
        let t = w.claimed(*job).await;
        w.executor(t).await.run(t).await;
    }
    w.assert_ran_once(&jobs).await;
    assert_eq!(
        d.metric("tenantci_dispatch_fetch_task_answers_lost_total")
            .await,
        Some(0.0)
    );
    w.all_cleaned_up().await;
}
