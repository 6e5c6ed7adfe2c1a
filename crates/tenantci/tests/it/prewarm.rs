//! Rented nodes and pre-warm against the simulator (4 s node boot): a warm job starts on the
//! pre-warmed node by preempting its pause pod, a cold one waits for a rented node, the
//! preempted pause pod rents the next node, pods below -10 rent nothing, and a job larger than
//! the node image is refused. With `--gitlab-native-pause-pods` gitlab-runner keeps the pause
//! pods itself: config.toml carries `[runners.kubernetes.autoscaler]`, no Deployment exists,
//! the runner's RBAC covers its autoscaler, and switching either way is explicit.

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};

use crate::util::{assert_exit, run, scratch, stderr, tenantci};
use tenantci_testkit::kube::kube_client;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::wait::{DEADLINE, eventually};

fn job_pod(name: &str, cpu: &str, memory: &str, priority_class: Option<&str>) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "gitlab-runner"},
        "spec": {
            "priorityClassName": priority_class,
            "containers": [{"name": "build", "image": "alpine:3",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
        }
    }))
    .unwrap()
}

fn bootstrap(root: &Path, extra: &[&str]) -> std::process::Output {
    let o = bootstrap_run(root, extra);
    assert_exit(&o, 0);
    o
}

fn bootstrap_run(root: &Path, extra: &[&str]) -> std::process::Output {
    std::fs::write(root.join("token"), "glrt-prewarm\n").unwrap();
    run(tenantci()
        .args(["bootstrap", "runner", "--forge", "gitlab", "--state-dir"])
        .arg(root.join("state"))
        .args(["--cluster", "ci", "--credential-dir"])
        .arg(root.join("creds"))
        .arg("--config")
        .arg(root.join("config.toml"))
        .args([
            "--gitlab-url",
            "https://gitlab.example.com",
            "--runner-token-file",
        ])
        .arg(root.join("token"))
        // Job pods of 1400m / 1152Mi (with the helper): one per 2-vCPU node, so a job can
        // only start on a warm node by preempting its pause pod.
        .args(["--cpu-request", "1300m", "--memory-request", "1Gi"])
        .args(extra))
}

async fn wait<K, C>(api: &Api<K>, name: &str, cond: C) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    C: Condition<K>,
{
    tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, cond))
        .await
        .unwrap_or_else(|_| panic!("deadlock guard: waiting for {name}"))
        .unwrap()
        .unwrap_or_else(|| panic!("{name} was deleted"))
}

fn node_ready() -> impl Condition<Node> {
    |n: Option<&Node>| {
        n.and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

fn exists<K>() -> impl Condition<K> {
    |k: Option<&K>| k.is_some()
}

async fn pause_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app.kubernetes.io/name=tenantci-pause"))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_a_warm_job_preempts_the_pause_pod_and_the_next_node_is_rented() {
    let dir = scratch();
    let sim = SimProcess::start(
        tenantci(),
        &dir.path().join("state"),
        &["ci"],
        &["--node-boot", "4s"],
    );
    bootstrap(dir.path(), &["--prewarm", "1"]);
    let admin = kube_client(&sim.tenant_admin("ci")).await;
    let runner = kube_client(&dir.path().join("creds/kubeconfig")).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), "gitlab-runner");

    let pc: PriorityClass = Api::<PriorityClass>::all(admin.clone())
        .get("tenantci-pause")
        .await
        .unwrap();
    assert_eq!(pc.value, Some(-10));
    assert_eq!(pc.preemption_policy.as_deref(), Some("Never"));

    // The pause pod gets a node rented and runs on it once it booted.
    wait(&nodes, "rented-1", node_ready()).await;
    let pause = eventually("the pause pod", || async {
        pause_pods(&admin_pods).await.first()?.metadata.name.clone()
    })
    .await;
    let pause_pod = wait(&admin_pods, &pause, conditions::is_pod_running()).await;
    assert_eq!(
        pause_pod.spec.unwrap().node_name.as_deref(),
        Some("rented-1")
    );

    // A job-sized pod from the runner's own credential runs on the warm node at once: the only
    // other way to run would be a second node, which cannot be Ready before its 4 s boot.
    let pods: Api<Pod> = Api::namespaced(runner, "gitlab-runner");
    pods.create(
        &PostParams::default(),
        &job_pod("job-1", "1400m", "1152Mi", None),
    )
    .await
    .unwrap();
    let job = wait(&pods, "job-1", conditions::is_pod_running()).await;
    assert_eq!(
        job.spec.unwrap().node_name.as_deref(),
        Some("rented-1"),
        "the job started on the pre-warmed node"
    );
    let node2 = wait(&nodes, "rented-2", exists()).await;
    let ready2 = node2
        .status
        .unwrap()
        .conditions
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(
        !ready2,
        "the second node was still booting when the job already ran"
    );

    // The preempted pause pod is gone; the Deployment's replacement rents node 2 and runs there.
    assert!(
        admin_pods.get_opt(&pause).await.unwrap().is_none(),
        "the pause pod was preempted"
    );
    wait(&nodes, "rented-2", node_ready()).await;
    let replacement = pause_pods(&admin_pods)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() != Some(&pause))
        .expect("a replacement pause pod");
    let replacement = wait(
        &admin_pods,
        replacement.metadata.name.as_deref().unwrap(),
        conditions::is_pod_running(),
    )
    .await;
    assert_eq!(
        replacement.spec.unwrap().node_name.as_deref(),
        Some("rented-2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_without_it_a_job_waits_for_a_node_to_boot() {
    let dir = scratch();
    let sim = SimProcess::start(
        tenantci(),
        &dir.path().join("state"),
        &["ci"],
        &["--node-boot", "4s"],
    );
    bootstrap(dir.path(), &[]);
    let admin = kube_client(&sim.tenant_admin("ci")).await;
    let runner = kube_client(&dir.path().join("creds/kubeconfig")).await;
    let nodes: Api<Node> = Api::all(admin);
    assert!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "a cluster starts with zero nodes"
    );
    let pods: Api<Pod> = Api::namespaced(runner, "gitlab-runner");
    pods.create(
        &PostParams::default(),
        &job_pod("job-1", "1400m", "1152Mi", None),
    )
    .await
    .unwrap();
    // The job makes a node be rented; while it boots the job is Pending.
    let booting = wait(&nodes, "rented-1", exists()).await;
    let conditions_now = booting.status.unwrap().conditions.unwrap();
    assert!(
        conditions_now
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        "the rented node appears NotReady"
    );
    let pending = pods.get("job-1").await.unwrap();
    assert!(
        pending.spec.unwrap().node_name.is_none(),
        "not bound while the only node boots"
    );
    let job = wait(&pods, "job-1", conditions::is_pod_running()).await;
    assert_eq!(job.spec.unwrap().node_name.as_deref(), Some("rented-1"));
    let node = nodes.get("rented-1").await.unwrap();
    let cap = node.status.unwrap().capacity.unwrap();
    assert_eq!(cap["cpu"].0, "2", "capacity from the node image");
    assert_eq!(cap["memory"].0, "2048Mi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_pods_below_minus_ten_rent_nothing() {
    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let admin = kube_client(&sim.tenant_admin("ci")).await;
    let pcs: Api<PriorityClass> = Api::all(admin.clone());
    let low: PriorityClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "below-cutoff"}, "value": -11, "preemptionPolicy": "Never"
    }))
    .unwrap();
    pcs.create(&PostParams::default(), &low).await.unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "gitlab-runner"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "gitlab-runner");
    // First the expendable pod (it would need a node of its own), then a normal one.
    pods.create(
        &PostParams::default(),
        &job_pod("expendable", "1500m", "256Mi", Some("below-cutoff")),
    )
    .await
    .unwrap();
    pods.create(
        &PostParams::default(),
        &job_pod("job", "1000m", "256Mi", None),
    )
    .await
    .unwrap();
    let job = wait(&pods, "job", conditions::is_pod_running()).await;
    assert_eq!(job.spec.unwrap().node_name.as_deref(), Some("rented-1"));
    let nodes = Api::<Node>::all(admin)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(nodes.len(), 1, "only the normal pod rented a node");
    let expendable = pods.get("expendable").await.unwrap();
    assert!(
        expendable.spec.unwrap().node_name.is_none(),
        "the pod below -10 stays Pending"
    );
}

#[test]
fn prewarm_a_job_larger_than_the_node_image_is_refused() {
    let dir = scratch();
    let state = dir.path().join("state");
    let _sim = SimProcess::start(
        tenantci(),
        &state,
        &["ci"],
        &["--node-vcpu", "2", "--node-mem-mib", "2048"],
    );
    let image: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("clusters/ci/node-image.json")).unwrap())
            .unwrap();
    assert_eq!(image["vcpu"], 2);
    assert_eq!(image["memMiB"], 2048);
    let size = |args: &[&str]| {
        run(tenantci()
            .args(["tenant", "size", "--state-dir"])
            .arg(&state)
            .args(["--cluster", "ci"])
            .args(args))
    };
    let o = size(&["--cpu-request", "4"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("vcpu 2"), "{}", stderr(&o));
    assert!(stderr(&o).contains("new guest image"), "{}", stderr(&o));
    let o = size(&["--memory-request", "3Gi"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("memMiB 2048"), "{}", stderr(&o));
    assert_exit(&size(&["--cpu-request", "1"]), 0);

    // bootstrap refuses it too, before writing anything.
    std::fs::write(dir.path().join("token"), "glrt-x\n").unwrap();
    let o = run(tenantci()
        .args(["bootstrap", "runner", "--forge", "gitlab", "--state-dir"])
        .arg(&state)
        .args(["--cluster", "ci", "--credential-dir"])
        .arg(dir.path().join("creds"))
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .args([
            "--gitlab-url",
            "https://gitlab.example.com",
            "--runner-token-file",
        ])
        .arg(dir.path().join("token"))
        .args(["--cpu-request", "4"]));
    assert_exit(&o, 2);
    assert!(!dir.path().join("creds").exists() && !dir.path().join("config.toml").exists());
}

fn hand_back(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("hand-back JSON: {e}\n{}", crate::util::stdout(o)))
}

fn step(hand_back: &serde_json::Value, name: &str) -> (String, String) {
    let s = hand_back["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {hand_back}"));
    (
        s["outcome"].as_str().unwrap().to_string(),
        s["detail"].as_str().unwrap().to_string(),
    )
}

/// Our `[[runners]]` entry's `[runners.kubernetes]`.
fn kubernetes_table(config: &Path) -> toml_edit::Table {
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    assert_eq!(
        tenantci_runner::gitlab::config::keys::check_document(&doc),
        vec![],
        "only keys gitlab-runner knows"
    );
    doc["runners"]
        .as_array_of_tables()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str() == Some("tenant-ci"))
        .unwrap()["kubernetes"]
        .as_table()
        .unwrap()
        .clone()
}

/// A pause Deployment as gitlab-runner's autoscaler creates it (replicas 0: only the
/// permission is the point).
fn runner_pause_deployment(name: &str, namespace: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"runner.gitlab.com/pause-pod": "true"}},
            "template": {
                "metadata": {"labels": {"runner.gitlab.com/pause-pod": "true"}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .unwrap()
}

async fn runner_may_create_deployments(runner: &kube::Client, name: &str) -> bool {
    let deployments: Api<Deployment> = Api::namespaced(runner.clone(), "gitlab-runner");
    match deployments
        .create(
            &PostParams::default(),
            &runner_pause_deployment(name, "gitlab-runner"),
        )
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 403 => false,
        Err(e) => panic!("create a Deployment as the runner: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_native_pause_pods_are_the_runners_own_and_a_rerun_writes_nothing() {
    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let config = dir.path().join("config.toml");
    let native = ["--prewarm", "2", "--gitlab-native-pause-pods", "-o", "json"];
    let first = hand_back(&bootstrap(dir.path(), &native));
    assert_eq!(step(&first, "prewarm").0, "native");
    assert_eq!(step(&first, "config").0, "written");

    // config.toml: the autoscaler in the same [runners.kubernetes] as the job pods' requests,
    // which gitlab-runner sizes and places its pause pods from.
    let k = kubernetes_table(&config);
    assert_eq!(k["cpu_request"].as_str(), Some("1300m"));
    assert_eq!(k["memory_request"].as_str(), Some("1Gi"));
    let autoscaler = k["autoscaler"]
        .as_table()
        .expect("[runners.kubernetes.autoscaler]");
    assert_eq!(autoscaler["max_pause_pods"].as_integer(), Some(2));
    assert_eq!(
        autoscaler["pause_pod_image"].as_str(),
        Some("registry.k8s.io/pause:3.10")
    );
    let policies = autoscaler["policy"].as_array_of_tables().unwrap();
    assert_eq!(policies.len(), 1);
    let policy = policies.get(0).unwrap();
    assert_eq!(policy["idle_count"].as_integer(), Some(2));
    assert_eq!(policy["idle_time"].as_str(), Some("30m"));
    let periods: Vec<&str> = policy["periods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(periods, ["* * * * *"]);

    // No pause-pod Deployment or PriorityClass of tenantci's in the cluster.
    let admin = kube_client(&sim.tenant_admin("ci")).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "gitlab-runner");
    assert!(
        deployments
            .get_opt("tenantci-pause")
            .await
            .unwrap()
            .is_none()
    );
    let pcs: Api<PriorityClass> = Api::all(admin.clone());
    assert!(pcs.get_opt("tenantci-pause").await.unwrap().is_none());

    // The runner's own credential may do what its autoscaler does: a pause Deployment in its
    // namespace, the PriorityClass it creates when missing; not a Deployment elsewhere.
    let runner = kube_client(&dir.path().join("creds/kubeconfig")).await;
    assert!(runner_may_create_deployments(&runner, "runner-pause-abc-s1").await);
    let idle: PriorityClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "gitlab-runner-idle-capacity"}, "value": -1
    }))
    .unwrap();
    Api::<PriorityClass>::all(runner.clone())
        .create(&PostParams::default(), &idle)
        .await
        .expect("the runner may create its idle-capacity PriorityClass");
    let elsewhere: Api<Deployment> = Api::namespaced(runner.clone(), "kube-system");
    let denied = elsewhere
        .create(
            &PostParams::default(),
            &runner_pause_deployment("x", "kube-system"),
        )
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{denied:?}"
    );

    // The re-run: same bytes, not even rewritten, within the request budget.
    let before = std::fs::read(&config).unwrap();
    let mtime = std::fs::metadata(&config).unwrap().modified().unwrap();
    let again = hand_back(&bootstrap(dir.path(), &native));
    assert_eq!(step(&again, "config").0, "unchanged");
    assert_eq!(step(&again, "rbac").0, "unchanged");
    assert_eq!(step(&again, "prewarm").0, "native");
    assert_eq!(std::fs::read(&config).unwrap(), before);
    assert_eq!(
        std::fs::metadata(&config).unwrap().modified().unwrap(),
        mtime
    );
    // 10, plus the /version call that reaches the tenant apiserver before anything is minted.
    let requests = again["apiserverRequests"].as_u64().unwrap();
    assert!(requests <= 11, "a native re-run costs {requests} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_native_switching_either_way_is_explicit() {
    let dir = scratch();
    let sim = SimProcess::start(tenantci(), &dir.path().join("state"), &["ci"], &[]);
    let config = dir.path().join("config.toml");
    let admin = kube_client(&sim.tenant_admin("ci")).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "gitlab-runner");
    let pcs: Api<PriorityClass> = Api::all(admin.clone());
    let roles: Api<ClusterRole> = Api::all(admin.clone());

    // tenantci's Deployment first.
    bootstrap(dir.path(), &["--prewarm", "1"]);
    assert!(
        deployments
            .get_opt("tenantci-pause")
            .await
            .unwrap()
            .is_some()
    );
    assert!(kubernetes_table(&config).get("autoscaler").is_none());

    // Deployment -> native: the Deployment (and its now unused PriorityClass) go.
    let native = ["--prewarm", "1", "--gitlab-native-pause-pods", "-o", "json"];
    let switched = hand_back(&bootstrap(dir.path(), &native));
    let (outcome, detail) = step(&switched, "prewarm");
    assert_eq!(outcome, "native");
    assert!(detail.contains("removed tenantci's Deployment"), "{detail}");
    assert!(
        deployments
            .get_opt("tenantci-pause")
            .await
            .unwrap()
            .is_none()
    );
    assert!(pcs.get_opt("tenantci-pause").await.unwrap().is_none());
    assert!(kubernetes_table(&config).get("autoscaler").is_some());
    let runner = kube_client(&dir.path().join("creds/kubeconfig")).await;
    assert!(runner_may_create_deployments(&runner, "runner-pause-1").await);

    // Dropping the flag does not switch back silently: refused, nothing changed.
    let before = std::fs::read(&config).unwrap();
    let o = bootstrap_run(dir.path(), &["--prewarm", "1"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("--remove-gitlab-native-pause-pods"), "{err}");
    assert!(err.contains("--gitlab-native-pause-pods"), "{err}");
    assert_eq!(std::fs::read(&config).unwrap(), before);
    assert!(
        deployments
            .get_opt("tenantci-pause")
            .await
            .unwrap()
            .is_none()
    );

    // native -> Deployment, explicitly: our autoscaler keys and the runner's pause-pod RBAC
    // go, tenantci's Deployment comes back.
    let back = hand_back(&bootstrap(
        dir.path(),
        &[
            "--prewarm",
            "1",
            "--remove-gitlab-native-pause-pods",
            "-o",
            "json",
        ],
    ));
    assert_eq!(step(&back, "config").0, "written");
    assert!(kubernetes_table(&config).get("autoscaler").is_none());
    assert!(
        deployments
            .get_opt("tenantci-pause")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        roles
            .get_opt("gitlab-runner-priorityclasses")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!runner_may_create_deployments(&runner, "runner-pause-2").await);

    // And plain Deployment runs are content again.
    let before = std::fs::read(&config).unwrap();
    let plain = hand_back(&bootstrap(dir.path(), &["--prewarm", "1", "-o", "json"]));
    assert_eq!(step(&plain, "config").0, "unchanged");
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

#[test]
fn prewarm_native_without_a_count_is_refused_before_anything_changes() {
    let dir = scratch();
    let bad_period = [
        "--gitlab-native-pause-pods",
        "--prewarm",
        "1",
        "--pause-period",
        "hourly",
    ];
    let o = bootstrap_run(dir.path(), &bad_period);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("cron"), "{}", stderr(&o));
    for extra in [
        &["--gitlab-native-pause-pods"][..],
        &["--gitlab-native-pause-pods", "--prewarm", "0"][..],
    ] {
        let o = bootstrap_run(dir.path(), extra);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains("--gitlab-native-pause-pods") && err.contains("--prewarm"),
            "{err}"
        );
        assert_eq!(
            err.trim().lines().count(),
            1,
            "one sentence naming the flag and the fix: {err}"
        );
    }
    assert!(!dir.path().join("creds").exists());
    assert!(!dir.path().join("config.toml").exists());
}
