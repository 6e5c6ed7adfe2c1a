//! `tenantci dispatch run`: the must-shows. Each test plays the executor through the
//! facade with only the executor Secret's files.

use tenantci_core::forge::gitea::connect::Code;
use tenantci_core::forge::gitea::proto::{TaskResult, TaskState, UpdateTaskRequest};

use tenantci_testkit::wait::eventually;

use super::harness::{World, store_contains};

fn secret_value(i: usize) -> String {
    format!("s3cr3t-{i}-{}", "x".repeat(24))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_tasks_with_capacity_two_all_succeed_never_more_than_two_pods() {
    let mut w = World::start(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let marker = w.pin_store().await;
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(w.enqueue(&format!("job-{i}"), &secret_value(i)).await);
    }
    let mut done = 0;
    let mut seen_objects = Vec::new();
    while done < 5 {
        // Whichever executors exist now: run each to completion.
        let secrets = eventually("an executor Secret", || async {
            let s = w.secrets().await;
            (!s.is_empty()).then_some(s)
        })
        .await;
        assert!(
            secrets.len() <= 2,
            "at most capacity executors: {}",
            secrets.len()
        );
        for s in secrets {
            let task: i64 = s.metadata.labels.as_ref().unwrap()["tenantci.io/task-id"]
                .parse()
                .unwrap();
            let pod = w.pods().await;
            seen_objects.push(serde_json::to_string(&s).unwrap());
            seen_objects.push(serde_json::to_string(&pod).unwrap());
            let ex = w.executor(task).await;
            let t = ex.run(task).await;
            assert!(
                t.secrets
                    .get("DEPLOY_KEY")
                    .is_some_and(|v| v.starts_with("s3cr3t-")),
                "the task's secrets reach the executor"
            );
            done += 1;
            // Wait for this executor to be cleaned up before looking at the next batch.
            let name = format!("gitea-task-{task}");
            eventually("the finished executor to be deleted", || async {
                (!w.secrets()
                    .await
                    .iter()
                    .any(|s| s.metadata.name.as_deref() == Some(&name)))
                .then_some(())
            })
            .await;
        }
    }
    for job in &jobs {
        let task = w.claimed(*job).await;
        let view = w.task(task).await;
        assert_eq!(view["result"], "RESULT_SUCCESS", "{view}");
        assert!(
            view["logs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str() == Some(&format!("ran task {task}"))),
            "{view}"
        );
    }
    w.all_cleaned_up().await;
    assert!(
        w.watch.max_live() <= 2,
        "never more than 2 executor Pods at once (saw {})",
        w.watch.max_live()
    );
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "one Pod per task: {:?}",
        w.watch.creations()
    );
    // No task secret in clear: not in the JetStream store, the objects, or the log.
    let log = d.log_text();
    let mut tasks = Vec::new();
    for job in &jobs {
        tasks.push(w.claimed(*job).await);
    }
    let store = w.stop_nats_and_read_store();
    let in_store = |needle: &str| store_contains(&store, needle);
    // Positive controls: the marker, and each task's assignment record (its routing fields
    // are clear text) are in the store, so the search below reads the bytes that carried
    // the sealed secrets.
    assert!(
        in_store(&marker),
        "the marker is not in the JetStream store"
    );
    for task in &tasks {
        assert!(
            in_store(&format!("\"task_id\":\"{task}\"")),
            "the assignment of task {task} is not in the JetStream store: {:?}",
            store.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
    }
    for i in 0..5 {
        let v = secret_value(i);
        assert!(!in_store(&v), "secret {i} in the JetStream store");
        assert!(!log.contains(&v), "secret {i} in the dispatcher log");
        assert!(
            seen_objects.iter().all(|o| !o.contains(&v)),
            "secret {i} in a Pod or Secret"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_and_borrowed_capabilities_are_refused() {
    let w = World::start(2).await;
    let _d = w.dispatcher("d1").await;
    let a = w.claimed(w.enqueue("a", "sa").await).await;
    let b = w.claimed(w.enqueue("b", "sb").await).await;
    let ea = w.executor(a).await;
    let eb = w.executor(b).await;
    // A forged token for task a.
    let forged = ea.client(&ea.uuid, &"0".repeat(64));
    let err = forged.fetch_task(0).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated), "{err}");
    // Task a's capability presented for task b.
    let borrowed = ea.client(&eb.uuid, &ea.token);
    let err = borrowed.fetch_task(0).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated), "{err}");
    // Task a's own credentials, reporting task b.
    let err = ea
        .own()
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: b,
                result: TaskResult::Failure as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied), "{err}");
    // Neither refusal changed anything: both tasks still run to success.
    ea.run(a).await;
    eb.run(b).await;
    for t in [a, b] {
        assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    }
    // Handed out once: a second FetchTask gets no task.
    assert!(
        ea.own()
            .fetch_task(0)
            .await
            .map(|r| r.task.is_none())
            .unwrap_or(true)
    );
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dispatcher_restarts_and_every_task_ends_exactly_once() {
    let w = World::start(2).await;
    let mut d = w.dispatcher("d1").await;
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(w.enqueue(&format!("job-{i}"), &secret_value(i)).await);
    }
    // Two executors in flight; one has its task, the other has not fetched it yet.
    let a = w.claimed(jobs[0]).await;
    let b = w.claimed(jobs[1]).await;
    let (ea, eb) = (w.executor(a).await, w.executor(b).await);
    assert_eq!(ea.fetch().await.id, a);
    d.kill9();
    let d = w.dispatcher("d1").await;
    // The executors carry on against the restarted facade.
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
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "no executor started twice: {:?}",
        w.watch.creations()
    );
    assert_eq!(w.watch.creations().len(), 4);
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_leader_fetches_and_a_standby_takes_over_when_it_dies() {
    let w = World::start(2).await;
    let mut d1 = w.dispatcher("d1").await;
    d1.wait_leader(true).await;
    let d2 = w.dispatcher("d2").await;
    d2.wait_up().await;
    for i in 0..2 {
        let t = w
            .claimed(w.enqueue(&format!("job-{i}"), &secret_value(i)).await)
            .await;
        w.executor(t).await.run(t).await;
    }
    w.all_cleaned_up().await;
    assert!(
        d1.metric("tenantci_dispatch_fetch_task_calls_total")
            .await
            .unwrap()
            > 0.0
    );
    assert_eq!(
        d2.metric("tenantci_dispatch_fetch_task_calls_total").await,
        Some(0.0),
        "the standby never calls FetchTask"
    );
    assert_eq!(d2.metric("tenantci_dispatch_leader").await, Some(0.0));
    d1.kill9();
    d2.wait_leader(true).await;
    let t = w
        .claimed(w.enqueue("after-failover", &secret_value(9)).await)
        .await;
    w.executor(t).await.run(t).await;
    assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    assert!(
        d2.metric("tenantci_dispatch_fetch_task_calls_total")
            .await
            .unwrap()
            > 0.0
    );
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_pod_that_vanishes_is_reported_as_failure_and_cleaned_up() {
    let w = World::start(2).await;
    let _d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("doomed", &secret_value(0)).await).await;
    let _ = w.executor(t).await;
    let pods = kube::api::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(
        w.kube.clone(),
        super::harness::NAMESPACE,
    );
    eventually("the executor Pod", || async {
        pods.get_opt(&format!("gitea-task-{t}")).await.unwrap()
    })
    .await;
    pods.delete(&format!("gitea-task-{t}"), &Default::default())
        .await
        .unwrap();
    w.assert_fails_saying(t, "vanished").await;
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_hands_the_lease_back_and_leaves_executors_running() {
    let w = World::start(2).await;
    let mut d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("long", &secret_value(0)).await).await;
    let ex = w.executor(t).await;
    assert_eq!(ex.fetch().await.id, t);
    assert_eq!(d.terminate(), Some(0), "a drained dispatcher exits 0");
    let lease = kube::api::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        w.kube.clone(),
        super::harness::NAMESPACE,
    )
    .get("dynamic-runner-scheduler")
    .await
    .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(""),
        "the lease is handed back"
    );
    assert_eq!(
        w.pods().await.len(),
        1,
        "the executor keeps running through the drain"
    );
    let _d = w.dispatcher("d1").await;
    ex.finish(t, &["done after the restart"]).await;
    assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_init_writes_runs_a_task_with_the_dispatchers_own_scoped_credential() {
    let w = World::start_via_init().await;
    let _d = w.dispatcher("d1").await;
    let t = w
        .claimed(w.enqueue("via-init", &secret_value(0)).await)
        .await;
    let task = w.executor(t).await.run(t).await;
    assert_eq!(task.secrets["DEPLOY_KEY"], secret_value(0));
    assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    w.all_cleaned_up().await;
}

/// The scheduler Lease in `namespace`, if there is one: its holder ("" once handed back).
async fn lease_holder(w: &World, namespace: &str) -> Option<String> {
    kube::api::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        w.kube.clone(),
        namespace,
    )
    .get_opt(tenantci_dispatch::leader::LEASE_NAME)
    .await
    .unwrap()
    .map(|l| l.spec.and_then(|s| s.holder_identity).unwrap_or_default())
}

/// The dispatcher in its own namespace: it holds the Lease there, and there is none in the
/// executors' namespace, where its executor Pods are.
async fn assert_the_lease_is_in_the_dispatcher_s_namespace(w: &World) {
    let own = super::harness::DISPATCHER_NAMESPACE;
    eventually("the Lease held in the dispatcher's namespace", || async {
        lease_holder(w, own).await.filter(|h| !h.is_empty())
    })
    .await;
    assert_eq!(
        lease_holder(w, super::harness::NAMESPACE).await,
        None,
        "no Lease where the executors are"
    );
}

/// Any cluster, no gateway: `dispatch init --kubeconfig` with an administrator's kubeconfig
/// and no state dir writes a config that names no kubeconfig and mints nothing; the dispatcher
/// runs a task end to end with only what init bound to its ServiceAccount, which lives in a
/// namespace of its own (`tenantci-system`, its Lease there) while the executor Pod is in
/// `dynamic-runner`, reached through the Role bound across namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn init_with_a_kubeconfig_and_no_state_dir_runs_a_task_as_the_service_account() {
    let w = World::start_via_kubeconfig_init().await;
    let cfg = w.config_path("d1");
    let dir = cfg.parent().unwrap();
    assert!(
        !dir.join("kube").exists(),
        "no credential minted: the ServiceAccount is the credential"
    );
    let written = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(!written.contains("kubeconfig"), "{written}");
    let loaded = tenantci_dispatch::config::Config::load(&dir.join("config.toml")).unwrap();
    assert_eq!(loaded.cluster.namespace, super::harness::NAMESPACE);
    assert_eq!(
        loaded.cluster.dispatcher_namespace(),
        super::harness::DISPATCHER_NAMESPACE
    );
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    assert_the_lease_is_in_the_dispatcher_s_namespace(&w).await;
    assert_eq!(
        d.metric("tenantci_dispatch_credential_expiry_days").await,
        None,
        "no credential of its own to expire"
    );
    let t = w
        .claimed(w.enqueue("via-kubeconfig", &secret_value(0)).await)
        .await;
    let task = w.executor(t).await.run(t).await;
    assert_eq!(task.secrets["DEPLOY_KEY"], secret_value(0));
    w.assert_succeeded_once(t).await;
    w.all_cleaned_up().await;
}

/// The in-cluster path end to end: `dispatch init --kubeconfig --apply-secret` with no state
/// dir, then the dispatcher runs from nothing but the ConfigMap and Secret init applied,
/// projected into one directory as manifests/dispatch's Deployment projects them and with its
/// environment (the NATS passwords from the Secret, no kubeconfig), as its ServiceAccount; a
/// task runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_runs_from_the_config_and_secret_init_applied_for_the_deployment() {
    let w = World::start_from_in_cluster_objects().await;
    let cfg = tenantci_dispatch::config::Config::load(&w.config_only("d1")).unwrap();
    assert!(
        cfg.nats.secrets_dir.ends_with("pod-volume"),
        "the passwords come from the Secret: {}",
        cfg.nats.secrets_dir.display()
    );
    assert_eq!(cfg.cluster.kubeconfig, None);
    assert_eq!(
        cfg.cluster.dispatcher_namespace(),
        super::harness::DISPATCHER_NAMESPACE,
        "the Pod's own namespace (the downward API)"
    );
    let _d = w.dispatcher("d1").await;
    assert_the_lease_is_in_the_dispatcher_s_namespace(&w).await;
    let t = w
        .claimed(w.enqueue("from-the-secret", &secret_value(0)).await)
        .await;
    let task = w.executor(t).await.run(t).await;
    assert_eq!(task.secrets["DEPLOY_KEY"], secret_value(0));
    w.assert_succeeded_once(t).await;
    w.all_cleaned_up().await;
}

/// NATS over TLS with a private CA (`tls://`, `nats.ca_file`): without the CA the server's
/// certificate is not trusted and the start fails naming NATS (exit 3); with it a task runs
/// end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_runs_over_nats_tls_with_a_private_ca() {
    let mut w = World::start_tls_nats(1).await;
    assert!(w.nats.url.starts_with("tls://"), "{}", w.nats.url);
    let ca = w.base_mut().nats.ca_file.take();
    let out = w.run_dispatcher_to_exit("untrusting");
    crate::util::assert_exit(&out, 3);
    let err = crate::util::stderr(&out);
    assert!(err.contains("cannot reach NATS at tls://"), "{err}");
    let not_pem = w.nats.dir().join("not-a-ca.crt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    w.base_mut().nats.ca_file = Some(not_pem);
    let out = w.run_dispatcher_to_exit("bad-ca");
    crate::util::assert_exit(&out, 2);
    assert!(
        crate::util::stderr(&out).contains("holds no PEM certificate"),
        "{}",
        crate::util::stderr(&out)
    );
    w.base_mut().nats.ca_file = ca;
    let _d = w.dispatcher("d1").await;
    let t = w
        .claimed(w.enqueue("over-tls", &secret_value(0)).await)
        .await;
    w.executor(t).await.run(t).await;
    w.assert_succeeded_once(t).await;
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_waiting_for_its_executor_is_kept_alive_at_gitea() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let t = w
        .claimed(w.enqueue("waiting", &secret_value(0)).await)
        .await;
    let ex = w.executor(t).await;
    // Nobody fetches the task; the scheduler's non-final UpdateTask moves updated_at on.
    let first = w.task(t).await["updated_at"].as_str().unwrap().to_string();
    eventually("a keep-alive UpdateTask", || async {
        let now = w.task(t).await["updated_at"].as_str().unwrap().to_string();
        (now != first).then_some(())
    })
    .await;
    assert_eq!(
        w.task(t).await["state"],
        "running",
        "a keep-alive does not finish the task"
    );
    ex.run(t).await;
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_facade_url_with_port_0_gives_executors_the_bound_port() {
    let w = World::start(1).await;
    let d = w.dispatcher_on_any_port("d1").await;
    assert_eq!(
        d.facade_url,
        format!("https://127.0.0.1:{}", d.facade.port()),
        "the listening line advertises the bound port"
    );
    let t = w
        .claimed(w.enqueue("any-port", &secret_value(0)).await)
        .await;
    let ex = w.executor(t).await;
    assert_eq!(ex.address, d.facade_url, "the executor Secret's .runner");
    ex.run(t).await;
    assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    w.all_cleaned_up().await;
}

/// A dispatcher's start applies its capacities and ack_wait to the queue, and keeps what
/// `queue init` chose (max_deliver, the stream's bounds): a restart must not undo them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_keeps_the_max_deliver_and_bounds_queue_init_chose() {
    let w = World::start(2).await;
    let password = w.nats.password_file("ci-admin");
    let out = crate::util::run(
        crate::util::tenantci()
            .args(["queue", "init", "--nats", &w.nats.url, "--user", "ci-admin"])
            .arg("--password-file")
            .arg(&password)
            .args(["--pod-capacity", "2", "--max-deliver", "5"])
            .args(["--max-bytes", "1048576"]),
    );
    crate::util::assert_exit(&out, 0);
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    assert!(
        d.log_text().contains("queue topology applied"),
        "{}",
        d.log_text()
    );
    let js = async_nats::jetstream::new(w.nats.client("ci-admin").await);
    let mut stream = js
        .get_stream(tenantci_dispatch::queue::STREAM)
        .await
        .unwrap();
    assert_eq!(stream.info().await.unwrap().config.max_bytes, 1_048_576);
    let mut consumer = js
        .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
            "pod",
            tenantci_dispatch::queue::STREAM,
        )
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.config.max_deliver, 5);
    assert_eq!(info.config.max_ack_pending, 2);
}
