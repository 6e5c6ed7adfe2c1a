//! Rented nodes and pre-warm against the simulator (4 s node boot): a warm job starts on the
//! pre-warmed node by preempting its pause pod, a cold one waits for a rented node, the
//! preempted pause pod rents the next node, pods below -10 rent nothing, and a job larger than
//! the node image is refused.

use std::path::Path;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};

use crate::sim::harness::{DEADLINE, SimProcess, kube_client};
use crate::util::{assert_exit, run, scratch, stderr, tenantci};

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

fn bootstrap(root: &Path, extra: &[&str]) {
    std::fs::write(root.join("token"), "glrt-prewarm\n").unwrap();
    let o = run(tenantci()
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
        .args(extra));
    assert_exit(&o, 0);
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
    let sim = SimProcess::start_with(&dir.path().join("state"), &["ci"], &["--node-boot", "4s"]);
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
    let pause = loop {
        let list = pause_pods(&admin_pods).await;
        if let Some(p) = list.first() {
            break p.metadata.name.clone().unwrap();
        }
        tokio::task::yield_now().await;
    };
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
    let sim = SimProcess::start_with(&dir.path().join("state"), &["ci"], &["--node-boot", "4s"]);
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
    let sim = SimProcess::start_with(&dir.path().join("state"), &["ci"], &[]);
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
    let _sim = SimProcess::start_with(
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
