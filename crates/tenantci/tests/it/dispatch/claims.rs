//! Claims that survive what real executors do (issue 16): a task cancelled at Gitea before its
//! executor fetched it, a FetchTask answer the executor never received, and an executor that
//! never fetches at all. The simulator's Gitea double, a real nats-server, and executors
//! played through the facade with the executor Secret's files.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tenantci_core::forge::gitea::proto::{LogRow, UpdateLogRequest};
use tenantci_testkit::executor::Executor;
use tenantci_testkit::wait::eventually;

use super::harness::{NAMESPACE, World};

const WITHDRAWN: &str = "tenantci_dispatch_tasks_withdrawn_total";
const FAILED: &str = "tenantci_dispatch_tasks_failed_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_cancelled_while_queued_gets_no_executor_and_frees_its_slot() {
    let w = World::start(1).await;
    let d = w.dispatcher("d1").await;
    let a = w.claimed(w.enqueue("cancelled", "sa").await).await;
    // Its executor exists but has not fetched the task (image pull, node boot) ...
    let ea = w.executor(a).await;
    // ... when someone cancels the run in Gitea.
    w.cancel(a).await;
    // With one slot, the next job is claimed only once the cancelled task's slot is free.
    let b = w.claimed(w.enqueue("next", "sb").await).await;
    assert!(
        ea.own()
            .fetch_task(0)
            .await
            .map(|r| r.task.is_none())
            .unwrap_or(true),
        "the withdrawn executor gets no task"
    );
    w.executor(b).await.run(b).await;
    let ta = w.task(a).await;
    assert_eq!(ta["result"], "RESULT_CANCELLED", "{ta}");
    assert!(
        ta["logs"].as_array().unwrap().is_empty(),
        "nothing ran and no failure line was added: {ta}"
    );
    assert_eq!(w.task(b).await["result"], "RESULT_SUCCESS");
    assert_eq!(d.metric(WITHDRAWN).await, Some(1.0));
    assert_eq!(d.metric(FAILED).await, Some(0.0), "cancelled, not failed");
    // Without a webhook, the start-up line states what polling costs Gitea (50ms, then 1s).
    assert!(
        d.log_text()
            .contains("FetchTask rate: polling only: FetchTask every 50ms (20.00/s)"),
        "{}",
        d.log_text()
    );
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_that_lost_the_fetch_answer_gets_its_task_on_retry_until_it_reports() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("lost-answer", "s").await).await;
    let ex = w.executor(t).await;
    // The first answer is sent but never reaches the runner (a reset connection).
    let lost = ex.fetch().await;
    assert_eq!(lost.id, t);
    let retried = ex.own().fetch_task(0).await.unwrap().task;
    assert_eq!(
        retried.map(|r| r.id),
        Some(t),
        "the retry gets the same task"
    );
    // The executor's first report: it has its task, the assignment is consumed for good.
    ex.own()
        .update_log(&UpdateLogRequest {
            task_id: t,
            index: 0,
            rows: vec![LogRow {
                time: None,
                content: "started".into(),
            }],
            no_more: false,
        })
        .await
        .unwrap();
    let after = ex.own().fetch_task(0).await.unwrap().task;
    assert!(after.is_none(), "nothing after the first report");
    ex.finish(t, &["started", &format!("ran task {t}")]).await;
    assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    w.all_cleaned_up().await;
}

/// The executor Secret of `task` once it holds attempt `attempt`.
pub(super) async fn attempt(w: &World, task: i64, attempt: u32) -> Executor {
    let api = Api::<Secret>::namespaced(w.kube.clone(), NAMESPACE);
    let want = format!("task-{task}-attempt-{attempt}");
    let secret = eventually(&format!("the executor Secret of {want}"), || async {
        let s = api.get_opt(&format!("gitea-task-{task}")).await.ok()??;
        let id = s
            .metadata
            .annotations
            .as_ref()?
            .get("tenantci.io/assignment-id")?;
        (*id == want).then_some(s)
    })
    .await;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(w.kube.clone(), NAMESPACE);
    let pod = eventually(&format!("the executor Pod of {want}"), || async {
        pods.get_opt(&format!("gitea-task-{task}")).await.ok()?
    })
    .await;
    Executor::from_objects(&secret, &pod)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_stuck_before_fetching_is_replaced_by_attempt_two_which_runs_it_once() {
    let mut w = World::start(1).await;
    w.with_start_deadline(Duration::from_secs(3), 3);
    let d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("stuck", "s").await).await;
    // Attempt 1 never calls FetchTask (its image pull hangs).
    let first = attempt(&w, t, 1).await;
    let second = attempt(&w, t, 2).await;
    assert_ne!(first.token, second.token, "a fresh capability");
    assert!(
        first
            .own()
            .fetch_task(0)
            .await
            .map(|r| r.task.is_none())
            .unwrap_or(true),
        "the replaced attempt gets nothing, even with its own valid capability"
    );
    second.run(t).await;
    w.assert_succeeded_once(t).await;
    assert_eq!(
        d.metric("tenantci_dispatch_task_restarts_total").await,
        Some(1.0)
    );
    assert!(d.log_text().contains("replaced by attempt 2"));
    w.all_cleaned_up().await;
    assert_eq!(
        w.watch.creations().get(&format!("gitea-task-{t}")),
        Some(&2),
        "two Pods: the stuck one and its replacement"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_last_attempt_the_task_fails_with_a_line_saying_why() {
    let mut w = World::start(1).await;
    w.with_start_deadline(Duration::from_secs(2), 1);
    let d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("never-starts", "s").await).await;
    let view = eventually("the task to be failed", || async {
        let v = w.task(t).await;
        (v["result"] == "RESULT_FAILURE").then_some(v)
    })
    .await;
    assert!(
        view["logs"].as_array().unwrap().iter().any(|l| l
            .as_str()
            .unwrap()
            .contains("did not fetch its task within 2s in 1 attempt")),
        "{view}"
    );
    // Counted once the FAILURE is reported, which Gitea shows a moment before.
    eventually("the failure to be counted", || async {
        (d.metric("tenantci_dispatch_tasks_failed_total").await == Some(1.0)).then_some(())
    })
    .await;
    w.all_cleaned_up().await;
}
