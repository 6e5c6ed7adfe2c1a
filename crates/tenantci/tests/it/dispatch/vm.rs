//! The VM backend under `tenantci dispatch run`, against the simulator's OpenSandbox double
//! (issue 14): one registration for both backends, each with its own consumer and slots, a
//! sandbox per vm task found again by its metadata, and what a kill -9, a failed sandbox and
//! an OpenSandbox outage cost. The VM executor is played from the sandbox's env, as its boot
//! script would (tenantci_testkit::executor::Executor::from_sandbox).

use std::time::Duration;

use super::harness::{World, store_contains};
use crate::util::{assert_exit, run, stderr, tenantci};
use tenantci_testkit::wait::eventually;

/// A world whose dispatchers run the VM backend at `vm_capacity` beside `pod_capacity` Pods.
pub(crate) async fn world(pod_capacity: u32, vm_capacity: u32) -> World {
    let mut w = World::start(pod_capacity).await;
    let key = w.opensandbox.api_key_file.clone();
    w.with_vm(vm_capacity, &key);
    w
}

/// Waits until the dispatcher's VM backend has recovered its slots (its log says so).
pub(super) async fn vm_backend_recovered(d: &super::harness::Dispatcher) {
    eventually("the VM backend to recover its slots", || async {
        d.log_text()
            .contains("recovered VM sandboxes")
            .then_some(())
    })
    .await;
}

/// Waits until both backends have recovered their slots: until then the scheduler counts no
/// free slot of the one still recovering, so a FetchTask asks for fewer tasks.
pub(super) async fn both_backends_recovered(d: &super::harness::Dispatcher) {
    vm_backend_recovered(d).await;
    eventually("the pod backend to recover its slots", || async {
        d.log_text()
            .contains("recovered executors from")
            .then_some(())
    })
    .await;
}

/// Waits until `task` is FAILURE at the Gitea double; its view.
async fn failed_at_gitea(w: &World, task: i64) -> serde_json::Value {
    eventually("FAILURE at Gitea", || async {
        let t = w.task(task).await;
        (t["result"] == "RESULT_FAILURE").then_some(t)
    })
    .await
}

/// The secret of the job named `name` (distinct, to search for in clear).
fn secret_of(name: &str) -> String {
    format!("vm-secret-{name}-{:08x}", rand::random::<u32>())
}

/// 3 vm tasks at vm capacity 1 and 4 pod tasks at pod capacity 2, enqueued together: every
/// task SUCCESS with its log; never more than 1 sandbox or 2 executor Pods; a vm task starts
/// while the pod pool is full, and a pod task while the vm pool is full. No task secret in
/// clear in the sandbox metadata, the dispatcher log or the JetStream store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vm_and_pod_tasks_share_one_registration_and_neither_pool_blocks_the_other() {
    let mut w = world(2, 1).await;
    let d = w.dispatcher("d1").await;
    // Gitea hands tasks out in order, and FetchTask is bounded by the total free capacity
    // (2 + 1): vm-1, pod-1 and pod-2 are claimed first and fill both pools.
    let order = [
        ("vm-1", true),
        ("pod-1", false),
        ("pod-2", false),
        ("vm-2", true),
        ("pod-3", false),
        ("vm-3", true),
        ("pod-4", false),
    ];
    let mut jobs = Vec::new();
    let mut secrets = Vec::new();
    for (name, vm) in order {
        let secret = secret_of(name);
        let job = if vm {
            w.enqueue_vm(name, &secret).await
        } else {
            w.enqueue(name, &secret).await
        };
        jobs.push(job);
        secrets.push(secret);
    }
    let [vm1, pod1, pod2, vm2, pod3, vm3, pod4] = jobs[..] else {
        unreachable!()
    };
    let (tv1, tp1, tp2) = (
        w.claimed(vm1).await,
        w.claimed(pod1).await,
        w.claimed(pod2).await,
    );
    let (p1, p2) = (w.executor(tp1).await, w.executor(tp2).await);
    w.vm_executor(tv1).await.run(tv1).await;

    // The pod pool is full (neither Pod has run): the next vm task starts all the same.
    let tv2 = w.claimed(vm2).await;
    let v2 = w.vm_executor(tv2).await;
    assert_eq!(w.pods().await.len(), 2, "both pod slots still taken");

    // The vm pool is full (vm-2's sandbox lives): a freed pod slot takes the next pod task.
    p1.run(tp1).await;
    let tp3 = w.claimed(pod3).await;
    let p3 = w.executor(tp3).await;
    assert_eq!(
        w.sandboxes_of(tv2).await.len(),
        1,
        "vm-2 still holds the VM slot"
    );

    p2.run(tp2).await;
    v2.run(tv2).await;
    p3.run(tp3).await;
    let tv3 = w.claimed(vm3).await;
    w.vm_executor(tv3).await.run(tv3).await;
    let tp4 = w.claimed(pod4).await;
    w.executor(tp4).await.run(tp4).await;

    w.assert_ran_once(&jobs).await;
    w.all_cleaned_up().await;
    w.no_sandboxes_left().await;
    assert!(
        w.watch.max_live() <= 2,
        "Pods at once: {}",
        w.watch.max_live()
    );
    let stats = w.sandbox_stats().await;
    assert_eq!(stats["maxLive"], 1, "never more than one sandbox: {stats}");
    assert_eq!(stats["created"], 3, "one sandbox per vm task: {stats}");

    // No task secret in clear: the sandbox metadata (seen in the double's records through
    // the API's own list, which is what anyone with the API key sees), the log, the store.
    let log = d.log_text();
    assert!(log.contains("sandbox created"), "{log}");
    for s in &secrets {
        assert!(
            !log.contains(s.as_str()),
            "a task secret in the dispatcher log"
        );
    }
    let tasks = [tv1, tv2, tv3, tp1, tp2, tp3, tp4];
    assert_no_secret_in_store(&mut w, &tasks, &secrets);
}

/// No task secret in clear in the JetStream store (after stopping nats-server); the claim
/// ledger's final entries of `tasks`, clear JSON, are the positive control.
fn assert_no_secret_in_store(w: &mut World, tasks: &[i64], secrets: &[String]) {
    let store = w.stop_nats_and_read_store();
    for task in tasks {
        assert!(
            store_contains(&store, &format!("\"task\":{task},")),
            "the ledger entry of task {task} is not in the store"
        );
    }
    for s in secrets {
        assert!(
            !store_contains(&store, s),
            "a task secret in the JetStream store"
        );
    }
}

/// The metadata every sandbox carries: findable and owned, label-rule safe, ids only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sandbox_carries_ids_in_its_metadata_and_the_capability_only_in_its_env() {
    let w = world(1, 1).await;
    let _d = w.dispatcher("d1").await;
    let secret = secret_of("meta");
    let task = w.claimed(w.enqueue_vm("meta", &secret).await).await;
    let ex = w.vm_executor(task).await;
    let sandbox = w.sandboxes_of(task).await.remove(0);
    let meta = &sandbox["metadata"];
    assert_eq!(meta["tenantci.io/task-id"], task.to_string());
    assert_eq!(meta["tenantci.io/attempt"], "1");
    assert!(meta["tenantci.io/dispatcher"].as_str().is_some(), "{meta}");
    let text = meta.to_string();
    assert!(
        !text.contains(&ex.token) && !text.contains(&secret),
        "{text}"
    );
    assert!(
        !sandbox["entrypoint"].to_string().contains(&ex.token),
        "the capability is not in the entrypoint"
    );
    // The API itself (what anyone with the key sees) never returns the env.
    let listed = w
        .opensandbox
        .client()
        .list(&Default::default())
        .await
        .unwrap();
    assert!(!format!("{listed:?}").contains(&ex.token));
    let image = sandbox["image"]["uri"].as_str().unwrap();
    assert!(image.contains("@sha256:"), "pinned by digest: {image}");
    assert_eq!(sandbox["timeout"], 11400, "3h10m covers Gitea's 3 h limit");
    ex.run(task).await;
    w.no_sandboxes_left().await;
}

/// kill -9 of the dispatcher with a sandbox running and a vm assignment queued behind it; the
/// restarted dispatcher recovers the VM slot from the sandbox's metadata: each task ends
/// once, one sandbox per task, never two at once, nothing left in the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_with_a_sandbox_running_and_a_vm_task_queued_loses_nothing() {
    let w = world(1, 1).await;
    let mut d = w.dispatcher("d1").await;
    let j1 = w.enqueue_vm("first", "s1").await;
    let j2 = w.enqueue_vm("second", "s2").await;
    let t1 = w.claimed(j1).await;
    w.vm_executor(t1).await;
    let t2 = w.claimed(j2).await;
    // Killed once both are in the queue: a kill between Gitea's answer to FetchTask and the
    // first write loses the claim by design (Gitea fails it after 10 minutes); not this test.
    eventually("both tasks queued", || async {
        (d.metric("tenantci_dispatch_tasks_claimed_total").await == Some(2.0)).then_some(())
    })
    .await;
    d.kill9();
    let d = w.dispatcher("d1").await;
    w.vm_executor(t1).await.run(t1).await;
    w.vm_executor(t2).await.run(t2).await;
    w.assert_ran_once(&[j1, j2]).await;
    w.no_sandboxes_left().await;
    let stats = w.sandbox_stats().await;
    assert_eq!(stats["maxLive"], 1, "{stats}");
    assert_eq!(stats["created"], 2, "one sandbox per task: {stats}");
    let log = d.log_text();
    assert!(log.contains("recovered VM sandboxes"), "{log}");
}

/// A sandbox the platform fails: FAILURE at Gitea with a line naming the sandbox and the
/// reason, then the sandbox is deleted and its slot taken by the next vm task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_sandbox_is_reported_as_failure_and_deleted() {
    let w = world(1, 1).await;
    let _d = w.dispatcher("d1").await;
    let task = w.claimed(w.enqueue_vm("doomed", "s").await).await;
    w.vm_executor(task).await;
    let id = w.sandboxes_of(task).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    w.opensandbox.fail(w.http(), &id).await;
    let view = failed_at_gitea(&w, task).await;
    let logs = view["logs"].to_string();
    assert!(
        logs.contains(&format!("the VM sandbox {id} failed")),
        "{view}"
    );
    w.no_sandboxes_left().await;
    let next = w.claimed(w.enqueue_vm("next", "s").await).await;
    w.vm_executor(next).await.run(next).await;
    w.assert_succeeded_once(next).await;
}

/// OpenSandbox answering 503 for 20 s while two vm tasks arrive: no task fails; both run
/// once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opensandbox_answering_503_for_20s_fails_no_task() {
    let w = world(1, 1).await;
    let d = w.dispatcher("d1").await;
    // After the VM backend's recovery, so the outage meets the worker's starts.
    vm_backend_recovered(&d).await;
    w.opensandbox
        .outage(w.http(), 503, Duration::from_secs(20))
        .await;
    let jobs = [
        w.enqueue_vm("during-1", "s").await,
        w.enqueue_vm("during-2", "s").await,
    ];
    for job in jobs {
        let task = w.claimed(job).await;
        w.vm_executor(task).await.run(task).await;
    }
    w.assert_ran_once(&jobs).await;
    w.no_sandboxes_left().await;
    let log = d.log_text();
    assert!(
        log.contains("the sandbox is not created yet"),
        "the outage was met: {log}"
    );
}

/// A sandbox whose executor never fetches its task (it never booted) is replaced by attempt 2
/// after the start deadline, keeping its slot; attempt 2 runs the task once, attempt 1's
/// capability gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sandbox_that_never_fetches_is_replaced_by_attempt_two() {
    let mut w = world(1, 1).await;
    w.with_start_deadline(Duration::from_secs(2), 3);
    let d = w.dispatcher("d1").await;
    let task = w.claimed(w.enqueue_vm("stuck", "s").await).await;
    let first = w.vm_executor(task).await;
    let second = eventually("attempt 2's sandbox", || async {
        let found = w.sandboxes_of(task).await;
        found
            .iter()
            .find(|s| s["metadata"]["tenantci.io/attempt"] == "2")
            .map(tenantci_testkit::executor::Executor::from_sandbox)
    })
    .await;
    assert_ne!(first.token, second.token, "a fresh capability");
    assert!(
        first
            .own()
            .fetch_task(0)
            .await
            .map(|r| r.task.is_none())
            .unwrap_or(true),
        "the replaced attempt gets nothing"
    );
    second.run(task).await;
    w.assert_succeeded_once(task).await;
    w.no_sandboxes_left().await;
    let stats = w.sandbox_stats().await;
    assert_eq!(
        (stats["created"].as_u64(), stats["maxLive"].as_u64()),
        (Some(2), Some(1)),
        "{stats}"
    );
    assert!(
        d.log_text()
            .contains("its sandbox was replaced by attempt 2")
    );
}

/// A create the Lifecycle API refuses as invalid (400): the task fails at once, with the
/// API's code and message in its log, instead of waiting in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_the_api_refuses_fails_the_task_with_the_apis_message() {
    let w = world(1, 1).await;
    let d = w.dispatcher("d1").await;
    vm_backend_recovered(&d).await;
    // Every call answers 400 from now on (long past the end of the test).
    w.opensandbox
        .outage(w.http(), 400, Duration::from_secs(300))
        .await;
    let task = w.claimed(w.enqueue_vm("refused", "s").await).await;
    let view = failed_at_gitea(&w, task).await;
    let logs = view["logs"].to_string();
    assert!(
        logs.contains("refused the request (INVALID_REQUEST: the request is not valid"),
        "{view}"
    );
}

/// A Lifecycle API key OpenSandbox refuses stops `dispatch run` at start (exit 2), in one
/// sentence naming the key file and never showing a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_wrong_opensandbox_key_at_start_naming_the_file() {
    let mut w = World::start(1).await;
    let wrong = w.dir.path().join("wrong-opensandbox.key");
    // 0600: a key file open to other accounts is refused before the API is asked.
    tenantci_core::fsutil::write_atomic(&wrong, b"not-the-key\n", 0o600).unwrap();
    w.with_vm(1, &wrong);
    let config = w.config_only("d1");
    let out = run(tenantci()
        .args(["dispatch", "run", "--config"])
        .arg(&config));
    assert_exit(&out, 2);
    let err = stderr(&out);
    let first = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(first.contains(wrong.to_str().unwrap()), "{err}");
    assert!(err.contains("help:"), "{err}");
    assert!(
        !err.contains("not-the-key") && !err.contains(&w.opensandbox.api_key()),
        "{err}"
    );
}
