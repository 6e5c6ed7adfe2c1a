//! The claim ledger (issue 19): executor objects the apiserver lost while no dispatcher was
//! leading do not take their tasks with them. The next term reads the ledger, starts again
//! what never reached its executor and reports FAILURE, saying what was lost, for what had;
//! no task is left open at Gitea.
//!
//! Issue 35: the same for an executor only partly lost (its Pod deleted, its Secret left)
//! when the dispatcher died before it noticed.

use tenantci_testkit::wait::eventually;

use super::claims::attempt;
use super::harness::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executors_lost_while_no_dispatcher_leads_are_restarted_or_reported() {
    let w = World::start(3).await;
    let mut d = w.dispatcher("d1").await;
    let mut tasks = Vec::new();
    for name in ["fetched", "waiting-1", "waiting-2"] {
        tasks.push(w.claimed(w.enqueue(name, "s").await).await);
    }
    let [fetched, w1, w2] = tasks[..] else {
        unreachable!("three tasks")
    };
    let waiting = [w1, w2];
    // One executor has its task; the other two are still pulling their image.
    assert_eq!(w.executor(fetched).await.fetch().await.id, fetched);
    for t in waiting {
        w.objects(t).await;
    }
    eventually("all three executors started", || async {
        (d.metric("tenantci_dispatch_capacity_in_use").await == Some(3.0)).then_some(())
    })
    .await;

    // The dispatcher dies; while none leads, the apiserver loses every executor object.
    d.kill9();
    w.lose_every_executor().await;
    let d = w.dispatcher("d1").await;

    let view = eventually("the fetched task to be reported", || async {
        let v = w.task(fetched).await;
        (v["state"] == "done").then_some(v)
    })
    .await;
    assert_eq!(view["result"], "RESULT_FAILURE", "{view}");
    assert!(
        view["logs"].as_array().unwrap().iter().any(|l| l
            .as_str()
            .unwrap()
            .contains("had fetched the task when its Pod and Secret were lost")),
        "a line says what was lost: {view}"
    );
    for t in waiting {
        attempt(&w, t, 2).await.run(t).await;
        let v = w.task(t).await;
        assert_eq!(v["result"], "RESULT_SUCCESS", "{v}");
        let ran = v["logs"].as_array().unwrap();
        assert_eq!(ran.len(), 1, "ran once: {v}");
    }
    for t in &tasks {
        assert_eq!(w.task(*t).await["state"], "done", "no task left open");
    }
    assert_eq!(
        d.metric("tenantci_dispatch_task_restarts_total").await,
        Some(2.0)
    );
    assert!(d.log_text().contains("started again as attempt 2"));
    w.all_cleaned_up().await;
}

/// The order the soak found (issue 35): an executor Pod is deleted before its runner fetched
/// the task, after its assignment was acked, and the dispatcher is killed (-9) before it
/// failed the task (a Secret this young is not yet taken for a vanished Pod). The restarted
/// dispatcher finds the Secret with its assignment, no Pod, nothing to redeliver: it deletes
/// the Secret and starts attempt 2, which runs the task once; nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_deleted_before_it_fetched_then_a_kill_9_is_started_again_once() {
    let w = World::start(1).await;
    let mut d = w.dispatcher("d1").await;
    let job = w.enqueue("pod-deleted", "s").await;
    let task = w.claimed(job).await;
    w.objects(task).await;
    eventually("the executor registered as running", || async {
        (d.metric("tenantci_dispatch_capacity_in_use").await == Some(1.0)).then_some(())
    })
    .await;
    w.pod_assignments_acked().await;

    w.delete_pod(task).await;
    d.kill9();
    let name = format!("gitea-task-{task}");
    let named = |n: Option<&String>| n == Some(&name);
    assert!(
        w.pods()
            .await
            .iter()
            .all(|p| !named(p.metadata.name.as_ref()))
    );
    assert!(
        w.secrets()
            .await
            .iter()
            .any(|s| named(s.metadata.name.as_ref())),
        "the Secret with its assignment is left"
    );
    assert_eq!(
        w.task(task).await["state"],
        "running",
        "not failed before the kill"
    );

    let d = w.dispatcher("d1").await;
    attempt(&w, task, 2).await.run(task).await;
    w.assert_ran_once(&[job]).await;
    assert_eq!(
        w.watch.creations().get(&name),
        Some(&2),
        "one Pod per attempt"
    );
    assert_eq!(
        d.metric("tenantci_dispatch_task_restarts_total").await,
        Some(1.0)
    );
    assert!(d.log_text().contains("started again as attempt 2"));
    w.all_cleaned_up().await;
}
