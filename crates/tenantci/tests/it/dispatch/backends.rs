//! The one backend model (issue 28): what the pod and VM backends now share, shown where the
//! two copies had drifted apart. Against the simulator's apiserver, the Gitea double, the
//! OpenSandbox double and a real nats-server.
//!
//! - keep-alive and withdrawal run over every backend: a VM task cancelled at Gitea before
//!   its sandbox fetched it is withdrawn, as a Pod task always was;
//! - recovery reserves a slot before it starts an executor again, so a restart never runs
//!   past capacity, whatever waits in the queue;
//! - the reconciler never waits for a backend's API: an OpenSandbox outage during a VM
//!   replacement delays neither a Pod's reconcile nor another sandbox's.

use std::time::Duration;

use super::harness::World;
use super::vm::{vm_backend_recovered, world};
use tenantci_testkit::wait::eventually;

const WITHDRAWN: &str = "tenantci_dispatch_tasks_withdrawn_total";
const FAILED: &str = "tenantci_dispatch_tasks_failed_total";

/// Waits until `task` has no executor Pod or Secret left.
async fn pod_objects_gone(w: &World, task: i64) {
    let name = format!("gitea-task-{task}");
    eventually(
        "the task's executor Pod and Secret to be deleted",
        || async {
            let named = |n: Option<&String>| n == Some(&name);
            let pods = w.pods().await;
            let secrets = w.secrets().await;
            (!pods.iter().any(|p| named(p.metadata.name.as_ref()))
                && !secrets.iter().any(|s| named(s.metadata.name.as_ref())))
            .then_some(())
        },
    )
    .await;
}

/// Enqueues a pod job per name and waits until each is claimed and its executor exists (not
/// fetched); the jobs and their tasks.
async fn unfetched_executors(w: &World, names: &[&str]) -> (Vec<i64>, Vec<i64>) {
    let (mut jobs, mut tasks) = (Vec::new(), Vec::new());
    for name in names {
        let job = w.enqueue(name, &format!("secret-{name}")).await;
        let task = w.claimed(job).await;
        w.executor(task).await;
        jobs.push(job);
        tasks.push(task);
    }
    (jobs, tasks)
}

/// Runs whichever executors exist, batch by batch, until `n` tasks ran; each is cleaned up
/// before the next batch is looked at.
async fn run_executors_until(w: &World, n: usize) {
    let mut done: Vec<i64> = Vec::new();
    while done.len() < n {
        let live = eventually("a runnable executor", || async {
            let live: Vec<i64> = w
                .secrets()
                .await
                .iter()
                .filter_map(|s| {
                    s.metadata.labels.as_ref()?["tenantci.io/task-id"]
                        .parse()
                        .ok()
                })
                .filter(|t| !done.contains(t))
                .collect();
            (!live.is_empty()).then_some(live)
        })
        .await;
        for task in live {
            w.executor(task).await.run(task).await;
            pod_objects_gone(w, task).await;
            done.push(task);
        }
    }
}

/// A Pod task and a VM task, each with its executor created and not fetched yet (image
/// pull, VM boot), are cancelled at Gitea: both executors are deleted, both tasks keep
/// Gitea's CANCELLED with no line added, the withdrawn executors get nothing, and their slots
/// are free again (the next task of each backend runs at capacity 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_cancelled_before_its_executor_fetched_it_is_withdrawn_on_both_backends() {
    let w = world(1, 1).await;
    let d = w.dispatcher("d1").await;
    vm_backend_recovered(&d).await;
    let pod_task = w.claimed(w.enqueue("cancel-pod", "sp").await).await;
    let vm_task = w.claimed(w.enqueue_vm("cancel-vm", "sv").await).await;
    let pod_ex = w.executor(pod_task).await;
    let vm_ex = w.vm_executor(vm_task).await;
    w.cancel(pod_task).await;
    w.cancel(vm_task).await;

    pod_objects_gone(&w, pod_task).await;
    eventually("the cancelled task's sandbox to be deleted", || async {
        w.sandboxes_of(vm_task).await.is_empty().then_some(())
    })
    .await;
    for ex in [&pod_ex, &vm_ex] {
        let got = ex.own().fetch_task(0).await;
        assert!(
            got.map(|r| r.task.is_none()).unwrap_or(true),
            "a withdrawn executor gets no task"
        );
    }
    for task in [pod_task, vm_task] {
        let view = w.task(task).await;
        assert_eq!(view["result"], "RESULT_CANCELLED", "{view}");
        assert!(
            view["logs"].as_array().unwrap().is_empty(),
            "nothing ran and nothing was reported over CANCELLED: {view}"
        );
    }
    assert_eq!(d.metric(WITHDRAWN).await, Some(2.0));
    assert_eq!(d.metric(FAILED).await, Some(0.0), "cancelled, not failed");
    // The slots are free: at capacity 1 each, the next task of each backend runs.
    let next_pod = w.claimed(w.enqueue("after-pod", "sp2").await).await;
    let next_vm = w.claimed(w.enqueue_vm("after-vm", "sv2").await).await;
    w.executor(next_pod).await.run(next_pod).await;
    w.vm_executor(next_vm).await.run(next_vm).await;
    w.assert_succeeded_once(next_pod).await;
    w.assert_succeeded_once(next_vm).await;
    w.all_cleaned_up().await;
    w.no_sandboxes_left().await;
}

/// kill -9 of the dispatcher at pod capacity 2 with two executors not yet fetched and two
/// more pod tasks claimed and queued (the VM backend's free slots let the scheduler claim
/// them; they wait on the pod subject); both Pods and Secrets are deleted while no dispatcher
/// runs. The restarted dispatcher starts the two lost tasks again (attempt 2) before its
/// worker takes the queued ones: never more than 2 executor Pods at once, and every task runs
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_after_lost_pods_never_runs_past_capacity_and_runs_every_task_once() {
    let w = world(2, 2).await;
    let mut d = w.dispatcher("d1").await;
    vm_backend_recovered(&d).await;
    let (lost, lost_tasks) = unfetched_executors(&w, &["lost-1", "lost-2"]).await;
    let waiting = [
        w.enqueue("waiting-1", "s3").await,
        w.enqueue("waiting-2", "s4").await,
    ];
    for job in waiting {
        let task = w.claimed(job).await;
        // Gitea assigns the task in FetchTask's answer; a kill before the dispatcher has
        // queued it loses that claim by design (Gitea fails it after 10 minutes), so the kill
        // waits for the queueing.
        let queued = format!("claimed and queued task={task} ");
        eventually("the claim to be queued", || async {
            d.log_text().contains(&queued).then_some(())
        })
        .await;
    }
    assert_eq!(
        w.secrets().await.len(),
        2,
        "the pod slots are full: both queued"
    );
    d.kill9();
    w.lose_every_executor().await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    run_executors_until(&w, 4).await;
    assert!(
        w.watch.max_live() <= 2,
        "never more executor Pods than the capacity: {}",
        w.watch.max_live()
    );
    w.assert_ran_once(&[lost[0], lost[1], waiting[0], waiting[1]])
        .await;
    let creations = w.watch.creations();
    for task in &lost_tasks {
        assert_eq!(
            creations.get(&format!("gitea-task-{task}")),
            Some(&2),
            "the lost task {task} got a second Pod (attempt 2): {creations:?}"
        );
    }
    assert!(d.log_text().contains("started again as attempt 2"));
    w.all_cleaned_up().await;
}

/// More lost executors than slots: at pod capacity 1, two executors are lost while no
/// dispatcher runs (the first ran at capacity 2). The restarted dispatcher starts one again at
/// once and the other only when the first one's slot frees (the slot awaited in turn with the
/// worker's pulls): never more than one Pod, both run once, nothing is reported as FAILURE.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_executors_beyond_capacity_wait_for_a_slot_and_run_once() {
    let mut w = World::start(2).await;
    let mut d = w.dispatcher("d1").await;
    let (jobs, _) = unfetched_executors(&w, &["lost-a", "lost-b"]).await;
    d.kill9();
    w.lose_every_executor().await;
    // Another instance, so its config is written with the lower capacity; it leads once
    // d1's lease has expired.
    w.base_mut()
        .capacity
        .set(tenantci_dispatch::backend::pod::KIND, 1);
    w.watch.reset_max_live_once_none_is_live().await;
    let d = w.dispatcher("d2").await;
    d.wait_leader(true).await;
    run_executors_until(&w, 2).await;
    assert_eq!(w.watch.max_live(), 1, "one Pod at a time at capacity 1");
    w.assert_ran_once(&jobs).await;
    assert_eq!(d.metric(FAILED).await, Some(0.0));
    w.all_cleaned_up().await;
}

/// A VM executor that never fetches its task is replaced after the start deadline, while
/// OpenSandbox refuses every create (503 on POST; lists and deletes work). The replacement
/// waits for the API without holding the reconcile up: meanwhile another sandbox's task
/// finishes and its sandbox is deleted, and a Pod task runs and its Pod is deleted. Once the
/// API takes creates again, the replacement is created and runs the task once; nothing was
/// reported as FAILURE.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_opensandbox_outage_during_a_vm_replacement_delays_no_other_reconcile() {
    let mut w = world(1, 2).await;
    w.with_start_deadline(Duration::from_secs(2), 3);
    let d = w.dispatcher("d1").await;
    vm_backend_recovered(&d).await;
    let stuck = w.claimed(w.enqueue_vm("stuck", "s1").await).await;
    let busy = w.claimed(w.enqueue_vm("busy", "s2").await).await;
    w.vm_executor(stuck).await;
    let busy_ex = w.vm_executor(busy).await;
    assert_eq!(busy_ex.fetch().await.id, busy);
    // Long enough to outlast every wait below; ended by hand.
    let creates = ["POST"];
    w.opensandbox
        .outage_of(w.http(), &creates, 503, Duration::from_secs(600))
        .await;
    eventually("the replacement to meet the outage", || async {
        d.log_text()
            .contains("the replacement sandbox is not created yet")
            .then_some(())
    })
    .await;

    busy_ex.finish(busy, &[&format!("ran task {busy}")]).await;
    eventually("the finished task's sandbox to be deleted", || async {
        w.sandboxes_of(busy).await.is_empty().then_some(())
    })
    .await;
    let pod_task = w.claimed(w.enqueue("pod-during", "s3").await).await;
    w.executor(pod_task).await.run(pod_task).await;
    pod_objects_gone(&w, pod_task).await;
    // All of it while the replacement still waited for the API.
    assert!(
        w.sandboxes_of(stuck).await.is_empty(),
        "no create got through"
    );
    assert_eq!(w.task(stuck).await["state"], "running", "not failed");

    w.opensandbox.end_outage(w.http()).await;
    let second = eventually("attempt 2's sandbox", || async {
        w.sandboxes_of(stuck)
            .await
            .iter()
            .find(|s| s["metadata"]["tenantci.io/attempt"] == "2")
            .map(tenantci_testkit::executor::Executor::from_sandbox)
    })
    .await;
    second.run(stuck).await;
    for task in [stuck, busy, pod_task] {
        w.assert_succeeded_once(task).await;
    }
    assert_eq!(d.metric(FAILED).await, Some(0.0));
    w.no_sandboxes_left().await;
    w.all_cleaned_up().await;
}
