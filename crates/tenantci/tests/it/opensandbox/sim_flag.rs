//! `tenantci sim --opensandbox`: the double beside the apiservers, its key and address in the
//! state dir (0600) before the ready line; the API's auth and error shape over HTTP.

use serde_json::Value;

use crate::util::{mode, scratch, tenantci};
use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::sim::SimProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opensandbox_sim_flag_serves_the_double_and_writes_its_key_file() {
    let dir = scratch();
    let state = dir.path().join("state");
    let _sim = SimProcess::start(
        tenantci(),
        &state,
        &["ci"],
        &["--opensandbox", "--opensandbox-boot", "100ms"],
    );
    for f in ["opensandbox.json", "opensandbox-api-key"] {
        assert_eq!(
            mode(&state.join(f)),
            0o600,
            "{f} names or holds the API key"
        );
    }
    let o = OpenSandbox::from_state_dir(&state);
    assert!(o.url.starts_with("http://127.0.0.1:"), "{}", o.url);
    let http = reqwest::Client::new();

    let health = http.get(format!("{}/health", o.url)).send().await.unwrap();
    assert_eq!(health.status(), 200, "/health needs no key");

    for prefix in ["", "/v1"] {
        let resp = http
            .get(format!("{}{prefix}/sandboxes", o.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "no key at {prefix}/sandboxes");
        assert!(resp.headers().contains_key("x-request-id"));
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["code"].is_string() && body["message"].is_string(),
            "{body}"
        );

        let resp = http
            .get(format!("{}{prefix}/sandboxes?state=Running", o.url))
            .header("OPEN-SANDBOX-API-KEY", o.api_key())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["pagination"]["totalItems"], 0, "{body}");
    }
    let resp = http
        .get(format!("{}/v1/sandboxes?metadata=no-equals-sign", o.url))
        .header("OPEN-SANDBOX-API-KEY", o.api_key())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "INVALID_METADATA_FORMAT");
}

#[test]
fn a_bad_boot_delay_is_refused_before_anything_is_written() {
    let dir = scratch();
    let state = dir.path().join("state");
    let out = crate::util::run(
        tenantci()
            .args([
                "sim",
                "--cluster",
                "ci",
                "--opensandbox",
                "--opensandbox-boot",
                "soon",
            ])
            .arg("--state-dir")
            .arg(&state),
    );
    crate::util::assert_exit(&out, 2);
    assert!(
        crate::util::stderr(&out).contains("--opensandbox-boot"),
        "{}",
        crate::util::stderr(&out)
    );
    assert!(!state.exists(), "nothing written");
}
