//! `tenantci sim --gitea`: the double is served next to the apiservers and described in
//! `<state>/gitea.json` (0600) before the ready line.

use tenantci_core::forge::gitea::Codec;
use tenantci_core::forge::gitea::proto::RegisterRequest;

use crate::util::{mode, scratch, tenantci};
use tenantci_testkit::sim::SimProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_sim_flag_serves_the_double_and_writes_gitea_json() {
    let dir = scratch();
    let state = dir.path().join("state");
    let _sim = SimProcess::start(tenantci(), &state, &["ci"], &["--gitea"]);
    let path = state.join("gitea.json");
    assert_eq!(
        mode(&path),
        0o600,
        "gitea.json holds the registration token"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let url = doc["url"].as_str().unwrap().to_string();
    let token = doc["registrationToken"].as_str().unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let runner = super::client(&url, Codec::Proto)
        .register(&RegisterRequest {
            name: "r1".into(),
            token,
            labels: vec!["self-hosted".into(), "pod".into()],
            ..Default::default()
        })
        .await
        .expect("register with the token from gitea.json");
    assert!(!runner.uuid.is_empty() && !runner.token.is_empty());
}
