//! The in-cluster dispatcher reached through the built-in port-forward (issue 53): `dispatch
//! status`, `explain` and `page` given a kubeconfig and the dispatcher's namespace find the
//! leader from the Lease `dynamic-runner-scheduler`, forward to its Pod's status port through
//! the simulator's `pods/portforward` (kube's WebSocket client against the simulator's
//! WebSocket server), and say which Pod answered.
//!
//! Each replica runs "in its Pod" as the Deployment runs it: its own `dispatch run` process whose
//! leader identity is its Pod's name, its status listener on loopback only, and a Pod object in
//! the simulator whose `sim.tenantci.io/port-forward` annotation maps container port 9464 to
//! that listener (docs/simulator.md). Readers are users with client certificates from the
//! cluster's ClientCA, bound as an operator would bind them; the documented Role is
//! `manifests/dispatch/status-reader.yaml` applied with kubectl.
//!
//! Every helper takes the dispatcher's namespace as a parameter ([`dispatcher_namespace`]), so
//! the tests follow the dispatcher when it moves to a namespace of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tenantci_core::pki::CertificateAuthority;
use tenantci_testkit::kube::{Kubectl, kubeconfig_for};
use tenantci_testkit::process::{Process, first_line};
use tenantci_testkit::wait::{DEADLINE, eventually};

use super::harness::{Dispatcher, PROXY_IMAGE, World};
use crate::util::{assert_exit, repo_file, run, scratch, stderr, stdout, tenantci};

/// Two Pod names as a Deployment's ReplicaSet names them.
const POD_A: &str = "tenantci-dispatcher-5f7d9c8b4-x2k9p";
const POD_B: &str = "tenantci-dispatcher-5f7d9c8b4-q7m4t";
/// The Group the documented RoleBinding names.
const READERS: &str = "tenantci:status-readers";

/// The dispatcher's namespace: where its Lease and Pods are (the config's namespace in these
/// worlds).
fn dispatcher_namespace(w: &World) -> String {
    w.base().cluster.namespace.clone()
}

/// The Pod that stands for `pod`'s replica: scheduled, its container port 9464 mapped to the
/// process's loopback status listener.
async fn create_pod(w: &World, ns: &str, pod: &str, status: SocketAddr) {
    let pods: Api<Pod> = Api::namespaced(w.kube.clone(), ns);
    let object: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod,
            "labels": {"app.kubernetes.io/name": "tenantci-dispatcher"},
            "annotations": {
                tenantci_sim::portforward::ANNOTATION: format!("9464={status}")
            }
        },
        "spec": {"containers": [{
            "name": "dispatcher",
            "image": PROXY_IMAGE,
            "ports": [{"name": "facade", "containerPort": 8443}]
        }]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &object).await.unwrap();
    eventually(&format!("Pod {pod} scheduled"), || async {
        let p = pods.get(pod).await.ok()?;
        p.spec?.node_name.map(|_| ())
    })
    .await;
}

/// A replica in its Pod: `dispatch run` as `pod`, and the Pod object.
async fn replica(w: &World, ns: &str, pod: &str) -> Dispatcher {
    let d = w.dispatcher(pod).await;
    create_pod(w, ns, pod, d.status_address()).await;
    d
}

/// A kubeconfig for user `cn` in groups `orgs`, its certificate from the cluster's ClientCA.
fn user(w: &World, cn: &str, orgs: &[&str]) -> PathBuf {
    let pki = w.state_dir().join("clusters/ci/pki");
    let ca =
        CertificateAuthority::load(&pki.join("client-ca.crt"), &pki.join("client-ca.key")).unwrap();
    let serving = std::fs::read_to_string(pki.join("serving-ca.crt")).unwrap();
    let admin: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&w.tenant_admin).unwrap()).unwrap();
    let server = admin["clusters"][0]["cluster"]["server"].as_str().unwrap();
    kubeconfig_for(
        w.dir.path(),
        &format!("{cn}.kubeconfig"),
        server,
        &serving,
        &ca,
        cn,
        orgs,
    )
}

fn kubectl(w: &World, kubeconfig: &Path) -> Kubectl {
    Kubectl::new(kubeconfig, w.dir.path())
}

/// The repository's reader Role and example binding, in namespace `ns`, applied by the admin.
fn apply_reader_role(w: &World, ns: &str) {
    let yaml = std::fs::read_to_string(repo_file("manifests/dispatch/status-reader.yaml"))
        .unwrap()
        .replace("namespace: tenantci-system", &format!("namespace: {ns}"));
    let o = kubectl(w, &w.tenant_admin).run_stdin(&["apply", "-f", "-"], &yaml);
    assert_exit(&o, 0);
}

/// `tenantci dispatch ARGS --kubeconfig K --namespace NS`.
fn through(kubeconfig: &Path, ns: &str, args: &[&str]) -> Output {
    run(tenantci()
        .arg("dispatch")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", ns]))
}

fn answered_by(ns: &str, pod: &str) -> String {
    format!("answered by Pod {ns}/{pod} (the holder of Lease dynamic-runner-scheduler)")
}

/// `kubectl auth can-i VERB RESOURCE` as `kubeconfig`'s user; `pods/exec` is asked as pods with
/// `--subresource` (kubectl reads `pods/x` as a Pod named x).
fn can_i(w: &World, kubeconfig: &Path, ns: &str, verb: &str, resource: &str) -> String {
    let mut args = vec!["auth", "can-i", verb, "-n", ns];
    let sub;
    match resource.split_once('/') {
        Some((res, s)) => {
            sub = format!("--subresource={s}");
            args.extend([res, sub.as_str()]);
        }
        None => args.push(resource),
    }
    let o = kubectl(w, kubeconfig).run(&args);
    stdout(&o).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_and_explain_reach_the_leader_pod_through_the_forward_and_follow_a_new_leader() {
    let w = World::start(2).await;
    let ns = dispatcher_namespace(&w);
    let mut a = replica(&w, &ns, POD_A).await;
    a.wait_leader(true).await;
    let b = replica(&w, &ns, POD_B).await;
    b.wait_leader(false).await;
    apply_reader_role(&w, &ns);
    let reader = user(&w, "carol", &[READERS]);
    let task = w.claimed(w.enqueue("through-the-forward", "s").await).await;
    w.executor(task).await.fetch().await;

    // The documented Role: exactly what the forward needs, no exec, no Secrets.
    assert_eq!(can_i(&w, &reader, &ns, "create", "pods/portforward"), "yes");
    assert_eq!(can_i(&w, &reader, &ns, "get", "pods/portforward"), "yes");
    assert_eq!(can_i(&w, &reader, &ns, "create", "pods/exec"), "no");
    assert_eq!(can_i(&w, &reader, &ns, "get", "pods/exec"), "no");
    assert_eq!(can_i(&w, &reader, &ns, "get", "secrets"), "no");
    assert_eq!(can_i(&w, &reader, &ns, "list", "secrets"), "no");
    assert_eq!(can_i(&w, &reader, &ns, "get", "configmaps"), "no");
    assert_eq!(
        can_i(&w, &reader, "default", "create", "pods/portforward"),
        "no"
    );

    let o = through(&reader, &ns, &["status"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains(&answered_by(&ns, POD_A)), "{out}");
    assert!(out.contains(&format!("instance {POD_A} (leader)")), "{out}");
    assert!(
        out.contains("through-the-forward"),
        "the leader's task: {out}"
    );

    // JSON stays the document; which Pod answered goes to stderr.
    let o = through(&reader, &ns, &["status", "-o", "json"]);
    assert_exit(&o, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["instance"], POD_A);
    assert!(
        stderr(&o).contains(&answered_by(&ns, POD_A)),
        "{}",
        stderr(&o)
    );

    let id = task.to_string();
    let o = through(&reader, &ns, &["explain", "--task", &id]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains(&answered_by(&ns, POD_A)), "{out}");
    assert!(out.contains(&format!("task {task} ")), "{out}");

    // A page left open, and the HTML it serves now comes from the leader.
    let page = Page::start(&reader, &ns).await;
    let html = reqwest::get(&page.url).await.unwrap().text().await.unwrap();
    assert!(html.contains(POD_A), "{html}");

    // The leader dies and its Pod goes, as the Deployment replaces it: status follows the
    // Lease to the standby's Pod, and so does the page's next connection.
    a.kill9();
    let pods: Api<Pod> = Api::namespaced(w.kube.clone(), &ns);
    pods.delete(POD_A, &DeleteParams::default()).await.unwrap();
    let out = eventually("status from the new leader", || async {
        let o = through(&reader, &ns, &["status"]);
        let out = stdout(&o);
        (o.status.code() == Some(0) && out.contains(&answered_by(&ns, POD_B))).then_some(out)
    })
    .await;
    assert!(out.contains(&format!("instance {POD_B} (leader)")), "{out}");
    let o = through(&reader, &ns, &["explain", "--task", &id]);
    assert!(
        stdout(&o).contains(&answered_by(&ns, POD_B)),
        "{}",
        stdout(&o)
    );
    let html = reqwest::get(&page.url).await.unwrap().text().await.unwrap();
    assert!(
        html.contains(POD_B),
        "the page follows the new leader: {html}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_grant_pod_or_dispatcher_is_one_sentence_and_exit_2() {
    let w = World::start(1).await;
    let ns = dispatcher_namespace(&w);
    apply_reader_role(&w, &ns);
    let reader = user(&w, "carol", &[READERS]);

    // The Lease names a Pod that does not exist.
    let d = w.dispatcher(POD_A).await;
    d.wait_leader(true).await;
    let o = through(&reader, &ns, &["status"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(&format!(
            "the Lease dynamic-runner-scheduler names Pod {POD_A} as the leader, but that Pod is gone from namespace {ns}"
        )),
        "{}",
        stderr(&o)
    );
    create_pod(&w, &ns, POD_A, d.status_address()).await;
    assert_exit(&through(&reader, &ns, &["status"]), 0);

    // A reader who may read the Lease and the Pods but not forward.
    let partial = format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: lease-and-pods, namespace: {ns}}}
rules:
  - {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get]}}
  - {{apiGroups: [\"\"], resources: [pods], verbs: [get, list]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: bob, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease-and-pods}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}}]
"
    );
    assert_exit(
        &kubectl(&w, &w.tenant_admin).run_stdin(&["apply", "-f", "-"], &partial),
        0,
    );
    let bob = user(&w, "bob", &[]);
    for args in [
        &["status"][..],
        &["explain", "--runs-on", "self-hosted,pod"],
    ] {
        let o = through(&bob, &ns, args);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "the apiserver refused to port-forward to Pod {POD_A}"
            )),
            "{err}"
        );
        assert!(
            err.contains("cannot get resource \"pods/portforward\""),
            "{err}"
        );
        assert!(
            err.contains(&format!(
                "bind the Role tenantci-status-reader (manifests/dispatch/status-reader.yaml) in namespace {ns}"
            )),
            "{err}"
        );
    }

    // A port nobody listens on in the Pod: the kubelet's error channel, one sentence.
    let o = through(&reader, &ns, &["status", "--status-port", "9999"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(&format!(
            "Pod {ns}/{POD_A} does not accept connections on port 9999: error forwarding port 9999 to pod {POD_A}"
        )),
        "{}",
        stderr(&o)
    );

    // A namespace without a dispatcher (where the reader has no grant: forbidden; as an admin:
    // no Lease), a kubeconfig that does not parse, a missing context.
    let o = through(&reader, "default", &["status"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(
            "the apiserver refused to read the Lease dynamic-runner-scheduler in namespace default"
        ),
        "{}",
        stderr(&o)
    );
    let o = through(&w.tenant_admin, "default", &["status"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(
            "no dispatcher in namespace default: it has no Lease dynamic-runner-scheduler"
        ),
        "{}",
        stderr(&o)
    );
    let broken = w.dir.path().join("broken.kubeconfig");
    std::fs::write(&broken, "clusters: [ {name: x\n").unwrap();
    let o = through(&broken, &ns, &["status"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains(&format!(
            "the kubeconfig `{}` does not parse as a kubeconfig",
            broken.display()
        )),
        "{}",
        stderr(&o)
    );
    let o = run(tenantci()
        .args(["dispatch", "explain", "--task", "1", "--kubeconfig"])
        .arg(&reader)
        .args(["--namespace", &ns, "--context", "prod"]));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("has no context `prod` (it has: t)"),
        "{}",
        stderr(&o)
    );
}

/// The simulator's `pods/portforward` as kube's client sees it: 404 for a Pod that does not
/// exist, 403 without `create` on the subresource even with `get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_simulator_answers_a_forward_as_the_apiserver_does() {
    let w = World::start(1).await;
    let ns = dispatcher_namespace(&w);
    let pods: Api<Pod> = Api::namespaced(w.kube.clone(), &ns);
    match pods.portforward("no-such-pod", &[9464]).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 404);
            assert_eq!(s.message, "pods \"no-such-pod\" not found");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a forward to a Pod that does not exist"),
    }

    let d = w.dispatcher(POD_A).await;
    create_pod(&w, &ns, POD_A, d.status_address()).await;
    let get_only = format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: forward-get-only, namespace: {ns}}}
rules: [{{apiGroups: [\"\"], resources: [pods/portforward], verbs: [get]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: dave, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: forward-get-only}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}}]
"
    );
    assert_exit(
        &kubectl(&w, &w.tenant_admin).run_stdin(&["apply", "-f", "-"], &get_only),
        0,
    );
    let dave = tenantci_testkit::kube::kube_client(&user(&w, "dave", &[])).await;
    let as_dave: Api<Pod> = Api::namespaced(dave, &ns);
    match as_dave.portforward(POD_A, &[9464]).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                format!(
                    "pods \"{POD_A}\" is forbidden: User \"dave\" cannot create resource \"pods/portforward\" in API group \"\" in the namespace \"{ns}\""
                )
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a forward without create on pods/portforward"),
    }

    // The admin's forward carries HTTP to the replica's loopback status listener.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut forward = pods.portforward(POD_A, &[9464]).await.unwrap();
    let mut stream = forward.take_stream(9464).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// `dispatch page`: its first stdout line is the URL; it serves until SIGTERM.
struct Page {
    process: Process,
    url: String,
}

impl Page {
    async fn start(kubeconfig: &Path, ns: &str) -> Page {
        let kubeconfig = kubeconfig.display().to_string();
        Self::start_with(&["--kubeconfig", &kubeconfig, "--namespace", ns]).await
    }

    async fn start_with(args: &[&str]) -> Page {
        let mut process = Process::spawn(
            tenantci()
                .args(["dispatch", "page"])
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let out = process.child().stdout.take().unwrap();
        let url = tokio::task::spawn_blocking(move || first_line(out, "dispatch page"))
            .await
            .unwrap();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Page { process, url }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.process.terminate(DEADLINE);
    }
}

/// The page through `dispatch page` in headless Chromium: the running task under its state,
/// no console message. (The timeline of finished tasks, issue 53's history part, is another
/// helper's: assert its section here once the page renders it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_page_opens_in_chromium_through_dispatch_page_with_the_running_task() {
    let w = World::start(2).await;
    let ns = dispatcher_namespace(&w);
    let a = replica(&w, &ns, POD_A).await;
    a.wait_leader(true).await;
    apply_reader_role(&w, &ns);
    let reader = user(&w, "carol", &[READERS]);
    let task = w
        .claimed(w.enqueue("shown-through-the-forward", "s").await)
        .await;
    w.executor(task).await.fetch().await;

    let page = Page::start(&reader, &ns).await;
    let profile = scratch();
    let o = super::status_page::chromium(profile.path(), &page.url, &["--dump-dom"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    let fetched = dom.split("<h2 id=\"Fetched\">").nth(1).unwrap_or_default();
    assert!(
        fetched.contains(&format!("gitea-task-{task}"))
            && fetched.contains("shown-through-the-forward"),
        "the running task under its state: {dom}"
    );
    assert!(dom.contains(POD_A), "the leader's instance: {dom}");
    assert_eq!(
        super::status_page::console(&o),
        Vec::<String>::new(),
        "no console message"
    );
    drop(page);

    // The gateway-host install: the same page relayed from a status address.
    let address = a.status_address().to_string();
    let page = Page::start_with(&["--status-address", &address]).await;
    let html = reqwest::get(&page.url).await.unwrap().text().await.unwrap();
    assert!(html.contains("shown-through-the-forward"), "{html}");

    // Only loopback: anyone reaching the page would read with the operator's access.
    let o = run(tenantci().args([
        "dispatch",
        "page",
        "--listen",
        "0.0.0.0:0",
        "--status-address",
        &address,
    ]));
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("--listen 0.0.0.0:0 is not a loopback address"),
        "{}",
        stderr(&o)
    );
}
