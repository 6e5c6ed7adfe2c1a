//! The executor Pod as the official runner sees it: the stand-in runner talks plain HTTP to
//! the Pod's own `tenantci executor-proxy` sidecar (run here with the sidecar's argv), which
//! reaches the facade over TLS; executor Pods fill, never oversubscribe, the simulator's
//! rented nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use tenantci_core::forge::gitea::client::{ClientConfig, RunnerClient};
use tenantci_core::forge::gitea::proto::{DeclareRequest, LogRow, UpdateLogRequest};
use tenantci_core::quantity::{self, Milli};
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::eventually;

use super::harness::World;
use crate::util::tenantci;

/// Every container's env in the Pod (the job inherits the runner container's).
fn env_names(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.env.iter().flatten())
        .map(|e| e.name.clone())
        .collect()
}

/// A runner client for one call, as the runner makes it: no retry of its own, so whatever
/// carries the call over a dispatcher restart is the proxy.
fn single_shot(ex: &Executor) -> RunnerClient {
    let mut cfg = ClientConfig::new(&ex.address);
    cfg.retry.attempts = 1;
    cfg.request_timeout = tenantci_testkit::wait::DEADLINE;
    RunnerClient::new(cfg).unwrap().with_credentials(
        tenantci_core::forge::gitea::client::Credentials {
            uuid: ex.uuid.clone(),
            token: ex.token.clone(),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runner_reaches_the_facade_through_its_proxy_across_a_dispatcher_restart() {
    let w = World::start(1).await;
    let mut d = w.dispatcher("d1").await;
    let job = w.enqueue("through-the-proxy", "s3cr3t-proxy").await;
    let task = w.claimed(job).await;
    let (secret, pod) = w.objects(task).await;
    let env = env_names(&pod);
    assert!(
        !env.iter()
            .any(|n| n == "SSL_CERT_FILE" || n == "SSL_CERT_DIR"),
        "no trust-store variable for the runner or the job: {env:?}"
    );
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    assert!(
        ex.address.starts_with("http://127.0.0.1:"),
        "{}",
        ex.address
    );
    assert!(ex.ca_pem.is_empty(), "the runner side holds no CA");
    assert_eq!(ex.labels, ["self-hosted:host", "pod:host"]);

    let fetched = ex.fetch().await;
    assert_eq!(fetched.id, task);
    assert_eq!(fetched.secrets["DEPLOY_KEY"], "s3cr3t-proxy");

    // The dispatcher dies mid-task. One UpdateLog, sent once by the runner, waits in the
    // proxy until a dispatcher serves the facade again.
    d.kill9();
    let client = single_shot(&ex);
    let log = tokio::spawn(async move {
        client
            .update_log(&UpdateLogRequest {
                task_id: task,
                index: 0,
                rows: vec![LogRow {
                    time: None,
                    content: format!("ran task {task}"),
                }],
                no_more: false,
            })
            .await
    });
    eventually("the proxy to retry the absent facade", || async {
        proxy
            .log_text()
            .contains("the facade is away, retrying")
            .then_some(())
    })
    .await;
    let d = w.dispatcher("d1").await;
    let ack = log
        .await
        .unwrap()
        .expect("the proxy carried the call over the restart");
    assert_eq!(ack.ack_index, 1);
    ex.finish(task, &[&format!("ran task {task}")]).await;

    w.all_cleaned_up().await;
    w.assert_succeeded_once(task).await;
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "one executor: {:?}",
        w.watch.creations()
    );
    // The kubelet stops a native sidecar with SIGTERM once the runner has exited.
    assert_eq!(proxy.stop(), Some(0), "the proxy exits cleanly on SIGTERM");
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proxy_sends_only_an_executors_calls_to_the_facade() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let task = w.claimed(w.enqueue("paths", "s3cr3t-paths").await).await;
    let (secret, pod) = w.objects(task).await;
    let proxy = PodProxy::start(tenantci(), &secret, &pod);
    let ex = Executor::through(&secret, &proxy);
    let declared = single_shot(&ex)
        .declare(&DeclareRequest {
            version: "test".into(),
            labels: vec!["pod".into()],
            ..Default::default()
        })
        .await
        .expect("Declare passes");
    assert_eq!(declared.expect("the facade names the runner").id, task);
    let http = reqwest::Client::new();
    let call = |method: &str, path: &str| {
        http.request(method.parse().unwrap(), format!("{}{path}", proxy.address))
            .header("x-runner-uuid", &ex.uuid)
            .header("x-runner-token", &ex.token)
            .send()
    };
    // Not an executor's RunnerService call: neither the facade nor Gitea gets it.
    for (method, path) in [
        ("POST", "/api/actions/runner.v1.RunnerService/Register"),
        ("GET", "/api/actions/runner.v1.RunnerService/Declare"),
    ] {
        let r = call(method, path).await.unwrap();
        assert!(
            r.status() == 404 || r.status() == 405,
            "{method} {path}: {}",
            r.status()
        );
    }
    // Everything else goes to Gitea (the passthrough), without the runner's headers: the
    // task's capability is no credential there, so the artifact API refuses the request.
    let r = call(
        "POST",
        "/api/actions_pipeline/_apis/pipelines/workflows/1/artifacts",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 401, "Gitea's own refusal");
    ex.finish(task, &["done"]).await;
    w.all_cleaned_up().await;
}

/// Requests of every Pod bound to each node, against the node's allocatable.
async fn node_load(w: &World) -> BTreeMap<String, (Milli, Milli, Milli, Milli)> {
    let nodes = Api::<Node>::all(w.kube.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let mut load = BTreeMap::new();
    for n in nodes {
        let alloc = n.status.unwrap().allocatable.unwrap();
        let q = |k: &str| quantity::parse(&alloc[k].0).unwrap();
        load.insert(
            n.metadata.name.unwrap(),
            (Milli(0), Milli(0), q("cpu"), q("memory")),
        );
    }
    for p in w.pods().await {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let v = serde_json::to_value(&p).unwrap();
        let (cpu, mem) = tenantci_sim::scheduler::pod_requests(&v);
        let e = load.get_mut(&node).unwrap();
        e.0 += Milli(cpu.0);
        e.1 += Milli::from_units(mem.0);
    }
    load
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executors_are_sized_for_the_rented_node_and_never_share_one() {
    let w = World::start(3).await;
    let _d = w.dispatcher("d1").await;
    let mut tasks = Vec::new();
    for i in 0..3 {
        let job = w.enqueue(&format!("sized-{i}"), "s3cr3t").await;
        tasks.push(w.claimed(job).await);
    }
    let pods = eventually("three executor Pods bound to nodes", || async {
        let pods = w.pods().await;
        (pods.len() == 3
            && pods
                .iter()
                .all(|p| p.spec.as_ref().unwrap().node_name.is_some()))
        .then_some(pods)
    })
    .await;
    let runner = &pods[0].spec.as_ref().unwrap().containers[0];
    let requests = runner.resources.as_ref().unwrap().requests.clone().unwrap();
    assert_eq!(
        requests["cpu"].0, "1800m",
        "sized for the 2-vCPU node image"
    );
    assert_eq!(requests["memory"].0, "1728Mi");
    let load = node_load(&w).await;
    let used: Vec<_> = load.iter().filter(|(_, l)| l.0 > Milli(0)).collect();
    assert_eq!(used.len(), 3, "one rented node per executor: {load:?}");
    for (node, (cpu, mem, alloc_cpu, alloc_mem)) in &load {
        assert!(
            cpu <= alloc_cpu && mem <= alloc_mem,
            "{node} oversubscribed: {load:?}"
        );
    }
    for t in tasks {
        w.executor(t).await.run(t).await;
    }
    w.all_cleaned_up().await;
}

/// The live Pod whose name starts with `prefix` passes Pod Security `restricted`.
async fn assert_restricted(w: &World, prefix: &str) {
    let pods = w.pods().await;
    let pod = pods
        .iter()
        .find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("a {prefix} Pod"));
    assert_eq!(
        tenantci_core::pod_security::restricted(pod.spec.as_ref().unwrap()),
        Vec::<String>::new(),
        "{prefix}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_executor_takes_the_place_of_a_pause_pod_sized_from_the_dispatch_config() {
    let w = World::start(1).await;
    let _d = w.dispatcher("d1").await;
    let out = tenantci()
        .args(["tenant", "prewarm", "--replicas", "1", "--kubeconfig"])
        .arg(&w.tenant_admin)
        .arg("--dispatch-config")
        .arg(w.config_path("d1"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1810m CPU / 1760Mi"),
        "runner + sidecar: {text}"
    );
    let pause_node = eventually("the pause pod to hold a rented node", || async {
        let pods = w.pods().await;
        let pause = pods.iter().find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("tenantci-pause"))
        })?;
        (pause.status.as_ref()?.phase.as_deref() == Some("Running"))
            .then(|| pause.spec.as_ref()?.node_name.clone())?
    })
    .await;
    assert_restricted(&w, "tenantci-pause").await;
    let task = w.claimed(w.enqueue("warm", "s3cr3t-warm").await).await;
    let name = format!("gitea-task-{task}");
    let executor_node = eventually("the executor Pod to run", || async {
        let pods = w.pods().await;
        let p = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&name))?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running"))
            .then(|| p.spec.as_ref()?.node_name.clone())?
    })
    .await;
    assert_eq!(
        executor_node, pause_node,
        "the executor preempted the pause pod on the warm node"
    );
    // Both Pods tenantci created, as the apiserver stored them, pass Pod Security
    // `restricted` (the executors' namespace enforces it: manifests/dispatch/rbac.yaml).
    assert_restricted(&w, &name).await;
    w.executor(task).await.run(task).await;
    eventually("the executor objects to go", || async {
        w.pods()
            .await
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some(&name))
            .then_some(())
    })
    .await;
}
