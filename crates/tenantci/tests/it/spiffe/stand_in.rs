//! The stand-in serves an entry's SVID over the Workload API once the entry exists, to
//! tenantci's Workload API source (the `spiffe` crate's client), pushes rotations, and closes
//! the socket when the entry is deleted.

use tenantci_core::spiffe::SvidSource;
use tenantci_core::spiffe::workload::WorkloadSource;
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::wait::{DEADLINE, eventually};

use super::{TASK_ID, create_entry, sim_with_spire};
use crate::util::{assert_exit, mode, scratch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_api_source_gets_the_entry_s_svid_and_follows_a_rotation() {
    let dir = scratch();
    let state = dir.path().join("state");
    let (sim, spire) = sim_with_spire(&state);
    assert_eq!(mode(&state.join("spire.json")), 0o600);
    assert_eq!(spire.trust_domain, "example.org");
    assert!(
        std::fs::read_to_string(&spire.bundle_file)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let http = reqwest::Client::new();
    assert!(spire.entries(&http).await.is_empty(), "no entry, no socket");

    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    create_entry(&kubectl, "exec-1", TASK_ID);
    let served = spire.served(&http, "ci", "exec-1").await;
    assert_eq!(served["spiffeId"], TASK_ID);

    let source = WorkloadSource::connect(Some(&spire.endpoint("ci", "exec-1")), DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let first = source.current().unwrap();
    assert_eq!(first.id().to_string(), TASK_ID);

    let mut updates = source.updates();
    let rotated = spire.rotate(&http).await;
    assert_ne!(rotated[0]["serial"], served["serial"], "{rotated:?}");
    updates
        .changed()
        .await
        .expect("the rotation reaches the source");
    let second = source.current().unwrap();
    assert_eq!(second.id().to_string(), TASK_ID);
    assert_ne!(second.leaf(), first.leaf(), "a new SVID after the rotation");

    // A changed SPIFFE ID is issued again and pushed on the open stream.
    let mut updates = source.updates();
    let moved = "spiffe://example.org/gitea/acme/widgets/2";
    let patch = format!(r#"{{"spec":{{"spiffeID":"{moved}"}}}}"#);
    let o = kubectl.run(&[
        "patch",
        "clusterstaticentry",
        "exec-1",
        "--type=merge",
        "-p",
        &patch,
    ]);
    assert_exit(&o, 0);
    updates
        .changed()
        .await
        .expect("the new ID reaches the source");
    assert_eq!(source.current().unwrap().id().to_string(), moved);

    let o = kubectl.run(&["delete", "clusterstaticentry", "exec-1"]);
    assert_exit(&o, 0);
    let socket = state.join("spire/ci/exec-1.sock");
    eventually("the entry's socket to be removed", || async {
        (!socket.exists()).then_some(())
    })
    .await;
    assert!(spire.entries(&http).await.is_empty());
    source.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_outside_the_trust_domain_gets_no_svid() {
    let dir = scratch();
    let state = dir.path().join("state");
    let (sim, spire) = sim_with_spire(&state);
    let http = reqwest::Client::new();
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    create_entry(
        &kubectl,
        "stranger",
        "spiffe://other.org/gitea/acme/widgets/1",
    );
    let entry = eventually("the stand-in to see the entry", || async {
        spire
            .entries(&http)
            .await
            .into_iter()
            .find(|e| e["name"] == "stranger")
    })
    .await;
    assert!(entry["serial"].is_null(), "{entry}");
    let err = WorkloadSource::connect(
        Some(&spire.endpoint("ci", "stranger")),
        std::time::Duration::from_secs(2),
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("no X509-SVID"), "{}", err.render());
}

#[test]
fn a_bad_trust_domain_is_refused_before_anything_is_written() {
    let dir = scratch();
    let state = dir.path().join("state");
    let out = crate::util::run(
        crate::util::tenantci()
            .args(["sim", "--cluster", "ci", "--spire", "Not A Domain"])
            .arg("--state-dir")
            .arg(&state),
    );
    assert_exit(&out, 2);
    let err = crate::util::stderr(&out);
    assert!(
        err.contains("--spire `Not A Domain` is not a SPIFFE trust domain"),
        "{err}"
    );
    assert!(!state.exists(), "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_kept_across_a_restart_are_served_before_the_ready_line() {
    let dir = scratch();
    let state = dir.path().join("state");
    let (sim, spire) = sim_with_spire(&state);
    let http = reqwest::Client::new();
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    create_entry(&kubectl, "exec-1", TASK_ID);
    spire.served(&http, "ci", "exec-1").await;
    assert_eq!(sim.stop(), Some(0));
    assert!(
        !state.join("spire/ci/exec-1.sock").exists(),
        "a stopped stand-in leaves no socket"
    );

    let (_sim, spire) = sim_with_spire(&state);
    let entries = spire.entries(&http).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["spiffeId"], TASK_ID);
    assert!(entries[0]["serial"].is_u64(), "{entries:?}");
    let source = WorkloadSource::connect(Some(&spire.endpoint("ci", "exec-1")), DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(source.current().unwrap().id().to_string(), TASK_ID);
    source.shutdown().await;
}
