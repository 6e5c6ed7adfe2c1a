//! tenantci's Lifecycle API client against the double over HTTP: the calls the VM backend
//! makes, and each failure class as the typed error the backend decides on.

use std::collections::BTreeMap;
use std::time::Duration;

use tenantci_core::Secret;
use tenantci_core::opensandbox::{
    ApiError, ClientConfig, LifecycleClient, ListFilter, SandboxState,
};
use tenantci_testkit::wait::eventually;

use super::{double, request};
use crate::util::scratch;

fn ours(task: Option<&str>) -> ListFilter {
    let mut metadata = BTreeMap::from([("tenantci.io/dispatcher".to_string(), "7".to_string())]);
    if let Some(t) = task {
        metadata.insert("tenantci.io/task-id".into(), t.into());
    }
    ListFilter {
        states: Vec::new(),
        metadata,
    }
}

#[tokio::test]
async fn create_pending_then_running_get_patch_delete_then_gone() {
    let dir = scratch();
    let (_h, o) = double(dir.path(), Duration::from_millis(200)).await;
    let c = o.client();
    let http = reqwest::Client::new();

    let s = c.create(&request("41", "cap-secret")).await.unwrap();
    assert_eq!(s.status.state, SandboxState::Pending);
    assert_eq!(s.metadata["tenantci.io/task-id"], "41");
    assert!(s.expires_at.is_some(), "a timeout gives an expiry");
    let (_, admin) = o.sandbox(&http, &s.id).await;
    assert_eq!(
        admin["env"]["TENANTCI_CAPABILITY"], "cap-secret",
        "the env reaches the sandbox"
    );
    assert_eq!(admin["entrypoint"][0], "/usr/local/bin/act_runner");

    eventually("the sandbox to boot", || async {
        let got = c.get(&s.id).await.unwrap().unwrap();
        (got.status.state == SandboxState::Running).then_some(())
    })
    .await;

    let patch = BTreeMap::from([
        (
            "tenantci.io/terminal".to_string(),
            Some("success".to_string()),
        ),
        ("tenantci.io/attempt".to_string(), None),
    ]);
    let patched = c.patch_metadata(&s.id, &patch).await.unwrap().unwrap();
    assert_eq!(patched.metadata["tenantci.io/terminal"], "success");
    assert!(!patched.metadata.contains_key("tenantci.io/attempt"));

    assert!(c.delete(&s.id).await.unwrap(), "deleted by this call");
    assert!(!c.delete(&s.id).await.unwrap(), "404: already gone");
    assert_eq!(c.get(&s.id).await.unwrap(), None);
    assert_eq!(c.patch_metadata(&s.id, &patch).await.unwrap(), None);
    let (status, gone) = o.sandbox(&http, &s.id).await;
    assert_eq!((status, gone["gone"].as_str()), (404, Some("user_delete")));
}

#[tokio::test]
async fn list_filters_by_metadata_and_state_across_pages() {
    let dir = scratch();
    let (h, o) = double(dir.path(), Duration::ZERO).await;
    let c = o.client();
    // More than one page of the client's page size (100).
    for task in 0..105 {
        c.create(&request(&task.to_string(), "s")).await.unwrap();
    }
    let mut foreign = request("5", "s");
    foreign
        .metadata
        .insert("tenantci.io/dispatcher".into(), "8".into());
    c.create(&foreign).await.unwrap();

    let all = c.list(&ours(None)).await.unwrap();
    assert_eq!(all.len(), 105, "every page, only this dispatcher's");
    let mut ids: Vec<_> = all.iter().map(|s| s.id.clone()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 105, "no sandbox listed twice across pages");
    // What a benchmark reads as the client's cost: calls by route, sandboxes returned.
    let http = reqwest::Client::new();
    let stats = o.stats(&http).await;
    assert_eq!(stats["calls"]["POST /sandboxes"], 106, "{stats}");
    assert_eq!(stats["calls"]["GET /sandboxes"], 2, "two pages: {stats}");
    assert_eq!(stats["listed"], 105, "{stats}");
    assert_eq!(
        o.ids(&http).await.len(),
        106,
        "the admin view's ids: every live sandbox"
    );
    let other = http
        .get(format!("{}/sandboxes?fields=env", o.admin_url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        other.status(),
        400,
        "a field list it does not know is refused"
    );

    let one = c.list(&ours(Some("5"))).await.unwrap();
    assert_eq!(one.len(), 1, "metadata entries are AND'ed");
    assert_eq!(one[0].metadata["tenantci.io/dispatcher"], "7");

    h.double
        .sandboxes()
        .fail(&one[0].id, None, None, std::time::SystemTime::now())
        .unwrap();
    let failed = c
        .list(&ListFilter {
            states: vec![SandboxState::Failed, SandboxState::Pending],
            ..ours(None)
        })
        .await
        .unwrap();
    assert_eq!(failed.len(), 1, "states are OR'ed; the others are Running");
    assert_eq!(failed[0].status.reason.as_deref(), Some("runtime_error"));
}

#[tokio::test]
async fn failures_are_typed_for_the_backend_to_decide() {
    let dir = scratch();
    let (_h, o) = double(dir.path(), Duration::ZERO).await;
    let http = reqwest::Client::new();
    let c = o.client();

    // 400: the request is wrong; the API's message says why, retrying cannot help.
    let mut bad = request("1", "s");
    bad.metadata
        .insert("opensandbox.io/owner".into(), "me".into());
    match c.create(&bad).await.unwrap_err() {
        e @ ApiError::Rejected { .. } => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("INVALID_METADATA_LABEL"), "{e}");
            assert!(e.to_string().contains("reserved prefix"), "{e}");
        }
        e => panic!("expected Rejected, got {e:?}"),
    }

    // 401: a clear error naming the key file, never the key.
    let wrong_file = dir.path().join("wrong-key");
    let wrong = LifecycleClient::new(ClientConfig::new(
        &o.url,
        Secret::new("not-the-key"),
        wrong_file.clone(),
    ))
    .unwrap();
    let e = wrong.list(&ours(None)).await.unwrap_err();
    assert!(
        matches!(e, ApiError::Unauthorized { .. }) && !e.is_retryable(),
        "{e:?}"
    );
    let rendered = e.into_error().render();
    assert!(
        rendered.contains(&wrong_file.display().to_string()),
        "{rendered}"
    );
    assert!(
        !rendered.contains(&o.api_key()) && !rendered.contains("not-the-key"),
        "{rendered}"
    );

    // 503 and 409 (an injected outage): retryable, and nothing was created meanwhile.
    for (status, conflict) in [(503u16, false), (409, true)] {
        o.outage(&http, status, Duration::from_secs(600)).await;
        let e = c.create(&request("2", "s")).await.unwrap_err();
        assert!(e.is_retryable(), "{status}: {e:?}");
        assert_eq!(matches!(e, ApiError::Conflict { .. }), conflict, "{e:?}");
        o.outage(&http, status, Duration::ZERO).await;
    }
    assert_eq!(o.stats(&http).await["created"], 0);

    // Unreachable: nothing listens any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = LifecycleClient::new(ClientConfig::new(
        &format!("http://127.0.0.1:{port}"),
        Secret::new(o.api_key()),
        o.api_key_file.clone(),
    ))
    .unwrap();
    let e = gone.get("x").await.unwrap_err();
    assert!(
        matches!(e, ApiError::Unreachable { .. }) && e.is_retryable(),
        "{e:?}"
    );
}

/// A 400 that is not the API's JSON (a proxy's HTML page, or nothing at all) names the status
/// and a bounded, escaped excerpt of the body instead of "refused the request (: )".
#[tokio::test]
async fn a_refusal_without_the_apis_json_names_the_status_and_the_body() {
    let dir = scratch();
    let (_h, o) = double(dir.path(), Duration::ZERO).await;
    let http = reqwest::Client::new();
    let c = o.client();
    let page = format!(
        "<html>\n<head><title>400 Bad Request</title></head>\n<body>{}</body></html>",
        "nginx ".repeat(100)
    );
    o.outage_with_body(&http, 400, &page, Duration::from_secs(600))
        .await;
    let e = c.create(&request("1", "s")).await.unwrap_err();
    assert!(matches!(e, ApiError::Rejected { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("HTTP 400 Bad Request, body \"<html>\\n<head><title>400 Bad Request</title>"),
        "{text}"
    );
    assert!(
        text.contains(&format!("... ({} bytes)", page.len())),
        "{text}"
    );
    assert!(!text.contains('\n') && text.len() < 400, "bounded: {text}");
    let rendered = e.into_error().render();
    assert!(
        rendered.contains("not the Lifecycle API's JSON"),
        "{rendered}"
    );

    o.outage_with_body(&http, 400, "", Duration::from_secs(600))
        .await;
    let e = c.create(&request("1", "s")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "the OpenSandbox Lifecycle API refused the request (HTTP 400 Bad Request, empty body)"
    );
    o.end_outage(&http).await;
    assert_eq!(o.stats(&http).await["created"], 0);
}
