//! `tenantci dispatch run` against the Gitea double playing Forgejo (`sim --gitea --forgejo`,
//! issue 31): one FetchTask claims as many tasks as there are free slots, a FetchTask answer
//! lost on its way back is recovered through the request key (the task runs once, no zombie
//! sweep needed), and the rest of the dispatcher (kill -9, the VM backend, identity) works as
//! against Gitea. The executor is played through the facade as in every dispatch test.

use std::time::Duration;

use serde_json::json;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::eventually;

use super::harness::{NAMESPACE, World};
use crate::util::{assert_exit, stderr, tenantci};

async fn stats(w: &World) -> serde_json::Value {
    w.gitea.admin(w.http(), "stats").await
}

/// The double's FetchTask calls that handed out tasks (the others were idle).
async fn claiming_calls(w: &World) -> u64 {
    stats(w).await["fetch_task_calls_with_tasks"]
        .as_u64()
        .unwrap()
}

fn task_ids(secrets: &[k8s_openapi::api::core::v1::Secret]) -> Vec<i64> {
    secrets
        .iter()
        .map(|s| {
            s.metadata.labels.as_ref().unwrap()["tenantci.io/task-id"]
                .parse()
                .unwrap()
        })
        .collect()
}

/// Waits until `n` executor Secrets exist; their task ids.
async fn executors(w: &World, n: usize) -> Vec<i64> {
    eventually("the batch's executors", || async {
        let s = w.secrets().await;
        (s.len() == n).then(|| task_ids(&s))
    })
    .await
}

/// Waits until the scheduler counts no executor running and nothing queued (its gauges are
/// read at each FetchTask, which the held double keeps idle), so its next claim sees every
/// slot free.
async fn all_slots_free(d: &super::harness::Dispatcher) {
    eventually("every slot free", || async {
        let in_use = d.metric("tenantci_dispatch_capacity_in_use").await?;
        let queued = d.metric("tenantci_dispatch_queue_depth").await?;
        (in_use == 0.0 && queued == 0.0).then_some(())
    })
    .await
}

/// 12 jobs at once at capacity 4: each claiming FetchTask takes a full batch of 4. The
/// double holds the waiting jobs while a batch runs (as jobs waiting on a concurrency
/// group), so every claim sees all 4 slots free; idle FetchTasks are not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_12_at_capacity_4_is_claimed_in_3_fetches() {
    let w = World::start_forgejo(4).await;
    assert_eq!(stats(&w).await["forge"], "forgejo");
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    // The burst arrives at once: held while it is enqueued one by one, so that a FetchTask
    // falling between two enqueues cannot claim the first job alone.
    w.gitea
        .admin_post(w.http(), "hold", json!({"hold": true}))
        .await;
    let mut jobs = Vec::new();
    for i in 0..12 {
        jobs.push(
            w.enqueue(&format!("burst-{i}"), &format!("s3cr3t-{i}"))
                .await,
        );
    }
    w.gitea
        .admin_post(w.http(), "hold", json!({"hold": false}))
        .await;
    for batch in 0..3u64 {
        let tasks = executors(&w, 4).await;
        w.gitea
            .admin_post(w.http(), "hold", json!({"hold": true}))
            .await;
        assert_eq!(
            claiming_calls(&w).await,
            batch + 1,
            "batch {batch} in one FetchTask"
        );
        for t in &tasks {
            w.executor(*t).await.run(*t).await;
        }
        w.all_cleaned_up().await;
        all_slots_free(&d).await;
        w.gitea
            .admin_post(w.http(), "hold", json!({"hold": false}))
            .await;
    }
    w.assert_ran_once(&jobs).await;
    assert_eq!(claiming_calls(&w).await, 3);
    assert!(w.watch.max_live() <= 4, "saw {}", w.watch.max_live());
    assert!(w.watch.creations().values().all(|n| *n == 1));
    drop(d);
}

/// The same burst against Gitea, which hands out one task per FetchTask: 12 claiming calls
/// (the contrast the Forgejo test is about).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_burst_on_gitea_takes_one_fetch_per_task() {
    let w = World::start(4).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let mut jobs = Vec::new();
    for i in 0..12 {
        jobs.push(
            w.enqueue(&format!("burst-{i}"), &format!("s3cr3t-{i}"))
                .await,
        );
    }
    let mut done = std::collections::BTreeSet::new();
    while done.len() < 12 {
        // Whichever executors exist now and have not run yet: run each.
        let fresh = eventually("a new executor", || async {
            let ids = task_ids(&w.secrets().await);
            let fresh: Vec<i64> = ids.into_iter().filter(|t| !done.contains(t)).collect();
            (!fresh.is_empty()).then_some(fresh)
        })
        .await;
        for t in fresh {
            w.executor(t).await.run(t).await;
            done.insert(t);
        }
    }
    w.all_cleaned_up().await;
    w.assert_ran_once(&jobs).await;
    assert_eq!(claiming_calls(&w).await, 12);
    drop(d);
}

/// The double claims a task and loses its answer; the dispatcher repeats the FetchTask with
/// the same request key and Forgejo hands the task out again: it runs once, in one Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_fetch_answer_is_recovered_by_its_request_key_and_runs_once() {
    let w = World::start_forgejo(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    w.gitea
        .admin_post(w.http(), "drop-fetch", json!({"count": 1}))
        .await;
    let job = w.enqueue("lost-answer", "s3cr3t-lost").await;
    let task = w.claimed(job).await;
    let ex = w.executor(task).await;
    ex.run(task).await;
    w.assert_succeeded_once(task).await;
    w.all_cleaned_up().await;
    let s = stats(&w).await;
    assert_eq!(s["answers_dropped"], 1, "{s}");
    assert_eq!(s["tasks_recovered"], 1, "{s}");
    assert_eq!(w.watch.creations().len(), 1, "{:?}", w.watch.creations());
    assert_eq!(
        d.metric("tenantci_dispatch_fetch_task_answers_lost_total")
            .await,
        Some(0.0),
        "nothing left for the zombie sweep"
    );
    assert!(d.log_text().contains("same request key"));
}

/// Holds (or releases) every waiting job at the double: while held, FetchTask assigns nothing,
/// so jobs enqueued meanwhile are claimed together when released.
async fn hold(w: &World, hold: bool) {
    w.gitea
        .admin_post(w.http(), "hold", json!({ "hold": hold }))
        .await;
}

/// The order the request key exists for (issue 46). The answer to a FetchTask that claims two
/// tasks is lost while Forgejo still works on the call, so its key stays locked; the
/// dispatcher's repeat with that key is refused as locked (`internal`, "request key is
/// currently locked; retry soon"); its next repeat, still with the same key, gets both tasks
/// back. Each runs once, in one Pod, and nothing is left for the zombie sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repeat_refused_as_locked_keeps_its_key_and_recovers_every_task_once() {
    let w = World::start_forgejo(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    hold(&w, true).await;
    let jobs = [
        w.enqueue("locked-0", "s3cr3t-0").await,
        w.enqueue("locked-1", "s3cr3t-1").await,
    ];
    w.gitea
        .admin_post(
            w.http(),
            "drop-fetch",
            json!({"count": 1, "while_working": true}),
        )
        .await;
    hold(&w, false).await;
    for t in executors(&w, 2).await {
        w.executor(t).await.run(t).await;
    }
    w.assert_ran_once(&jobs).await;
    w.all_cleaned_up().await;
    let s = stats(&w).await;
    assert_eq!(s["answers_dropped"], 1, "{s}");
    assert_eq!(s["refused_locked"], 1, "{s}");
    assert_eq!(s["tasks_recovered"], 2, "{s}");
    assert_eq!(
        claiming_calls(&w).await,
        2,
        "the lost call and the recovery"
    );
    assert_eq!(w.watch.creations().len(), 2, "{:?}", w.watch.creations());
    assert!(w.watch.creations().values().all(|n| *n == 1));
    assert_eq!(
        d.metric("tenantci_dispatch_fetch_task_answers_lost_total")
            .await,
        Some(0.0),
        "nothing left for the zombie sweep"
    );
    let log = d.log_text();
    let lost = log
        .find("same request key")
        .expect("the lost answer is logged");
    let locked = log
        .find("answered `locked`")
        .expect("the refusal is logged");
    assert!(lost < locked, "lost first, then refused as locked");
}

/// Forgejo 14.0.0 and 14.0.1 could answer with `additional_tasks` and no `task` (issue 46):
/// every task of such an answer is assigned, queued and run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forgejo_14_0_1_s_answer_without_a_first_task_runs_every_task_once() {
    let w = World::start_forgejo(3).await;
    w.gitea
        .admin_post(
            w.http(),
            "version",
            json!({"version": "14.0.1+gitea-1.22.0"}),
        )
        .await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    hold(&w, true).await;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(w.enqueue(&format!("v14-{i}"), &format!("s3cr3t-{i}")).await);
    }
    hold(&w, false).await;
    for t in executors(&w, 3).await {
        w.executor(t).await.run(t).await;
    }
    w.assert_ran_once(&jobs).await;
    w.all_cleaned_up().await;
    let s = stats(&w).await;
    assert_eq!(s["answers_without_task"], 1, "{s}");
    assert_eq!(claiming_calls(&w).await, 1, "{s}");
    assert_eq!(w.watch.creations().len(), 3, "{:?}", w.watch.creations());
    assert!(w.watch.creations().values().all(|n| *n == 1));
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dispatcher_restarts_and_every_task_ends_exactly_once() {
    let w = World::start_forgejo(2).await;
    let mut d = w.dispatcher("d1").await;
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(w.enqueue(&format!("job-{i}"), &format!("s3cr3t-{i}")).await);
    }
    let a = w.claimed(jobs[0]).await;
    let b = w.claimed(jobs[1]).await;
    let (ea, eb) = (w.executor(a).await, w.executor(b).await);
    assert_eq!(ea.fetch().await.id, a);
    d.kill9();
    let d = w.dispatcher("d1").await;
    ea.finish(a, &[&format!("ran task {a}")]).await;
    eb.run(b).await;
    for job in &jobs[2..] {
        let t = w.claimed(*job).await;
        w.executor(t).await.run(t).await;
    }
    w.all_cleaned_up().await;
    for job in &jobs {
        let view = w.job(*job).await;
        w.assert_succeeded_once(view["task_id"].as_i64().unwrap())
            .await;
    }
    assert_eq!(w.watch.creations().len(), 4);
    assert!(w.watch.creations().values().all(|n| *n == 1));
    drop(d);
}

/// One vm task and one pod task, claimed together in one FetchTask (capacity 1 + 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vm_task_and_a_pod_task_run_from_one_fetch() {
    let mut w = World::start_forgejo(1).await;
    let key = w.opensandbox.api_key_file.clone();
    w.with_vm(1, &key);
    let d = w.dispatcher("d1").await;
    // Both pools' free slots known, so the one FetchTask after the release asks for 2.
    super::vm::both_backends_recovered(&d).await;
    w.gitea
        .admin_post(w.http(), "hold", json!({"hold": true}))
        .await;
    let vm_job = w.enqueue_vm("vm-1", "vm-s3cr3t").await;
    let pod_job = w.enqueue("pod-1", "pod-s3cr3t").await;
    w.gitea
        .admin_post(w.http(), "hold", json!({"hold": false}))
        .await;
    let vm_task = w.claimed(vm_job).await;
    let pod_task = w.claimed(pod_job).await;
    w.vm_executor(vm_task).await.run(vm_task).await;
    w.executor(pod_task).await.run(pod_task).await;
    w.assert_succeeded_once(vm_task).await;
    w.assert_succeeded_once(pod_task).await;
    assert_eq!(claiming_calls(&w).await, 1, "both from one FetchTask");
    w.no_sandboxes_left().await;
    w.all_cleaned_up().await;
}

/// Identity on: the task Pod's proxy presents its SVID and the task runs to success.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_a_task_runs_through_its_proxy_with_its_svid() {
    let mut w = World::start_forgejo_with_spire(1).await;
    w.with_identity().await;
    let d = w.dispatcher("d1").await;
    let job = w.enqueue("build", "s3cr3t-build").await;
    let task = w.claimed(job).await;
    let (secret, pod) = w.objects(task).await;
    let entry = w.task_entry_served(task).await;
    let endpoint = w.spire.as_ref().unwrap().endpoint("ci", &entry);
    let proxy = PodProxy::start_with(tenantci(), &secret, &pod, &[], Some(&endpoint));
    let ex = Executor::through(&secret, &proxy);
    assert_eq!(ex.fetch().await.id, task);
    ex.finish(task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(task).await;
    w.all_cleaned_up().await;
    w.no_task_entries().await;
    assert_eq!(entry, format!("{NAMESPACE}.gitea-task-{task}"));
    assert!(d.log_text().contains("serving SPIFFE mTLS"));
}

/// Forgejo's waiting-jobs API read by the leader (`[waiting_jobs]`): with polling slowed to
/// an hour, a job the dispatcher serves is claimed because the list woke the scheduler, and a
/// job nobody here can run is exported as unserved demand by its labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_jobs_wake_the_scheduler_and_unserved_demand_is_exported() {
    let mut w = World::start_forgejo(2).await;
    let token = w.gitea.api_token.clone();
    w.with_fetch_interval(Duration::from_secs(3600));
    w.with_waiting_jobs("orgs/acme", &token, Duration::from_millis(200));
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    // The startup FetchTask has happened and found nothing: from now on only a nudge polls.
    eventually(
        "the first idle FetchTask and a read of the list",
        || async {
            let calls = d.metric("tenantci_dispatch_fetch_task_calls_total").await?;
            let reads = d
                .metric("tenantci_dispatch_forge_waiting_jobs_reads_total")
                .await?;
            (calls >= 1.0 && reads >= 1.0).then_some(())
        },
    )
    .await;
    let gpu = w
        .gitea
        .enqueue(w.http(), "gpu-job", &["self-hosted", "gpu"], "s3cr3t-gpu")
        .await;
    let job = w.enqueue("woken", "s3cr3t-woken").await;
    let task = w.claimed(job).await;
    w.executor(task).await.run(task).await;
    w.assert_succeeded_once(task).await;
    let unserved =
        r#"tenantci_dispatch_forge_waiting_jobs{runs_on="gpu,self-hosted",servable="false"}"#;
    eventually("the gpu job exported as unserved demand", || async {
        (d.metric(unserved).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(
        d.metric(r#"tenantci_dispatch_forge_waiting_jobs_reads_total{outcome="nudge"}"#)
            .await
            .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(
        w.job(gpu).await["status"],
        "waiting",
        "nobody here runs on gpu"
    );
    w.all_cleaned_up().await;
    drop(d);
}

/// A token the forge refuses: the read fails (counted, logged once) and claiming goes on by
/// polling, as without `[waiting_jobs]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_waiting_jobs_token_leaves_claiming_to_polling() {
    let mut w = World::start_forgejo(1).await;
    w.with_waiting_jobs("admin", "not-the-token", Duration::from_millis(200));
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let job = w.enqueue("polled", "s3cr3t-polled").await;
    let task = w.claimed(job).await;
    w.executor(task).await.run(task).await;
    w.assert_succeeded_once(task).await;
    eventually("the refused reads counted", || async {
        let errors = d
            .metric(r#"tenantci_dispatch_forge_waiting_jobs_reads_total{outcome="error"}"#)
            .await?;
        (errors >= 2.0).then_some(())
    })
    .await;
    let log = d.log_text();
    assert_eq!(
        log.matches("cannot read Forgejo's waiting jobs").count(),
        1,
        "one line per spell of failures"
    );
    assert!(!log.contains("not-the-token"), "the token is never logged");
    w.all_cleaned_up().await;
}

/// What `forgejo-runner one-job` sends, through the executor's proxy: FetchTask with a
/// capacity and a request key gets the one handed-out task (nothing more), and RunnerService
/// calls the facade does not serve (`FetchSingleTask`, `UpdateJobSummary`) are `not_found`,
/// as a Connect client reads an RPC its server lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forgejo_runner_s_calls_through_the_proxy_get_the_one_task() {
    let w = World::start_forgejo(2).await;
    let d = w.dispatcher("d1").await;
    let job = w.enqueue("one-job", "s3cr3t-one").await;
    let task = w.claimed(job).await;
    let (secret, pod) = w.objects(task).await;
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    let got = eventually("the facade to hand out the task", || async {
        ex.own()
            .fetch_tasks(0, Some(4), Some("0b8f6a52-1d3e-4a4e-9c57-3f7f2f1c9a10"))
            .await
            .ok()?
            .task
    })
    .await;
    assert_eq!(got.id, task);
    for method in ["FetchSingleTask", "UpdateJobSummary"] {
        let resp = w
            .http()
            .post(format!(
                "{}/api/actions/runner.v1.RunnerService/{method}",
                proxy.address
            ))
            .header("content-type", "application/json")
            .body(format!(r#"{{"task_id": {task}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{method}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "not_found", "{method}: {body}");
    }
    ex.finish(task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(task).await;
    w.all_cleaned_up().await;
    drop(d);
}

/// Forgejo's webhook: the double plays Forgejo's per-state events (`workflow_job_waiting`
/// signed in `X-Forgejo-Signature` and its `X-Gitea-*` copy, the job's labels at
/// `job.runs_on`); with polling slowed to an hour, the delivery is what gets the job claimed,
/// and the claim's `workflow_job_running` is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forgejo_s_waiting_event_nudges_the_scheduler() {
    let mut w = World::start_forgejo(1).await;
    w.with_webhook(Duration::from_secs(3600));
    w.with_fetch_interval(Duration::from_secs(3600));
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    w.register_hook(&d).await;
    eventually("the first idle FetchTask", || async {
        let calls = d.metric("tenantci_dispatch_fetch_task_calls_total").await?;
        (calls >= 1.0).then_some(())
    })
    .await;
    let job = w.enqueue("hooked", "s3cr3t-hooked").await;
    let task = w.claimed(job).await;
    w.executor(task).await.run(task).await;
    w.assert_succeeded_once(task).await;
    let nudge = r#"tenantci_dispatch_webhook_deliveries_total{outcome="nudge"}"#;
    let ignored = r#"tenantci_dispatch_webhook_deliveries_total{outcome="ignored"}"#;
    eventually(
        "the waiting event acted on, the running one ignored",
        || async {
            let (n, i) = (d.metric(nudge).await?, d.metric(ignored).await?);
            (n == 1.0 && i == 1.0).then_some(())
        },
    )
    .await;
    w.all_cleaned_up().await;
}

/// Bad `[waiting_jobs]` input stops `dispatch run` at start with exit 2 and one sentence: a
/// token file others may read, and the section against Gitea (which has no such list).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_waiting_jobs_input_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let mut w = World::start_forgejo(1).await;
    w.with_waiting_jobs("user", "any-token", Duration::from_secs(5));
    let file = w
        .base_mut()
        .waiting_jobs
        .as_ref()
        .unwrap()
        .token_file
        .clone();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = w.run_dispatcher_to_exit("readable");
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("the Forgejo API token file"), "{err}");
    assert!(
        !err.contains("any-token"),
        "the token is never shown: {err}"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    w.base_mut().gitea.forge = tenantci_core::forge::Forge::Gitea;
    let out = w.run_dispatcher_to_exit("on-gitea");
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("only Forgejo lists waiting jobs"), "{err}");
}
