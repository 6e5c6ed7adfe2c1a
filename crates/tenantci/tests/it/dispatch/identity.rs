//! Executor identity (issue 15): `dispatch run` with `[identity]` against the simulator's
//! SPIRE stand-in. The facade serves SPIFFE mTLS with the dispatcher's SVID; an executor's
//! `tenantci executor-proxy` (run with its Pod's argv) presents the SVID of its Pod's entry
//! and accepts only the facade's SPIFFE ID. The entries of the task Pods are created here by
//! hand (the dispatcher does not create them yet).
//!
//! Identity off is every other dispatch test: their configs have no `[identity]`.

use k8s_openapi::api::core::v1::{Pod, Secret};
use tenantci_core::forge::gitea::client::{ClientConfig, ClientError, RunnerClient};
use tenantci_core::forge::gitea::connect::Code;
use tenantci_core::forge::gitea::proto::DeclareRequest;
use tenantci_sim::spire::ca::TrustDomainCa;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::DEADLINE;

use super::harness::{TD, World};
use crate::util::{assert_exit, run, stderr, tenantci};

/// The ID the default template gives a job of the Gitea double (repository `sim/demo`).
fn task_id(job: &str) -> String {
    format!("spiffe://{TD}/gitea/sim/demo/{job}")
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap()
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
    let ex = Executor::through(secret, proxy);
    let mut cfg = ClientConfig::new(&ex.address);
    cfg.retry.attempts = 1;
    cfg.request_timeout = DEADLINE;
    let client = RunnerClient::new(cfg).unwrap().with_credentials(
        tenantci_core::forge::gitea::client::Credentials {
            uuid: ex.uuid.clone(),
            token: ex.token.clone(),
        },
    );
    client
        .declare(&DeclareRequest {
            version: "identity-test".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            ..Default::default()
        })
        .await
        .map(|_| ())
}

fn code(r: Result<(), ClientError>) -> Code {
    match r {
        Err(ClientError::Status { error, .. }) => error.code,
        other => panic!("expected a Connect error, got {other:?}"),
    }
}

/// A world with identity on, one dispatcher, and `jobs` claimed with their objects; each
/// task Pod's entry exists with its task's ID.
async fn claimed(jobs: &[&str]) -> (World, super::harness::Dispatcher, Vec<(i64, Secret, Pod)>) {
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
        w.create_entry(&pod_name(&pod), &task_id(job)).await;
        tasks.push((task, secret, pod));
    }
    (w, d, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_a_task_runs_to_success_through_its_proxy_with_its_svid() {
    let (w, d, tasks) = claimed(&["build"]).await;
    let (task, secret, pod) = &tasks[0];
    let proxy = proxy_as(&w, secret, pod, &pod_name(pod), &[]);
    let ex = Executor::through(secret, &proxy);
    let t = ex.fetch().await;
    assert_eq!(
        (t.id, t.secrets["DEPLOY_KEY"].as_str()),
        (*task, "s3cr3t-build")
    );
    // Mid-run the stand-in issues every entry a new SVID (the dispatcher's and the Pod's):
    // the next reports are served.
    let spire = w.spire.as_ref().unwrap();
    let before = spire.entries(w.http()).await;
    let after = spire.rotate(w.http()).await;
    assert_ne!(before, after, "new SVIDs issued");
    ex.finish(*task, &[&format!("ran task {task}")]).await;
    w.assert_succeeded_once(*task).await;
    w.all_cleaned_up().await;
    assert_eq!(
        d.metric("tenantci_dispatch_facade_identity_refused_total")
            .await,
        Some(0.0)
    );
    assert!(
        d.log_text().contains("serving SPIFFE mTLS"),
        "{}",
        d.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_on_the_facade_refuses_no_svid_a_foreign_svid_and_another_task_s_svid() {
    let (w, d, tasks) = claimed(&["build", "test"]).await;
    let (_, secret_a, pod_a) = &tasks[0];
    let (_, secret_b, pod_b) = &tasks[1];
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
    let a_with_b_svid = proxy_as(&w, secret_a, pod_a, &pod_name(pod_b), &[]);
    assert_eq!(
        code(declare(secret_a, &a_with_b_svid).await),
        Code::PermissionDenied
    );
    let b_with_a_svid = proxy_as(&w, secret_b, pod_b, &pod_name(pod_a), &[]);
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
    let (_, secret, pod) = &tasks[0];
    let wrong = "spiffe://example.org/ns/elsewhere/sa/impostor";
    let proxy = proxy_as(
        &w,
        secret,
        pod,
        &pod_name(pod),
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
    let config = w.config_only("d1");
    let out = run(tenantci()
        .args(["dispatch", "run", "--config"])
        .arg(&config)
        .envs(w.dispatcher_env().iter().map(|(k, v)| (k, v))));
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains(super::harness::FACADE_ID) && err.contains(configured),
        "{err}"
    );
}
