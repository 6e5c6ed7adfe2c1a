//! Executor identity (issue 15): `dispatch run` with `[identity]` against the simulator's
//! SPIRE stand-in. The dispatcher writes a ClusterStaticEntry for each scheduled executor Pod
//! (and deletes it with the Pod); the facade serves SPIFFE mTLS with the dispatcher's SVID;
//! an executor's `tenantci executor-proxy` (run with its Pod's argv) presents the SVID of its
//! Pod's entry and accepts only the facade's SPIFFE ID. The dispatcher's own entry is the
//! operator's, created here by hand.
//!
//! Identity off is every other dispatch test: their configs have no `[identity]`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::Api;
use tenantci_core::forge::gitea::client::ClientError;
use tenantci_core::forge::gitea::connect::Code;
use tenantci_sim::spire::ca::TrustDomainCa;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::DEADLINE;

use super::harness::{DISPATCHER_ENTRY, NAMESPACE, TD, World};
use crate::util::{assert_exit, stderr, tenantci};

/// The ID the default template gives a job of the Gitea double (repository `sim/demo`).
fn task_id(job: &str) -> String {
    format!("spiffe://{TD}/gitea/sim/demo/{job}")
}

/// The Pod's proxy presenting the SVID of entry `entry` (its own, or another Pod's).
fn proxy_as(
    w: &World,
    secret: &Secret,
    pod: &Pod,
    entry: &str,
    flags: &[(&str, &str)],
) -> PodProxy {
    let endpoint = w.spire.as_ref().unwrap().endpoint("ci", entry);
    PodProxy::start_with(tenantci(), secret, pod, flags, Some(&endpoint))
}

/// One Declare through `proxy` with `secret`'s credentials, no retry: the facade's answer.
async fn declare(secret: &Secret, proxy: &PodProxy) -> Result<(), ClientError> {
    Executor::through(secret, proxy).declare_once().await
}

fn code(r: Result<(), ClientError>) -> Code {
    match r {
        Err(ClientError::Status { error, .. }) => error.code,
        other => panic!("expected a Connect error, got {other:?}"),
    }
}

/// One claimed task: its id, executor Secret and Pod, and the name of the Pod's entry.
type Claimed = (i64, Secret, Pod, String);

/// A world with identity on, one dispatcher, and `jobs` claimed with their objects; each
/// task Pod's entry, written by the dispatcher, is served.
async fn claimed(jobs: &[&str]) -> (World, super::harness::Dispatcher, Vec<Claimed>) {
    let mut w = World::start_with_spire(jobs.len() as u32).await;
    w.with_identity().await;
    let d = w.dispatcher("d1").await;
    let mut tasks = Vec::new();
    for job in jobs {
        let id = w.enqueue(job, &format!("s3cr3t-{job}")).await;
        let task = w.claimed(id).await;
        let (secret, pod) = w.objects(task).await;
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()["tenantci.io/spiffe-id"],
            task_id(job),
            "the Pod names its task's SPIFFE ID"
        );
        let entry = w.task_entry_served(task).await;
        tasks.push((task, secret, pod, entry));
    }
    (w, d, tasks)
}

/// The entry `name` as the apiserver has it.
async fn entry(w: &World, name: &str) -> serde_json::Value {
    let found = w.task_entries().await;
    let e = found
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("entry {name} among {found:?}"));
    serde_json::to_value(e).unwrap()
}

/// The Pod's entry names the task's ID, pins the Pod's UID and uid 2000, and has the agent of
/// the Pod's node (its UID) as parent.
async fn assert_entry_pins(w: &World, name: &str, task: i64, job: &str) {
    let e = entry(w, name).await;
    let pod = Api::<Pod>::namespaced(w.kube.clone(), NAMESPACE)
        .get(&format!("gitea-task-{task}"))
        .await
        .unwrap();
    let node_name = pod.spec.unwrap().node_name.expect("the Pod is scheduled");
    let node = Api::<Node>::all(w.kube.clone())
        .get(&node_name)
        .await
        .unwrap();
    assert_eq!(e["spec"]["spiffeID"], task_id(job));
    assert_eq!(
        e["spec"]["className"], "spire-server-spire",
        "the hardened chart's controller manager takes only entries of its class"
    );
    assert_eq!(
        e["spec"]["parentID"],
        format!(
            "spiffe://{TD}/spire/agent/k8s_psat/ci/{}",
            node.metadata.uid.unwrap()
        )
    );
    assert_eq!(
        e["spec"]["selectors"],
        serde_json::json!([
            format!("k8s:pod-uid:{}", pod.metadata.uid.unwrap()),
            "unix:uid:2000"
        ])
    );
}

/// The serial of the certificate the facade presents in a new handshake (no client
/// certificate: TLS 1.3 shows the server's before the server checks the client's).
async fn facade_serial(d: &super::harness::Dispatcher) -> Vec<u8> {
    let config = crate::spiffe::mtls::any_server().with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(d.facade).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("facade").unwrap(),
            tcp,
        )
        .await
        .expect("the client side of the handshake completes");
    let der = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.raw_serial().to_vec()
}

/// The stand-in's serial of `name`'s current SVID, as the certificate encodes it.
fn served_serial(entries: &[serde_json::Value], name: &str) -> Vec<u8> {
    let e = entries
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {entries:?}"));
    let n = e["serial"].as_u64().unwrap();
    // DER integers: big-endian, no leading zero bytes (positive, below 2^63).
    let bytes = n.to_be_bytes();
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(7);
    bytes[first..].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_a_task_runs_to_success_through_its_proxy_with_its_svid() {
    let (w, d, tasks) = claimed(&["build"]).await;
    let (task, secret, pod, entry_name) = &tasks[0];
    assert_eq!(entry_name, &format!("{NAMESPACE}.gitea-task-{task}"));
    assert_entry_pins(&w, entry_name, *task, "build").await;
    let proxy = proxy_as(&w, secret, pod, entry_name, &[]);
    let ex = Executor::through(secret, &proxy);
    let t = ex.fetch().await;
    assert_eq!(
        (t.id, t.secrets["DEPLOY_KEY"].as_str()),
        (*task, "s3cr3t-build")
    );
    // Mid-run the stand-in issues every entry a new SVID (the dispatcher's and the Pod's).
    let spire = w.spire.as_ref().unwrap();
    let before = spire.entries(w.http()).await;
    let after = spire.rotate(w.http()).await;
    assert_ne!(before, after, "new SVIDs issued");
    // The facade presents its new SVID in new handshakes once it has it...
    let rotated = served_serial(&after, DISPATCHER_ENTRY);
    tenantci_testkit::wait::eventually("the facade to present its rotated SVID", || async {
        (facade_serial(&d).await == rotated).then_some(())
    })
    .await;
    // ... and a new connection from the Pod (a restarted proxy: a new handshake with the
    // Pod's new SVID) is served for the rest of the task.
    proxy.stop();
    let proxy = proxy_as(&w, secret, pod, entry_name, &[]);
    let ex = Executor::through(secret, &proxy);
    ex.finish(*task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(*task).await;
    w.all_cleaned_up().await;
    // The entry goes with the Pod and Secret, and the stand-in stops serving it.
    w.no_task_entries().await;
    assert!(
        !spire
            .entries(w.http())
            .await
            .iter()
            .any(|e| e["name"] == entry_name.as_str()),
        "no SVID is served for a deleted entry"
    );
    assert_eq!(
        d.metric("tenantci_dispatch_facade_identity_refused_total")
            .await,
        Some(0.0)
    );
    assert_eq!(
        d.metric("tenantci_dispatch_spire_entry_errors_total").await,
        Some(0.0)
    );
    let log = d.log_text();
    assert!(log.contains("serving SPIFFE mTLS"), "{log}");
    assert!(log.contains("SPIRE entry written"), "{log}");
}

/// kill -9 of the dispatcher mid-task. The restarted one finds the entry of the running
/// task A (the same object: not written again, not duplicated). Of two tasks whose Pods were
/// deleted while no dispatcher ran, B had fetched its task (reported FAILURE: its entry is
/// deleted) and C had not (started again: its entry is rewritten for the new Pod). At the
/// end no entry is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_entries_survive_a_kill9_of_the_dispatcher_and_none_is_left_behind() {
    let (w, mut d, tasks) = claimed(&["build", "test", "lint"]).await;
    let (task_a, secret_a, pod_a, entry_a) = &tasks[0];
    let (task_b, secret_b, pod_b, entry_b) = &tasks[1];
    let (task_c, _, pod_c, entry_c) = &tasks[2];
    let uid_a = entry(&w, entry_a).await["metadata"]["uid"].clone();
    let proxy_a = proxy_as(&w, secret_a, pod_a, entry_a, &[]);
    let ex_a = Executor::through(secret_a, &proxy_a);
    assert_eq!(ex_a.fetch().await.id, *task_a);
    {
        let proxy_b = proxy_as(&w, secret_b, pod_b, entry_b, &[]);
        assert_eq!(
            Executor::through(secret_b, &proxy_b).fetch().await.id,
            *task_b
        );
    }

    d.kill9();
    w.delete_executor(*task_b).await;
    w.delete_executor(*task_c).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;

    // C's next attempt is a new Pod of the same name: its entry pins the new Pod.
    let (_, new_pod_c) = tenantci_testkit::wait::eventually("task C's next attempt", || async {
        let (secret, pod) = w.objects(*task_c).await;
        (pod.metadata.uid != pod_c.metadata.uid).then_some((secret, pod))
    })
    .await;
    tenantci_testkit::wait::eventually("task C's entry to pin its new Pod", || async {
        let e = w
            .task_entries()
            .await
            .into_iter()
            .find(|e| e.metadata.name.as_ref() == Some(entry_c))?;
        let pinned = serde_json::to_value(&e).unwrap()["spec"]["selectors"][0].clone();
        (pinned == format!("k8s:pod-uid:{}", new_pod_c.metadata.uid.clone().unwrap())).then_some(())
    })
    .await;
    assert_entry_pins(&w, entry_c, *task_c, "lint").await;
    // B is over: reported FAILURE, its entry gone. A's entry is the one written before.
    tenantci_testkit::wait::eventually("task B's entry to be deleted", || async {
        let names: Vec<String> = w
            .task_entries()
            .await
            .into_iter()
            .filter_map(|e| e.metadata.name)
            .collect();
        (!names.contains(entry_b)).then_some(names)
    })
    .await;
    tenantci_testkit::wait::eventually("task B to be reported FAILURE", || async {
        (w.task(*task_b).await["result"] == "RESULT_FAILURE").then_some(())
    })
    .await;
    assert_eq!(
        entry(&w, entry_a).await["metadata"]["uid"],
        uid_a,
        "task A's entry is the one written before the kill, not a new one"
    );
    assert_eq!(w.task_entries().await.len(), 2, "A's and C's, once each");

    ex_a.finish(*task_a, &[&format!("ran task {task_a}")]).await;
    w.assert_succeeded_once(*task_a).await;
    // C's new attempt runs too, with its Pod's new SVID.
    w.task_entry_served(*task_c).await;
    let (secret_c, _) = w.objects(*task_c).await;
    let proxy_c = proxy_as(&w, &secret_c, &new_pod_c, entry_c, &[]);
    let ex_c = Executor::through(&secret_c, &proxy_c);
    assert_eq!(ex_c.fetch().await.id, *task_c);
    ex_c.finish(*task_c, &[&format!("ran task {task_c}")]).await;
    w.assert_succeeded_once(*task_c).await;
    w.all_cleaned_up().await;
    w.no_task_entries().await;
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_the_facade_refuses_no_svid_a_foreign_svid_and_another_task_s_svid() {
    let (w, d, tasks) = claimed(&["build", "test"]).await;
    let (_, secret_a, pod_a, entry_a) = &tasks[0];
    let (_, secret_b, pod_b, entry_b) = &tasks[1];
    let url = format!(
        "{}/api/actions/runner.v1.RunnerService/Declare",
        d.facade_url
    );

    // No client certificate: the handshake is refused.
    let bare = reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    assert!(bare.post(&url).send().await.is_err(), "no client SVID");

    // A well-formed SVID of another trust domain, for the same path.
    let other = TrustDomainCa::new("other.org").unwrap();
    let svid = other
        .issue("spiffe://other.org/gitea/sim/demo/build", DEADLINE)
        .unwrap();
    let files = svid.helper_files(&other);
    let foreign = reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .identity(
            reqwest::Identity::from_pem(format!("{}{}", files[0].1, files[1].1).as_bytes())
                .unwrap(),
        )
        .build()
        .unwrap();
    assert!(
        foreign.post(&url).send().await.is_err(),
        "an SVID of other.org"
    );

    // Task B's SVID with task A's capability, and task A's SVID with task B's.
    let a_with_b_svid = proxy_as(&w, secret_a, pod_a, entry_b, &[]);
    assert_eq!(
        code(declare(secret_a, &a_with_b_svid).await),
        Code::PermissionDenied
    );
    let b_with_a_svid = proxy_as(&w, secret_b, pod_b, entry_a, &[]);
    assert_eq!(
        code(declare(secret_b, &b_with_a_svid).await),
        Code::PermissionDenied
    );
    assert_eq!(
        d.metric("tenantci_dispatch_facade_identity_refused_total")
            .await,
        Some(2.0)
    );
    // The same SVIDs with their own task's capability: served.
    declare(secret_b, &a_with_b_svid).await.unwrap();
    declare(secret_a, &b_with_a_svid).await.unwrap();

    let log = d.log_text();
    assert!(
        log.contains("not the one its capability was issued for") && log.contains(&task_id("test")),
        "the refusal is logged with the client's ID: {log}"
    );
    let token_b = Executor::through(secret_b, &b_with_a_svid).token;
    assert!(!log.contains(&token_b), "no capability in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proxy_refuses_a_facade_with_another_spiffe_id() {
    let (w, d, tasks) = claimed(&["build"]).await;
    let (_, secret, pod, entry) = &tasks[0];
    let wrong = "spiffe://example.org/ns/elsewhere/sa/impostor";
    let proxy = proxy_as(
        &w,
        secret,
        pod,
        entry,
        &[("--facade-id", wrong), ("--retry-for", "1s")],
    );
    assert_eq!(code(declare(secret, &proxy).await), Code::Unavailable);
    let log = proxy.log_text();
    assert!(
        log.contains(&format!("not the expected `{wrong}`")),
        "the proxy says why: {log}"
    );
    assert_eq!(
        d.metric("tenantci_dispatch_facade_identity_refused_total")
            .await,
        Some(0.0),
        "nothing reached the facade's handlers"
    );
}

/// A dispatcher whose SVID is not `identity.facade_id` stops at start (exit 2), naming both
/// IDs: its executors would refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_to_serve_with_an_svid_that_is_not_the_facade_id() {
    let mut w = World::start_with_spire(1).await;
    w.with_identity().await;
    let configured = "spiffe://example.org/ns/dynamic-runner/sa/someone-else";
    w.base_mut().identity.as_mut().unwrap().facade_id = configured.into();
    let out = w.run_dispatcher_to_exit("d1");
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains(super::harness::FACADE_ID) && err.contains(configured),
        "{err}"
    );
}
