//! Resource classes (`[[executor.class]]`) against the simulator's rented nodes (which boot
//! for a second) and its Gitea double: a job's `runs-on` label picks its class, its executor
//! Pod is sized and placed by it, each class holds its own capacity, and a job whose labels
//! pick no class or two is reported FAILURE with the reason. The harness registered the
//! dispatcher without the class labels: the dispatcher declares them itself, or the double
//! would never hand it a class's job.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use tenantci_dispatch::sizing::class::ExecutorClass;
use tenantci_testkit::wait::eventually;

use super::harness::World;

const SMALL: [&str; 3] = ["self-hosted", "pod", "small"];
const LARGE: [&str; 3] = ["self-hosted", "pod", "large"];

fn class(name: &str, cpu: &str, memory: &str, capacity: u32) -> ExecutorClass {
    ExecutorClass::pod(name, cpu, memory, capacity)
}

/// A world at pod capacity 4 with two classes on the runbook's node (2 vCPU, 2048 MiB):
/// `small` (500m, 512Mi, 2 at once, tolerating a `ci` taint) and `large` (1800m, 1536Mi,
/// 1 at once, on amd64 nodes): two small ones share a rented node, a large one fills it.
async fn world() -> World {
    let mut w = World::start_with_sim_flags(4, &["--node-boot", "1s"]).await;
    let mut small = class("small", "500m", "512Mi", 2);
    small.tolerations = Some(vec![Toleration {
        key: Some("ci".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    let mut large = class("large", "1800m", "1536Mi", 1);
    large.node_selector = Some(BTreeMap::from([(
        "kubernetes.io/arch".into(),
        "amd64".into(),
    )]));
    w.base_mut().executor.classes = vec![small, large];
    w
}

async fn enqueue(w: &World, name: &str, runs_on: &[&str]) -> i64 {
    w.gitea.enqueue(w.http(), name, runs_on, "s3cret").await
}

/// The live executor Pods of `class`, once each is bound to a node.
async fn bound_pods_of(w: &World, class: &str, n: usize) -> Vec<Pod> {
    eventually(&format!("{n} bound {class} executor Pods"), || async {
        let pods: Vec<Pod> = w
            .pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.labels.as_ref().unwrap()["tenantci.io/class"] == class)
            .collect();
        let bound = pods
            .iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.is_some());
        (pods.len() == n && bound).then_some(pods)
    })
    .await
}

fn runner_request(pod: &Pod, resource: &str) -> String {
    let spec = pod.spec.as_ref().unwrap();
    let runner = spec.containers.iter().find(|c| c.name == "runner").unwrap();
    runner
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()[resource]
        .0
        .clone()
}

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().node_name.clone().unwrap()
}

fn task_of(pod: &Pod) -> i64 {
    pod.metadata.labels.as_ref().unwrap()["tenantci.io/task-id"]
        .parse()
        .unwrap()
}

async fn run_and_wait_gone(w: &World, task: i64) {
    w.executor(task).await.run(task).await;
    let name = format!("gitea-task-{task}");
    eventually("the executor Pod to be deleted", || async {
        (!w.pods()
            .await
            .iter()
            .any(|p| p.metadata.name.as_ref() == Some(&name)))
        .then_some(())
    })
    .await;
}

/// Three small and two large jobs at once: the first wave is two small Pods sharing one
/// rented node and one large Pod alone on another, each sized and placed by its class; the
/// third small and second large start only as their class frees a slot (never more than 2
/// small or 1 large live, though the pod backend has 4), and all five run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_get_executors_of_their_class_on_nodes_that_fit_and_each_class_holds_its_capacity() {
    let w = world().await;
    let d = w.dispatcher("d1").await;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(enqueue(&w, &format!("lint-{i}"), &SMALL).await);
    }
    for i in 0..2 {
        jobs.push(enqueue(&w, &format!("compile-{i}"), &LARGE).await);
    }
    let small = bound_pods_of(&w, "small", 2).await;
    let large = bound_pods_of(&w, "large", 1).await;
    for p in &small {
        assert_eq!(runner_request(p, "cpu"), "500m");
        assert_eq!(runner_request(p, "memory"), "512Mi");
        let tolerations = p.spec.as_ref().unwrap().tolerations.clone().unwrap();
        assert_eq!(tolerations[0].key.as_deref(), Some("ci"));
    }
    assert_eq!(runner_request(&large[0], "cpu"), "1800m");
    assert_eq!(runner_request(&large[0], "memory"), "1536Mi");
    let selector = large[0]
        .spec
        .as_ref()
        .unwrap()
        .node_selector
        .clone()
        .unwrap();
    assert_eq!(selector["kubernetes.io/arch"], "amd64");
    assert_eq!(
        node_of(&small[0]),
        node_of(&small[1]),
        "two small executors share a rented node"
    );
    assert_ne!(
        node_of(&large[0]),
        node_of(&small[0]),
        "a large one has a node to itself"
    );
    // The first wave, then the two that waited for their class's slot.
    for p in small.iter().chain(&large) {
        run_and_wait_gone(&w, task_of(p)).await;
    }
    let rest = [
        bound_pods_of(&w, "small", 1).await,
        bound_pods_of(&w, "large", 1).await,
    ];
    for p in rest.iter().flatten() {
        run_and_wait_gone(&w, task_of(p)).await;
    }
    w.assert_ran_once(&jobs).await;
    assert_eq!(w.watch.max_live_of_class("small"), 2);
    assert_eq!(w.watch.max_live_of_class("large"), 1);
    assert_eq!(
        d.metric("tenantci_dispatch_tasks_failed_total").await,
        Some(0.0)
    );
    w.all_cleaned_up().await;
}

/// A job whose runs-on names no class, and one that names two, are reported FAILURE at Gitea
/// with the reason, and no executor is started for them; a small job after them runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_matching_no_class_or_two_classes_is_reported_failure_with_the_reason() {
    let w = world().await;
    let _d = w.dispatcher("d1").await;
    for (name, runs_on, reason) in [
        (
            "unsized",
            &["self-hosted", "pod"][..],
            "names no executor class of this dispatcher; add one of the labels [\"small\", \"large\"]",
        ),
        (
            "greedy",
            &["self-hosted", "pod", "small", "large"][..],
            "names 2 executor classes (`small` by `small`, `large` by `large`)",
        ),
    ] {
        let task = w.claimed(enqueue(&w, name, runs_on).await).await;
        let view = eventually("FAILURE at Gitea", || async {
            let v = w.task(task).await;
            (v["result"] == "RESULT_FAILURE").then_some(v)
        })
        .await;
        let logs = view["logs"].as_array().unwrap();
        assert!(
            logs.iter()
                .any(|l| l.as_str().is_some_and(|l| l.contains(reason))),
            "{name}: {view}"
        );
    }
    let ok = enqueue(&w, "lint", &SMALL).await;
    let task = w.claimed(ok).await;
    run_and_wait_gone(&w, task).await;
    w.assert_ran_once(&[ok]).await;
    assert_eq!(
        w.watch.creations().len(),
        1,
        "one executor Pod ever: the small job's"
    );
    w.all_cleaned_up().await;
}

/// A class's slot is held across a leader's kill -9: the next leader finds the running large
/// executor (its Pod's class label) and holds its slot, so a new large job waits for it (the
/// log says why) and runs after it; never two large Pods live, both run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_holds_the_class_slot_of_an_executor_it_recovers() {
    let w = world().await;
    let mut d1 = w.dispatcher("d1").await;
    let first = enqueue(&w, "compile-0", &LARGE).await;
    let a = w.claimed(first).await;
    w.objects(a).await;
    d1.kill9();
    // The same instance again, so the executor's facade address follows it.
    let d2 = w.dispatcher("d1").await;
    d2.wait_leader(true).await;
    let second = enqueue(&w, "compile-1", &LARGE).await;
    w.claimed(second).await;
    eventually("the second large job to wait for its class", || async {
        d2.log_text()
            .contains("its class `large` has all 1 slots taken")
            .then_some(())
    })
    .await;
    run_and_wait_gone(&w, a).await;
    let rest = bound_pods_of(&w, "large", 1).await;
    run_and_wait_gone(&w, task_of(&rest[0])).await;
    w.assert_ran_once(&[first, second]).await;
    assert_eq!(w.watch.max_live_of_class("large"), 1);
    w.all_cleaned_up().await;
}

/// The replicas of `class`'s warm pool Deployment (None: not there yet).
async fn warm_replicas(w: &World, class: &str) -> Option<i32> {
    let deployments = kube::api::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        w.kube.clone(),
        super::harness::NAMESPACE,
    );
    deployments
        .get_opt(&format!("tenantci-warm-{class}"))
        .await
        .unwrap()
        .and_then(|d| d.spec.replicas)
}

/// A burst announced by webhooks while Gitea answers no FetchTask (a stall): the `small`
/// class's warm pool grows from its minimum to its maximum before any of the jobs is claimed,
/// its pause Pods sized like the class's executors; once the jobs ran and nothing arrived for
/// the idle time (2 s here), it shrinks back to its minimum. The executors started while the
/// pool held warm slots count as warm hits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_warm_pool_grows_ahead_of_an_announced_burst_and_shrinks_to_its_minimum_when_idle() {
    let mut w = World::start_with_sim_flags(6, &["--node-boot", "1s"]).await;
    w.with_webhook(std::time::Duration::from_secs(5));
    let mut small = class("small", "500m", "512Mi", 6);
    small.warm = Some(tenantci_dispatch::sizing::class::WarmPool {
        min: 1,
        max: 4,
        idle: std::time::Duration::from_secs(2).into(),
        window: std::time::Duration::from_secs(2).into(),
    });
    w.base_mut().executor.classes = vec![small];
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    w.register_hook(&d).await;
    eventually(
        "the pool at its minimum and the labels declared",
        || async {
            (warm_replicas(&w, "small").await == Some(1)
                && d.log_text().contains("labels declared at Gitea"))
            .then_some(())
        },
    )
    .await;
    // Long enough for the pool to follow four deliveries; the jobs wait it out.
    w.gitea
        .stall(w.http(), std::time::Duration::from_secs(10))
        .await;
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(enqueue(&w, &format!("lint-{i}"), &SMALL).await);
    }
    eventually("the pool to grow to its maximum", || async {
        (warm_replicas(&w, "small").await == Some(4)).then_some(())
    })
    .await;
    for job in &jobs {
        assert!(
            w.job(*job).await["task_id"].is_null(),
            "grown before any job was claimed"
        );
    }
    let pause = eventually("a pause Pod of the pool", || async {
        w.pods().await.into_iter().find(|p| {
            p.metadata
                .labels
                .as_ref()
                .unwrap()
                .get("tenantci.io/warm-class")
                == Some(&"small".to_string())
        })
    })
    .await;
    let container = &pause.spec.as_ref().unwrap().containers[0];
    let requests = container
        .resources
        .as_ref()
        .unwrap()
        .requests
        .clone()
        .unwrap();
    assert_eq!(
        requests["cpu"].0, "510m",
        "the runner's 500m and the proxy's 10m"
    );
    for job in &jobs {
        let task = w.claimed(*job).await;
        run_and_wait_gone(&w, task).await;
    }
    w.assert_ran_once(&jobs).await;
    eventually(
        "the pool back at its minimum after the idle time",
        || async { (warm_replicas(&w, "small").await == Some(1)).then_some(()) },
    )
    .await;
    let hits = d
        .metric("tenantci_dispatch_warm_hits_total{class=\"small\"}")
        .await
        .unwrap_or(0.0);
    assert_eq!(
        hits, 4.0,
        "every executor came while the pool held warm slots"
    );
    assert!(
        d.metric("tenantci_dispatch_warm_slot_seconds_total{class=\"small\"}")
            .await
            .unwrap()
            > 0.0
    );
}

/// `dispatch init` again over the world's config, as an operator re-runs it after adding a
/// warm pool (the registration kept, so no token); the world's dispatchers then start from the
/// config it wrote. Returns init's stderr (its step lines).
fn rerun_init(w: &mut World) -> String {
    let config = w.dir.path().join("dispatch").join("config.toml");
    let o = w
        .command()
        .args(["dispatch", "init", "--gitea-url", &w.gitea.url])
        .args(["--nats", &w.nats.url, "--facade-listen", "127.0.0.1:0"])
        .args(["--cluster", tenantci_testkit::world::CLUSTER, "--state-dir"])
        .arg(w.state_dir())
        .args(tenantci_testkit::world::World::test_init_flags())
        .arg("--nats-secrets-dir")
        .arg(w.nats.secrets_dir())
        .arg("--out")
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "dispatch init failed:\n{err}");
    w.set_base(tenantci_dispatch::config::Config::load(&config).unwrap());
    err
}

/// Issue 45, the gateway path: a dispatcher set up by `dispatch init` runs with its own
/// client certificate, whose RBAC (enforced by the simulator) may not create the warm pools'
/// PriorityClass, and may read it only once init saw a warm pool in the config. A warm pool
/// added to the config without re-running init: one warning naming both ways to grant the
/// read (re-run init, or the kustomize component). Init re-run: its `rbac-warm-pools` line
/// grants the read; while the class is missing the dispatcher warns once, saying who must
/// create it; once the operator created it (with the tenant-admin kubeconfig, as told), the
/// next start finds it and warns about nothing; before, it warned "cannot apply" on every
/// start regardless.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pause_priority_class_warning_comes_only_while_the_class_is_missing() {
    use tenantci_runner::tenant::prewarm;
    let mut w = World::start_via_init().await;
    let mut small = class("small", "500m", "512Mi", 1);
    small.warm = Some(tenantci_dispatch::sizing::class::WarmPool {
        min: 1,
        max: 1,
        idle: std::time::Duration::from_secs(60).into(),
        window: std::time::Duration::from_secs(60).into(),
    });
    w.base_mut().executor.classes = vec![small];
    let config = w.dir.path().join("dispatch").join("config.toml");
    std::fs::write(&config, w.base_mut().to_toml()).unwrap();
    let ungranted = "may neither read nor create the pause PriorityClass";
    let mut d = w.dispatcher("d0").await;
    d.wait_leader(true).await;
    eventually("the warning about the read not granted", || async {
        d.log_text().contains(ungranted).then_some(())
    })
    .await;
    let log = d.log_text();
    assert!(log.contains("re-run `tenantci dispatch init`"), "{log}");
    assert!(log.contains("manifests/components/warm-pool"), "{log}");
    d.terminate();

    let steps = rerun_init(&mut w);
    assert!(
        steps.contains("rbac-warm-pools") && steps.contains("tenantci-dispatcher-pause:"),
        "{steps}"
    );
    let missing = "does not exist and the dispatcher may not create it";
    let mut d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    eventually("the warning about the missing class", || async {
        d.log_text().contains(missing).then_some(())
    })
    .await;
    assert!(d.log_text().contains("tenant prewarm"), "who creates it");
    d.terminate();

    let classes =
        kube::api::Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(w.kube.clone());
    tenantci_runner::tenant::apply::apply(&classes, &prewarm::desired_priority_class(), false)
        .await
        .unwrap();
    let d = w.dispatcher("d2").await;
    d.wait_leader(true).await;
    eventually("the class found", || async {
        d.log_text()
            .contains("the pause PriorityClass `tenantci-pause` exists")
            .then_some(())
    })
    .await;
    let log = d.log_text();
    assert!(!log.contains(missing), "{log}");
    assert!(!log.contains(ungranted), "{log}");
}
