//! kube-rs against an in-process simulator: CRUD, server-side apply, a runtime watcher and
//! optimistic concurrency on a Lease.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::util;
use tenantci_testkit::kube::kube_client;
use tenantci_testkit::sim::in_process;
use tenantci_testkit::wait::DEADLINE;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap()
}

fn api_status(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_kube_pod_crud() {
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let client = kube_client(&sim.info.clusters[0].tenant_admin_kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    // Placement is asynchronous (a node is rented for the pod): wait for the event.
    let running = kube::runtime::wait::await_condition(
        pods.clone(),
        "a",
        kube::runtime::conditions::is_pod_running(),
    );
    tokio::time::timeout(DEADLINE, running)
        .await
        .expect("deadlock guard")
        .unwrap();
    let got = pods.get("a").await.unwrap();
    assert!(got.spec.unwrap().node_name.unwrap().starts_with("rented-"));
    assert_eq!(got.status.unwrap().phase.as_deref(), Some("Running"));
    let (code, reason) = api_status(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let listed = pods
        .list(&ListParams::default().labels("app=t"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let listed = pods
        .list(&ListParams::default().fields("status.phase=Running"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["x"], "y");
    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox")
    );
    for i in 0..5 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let page = pods.list(&ListParams::default().limit(4)).await.unwrap();
    assert_eq!(page.items.len(), 4);
    let rest = pods
        .list(
            &ListParams::default()
                .limit(4)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 2);
    assert!(rest.metadata.continue_.is_none());
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    let (code, _) = api_status(pods.get("a").await.unwrap_err());
    assert_eq!(code, 404);
    let (code, reason) = api_status(
        pods.create(&PostParams::default(), &pod("Bad_Name"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "gone"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let in_gone: Api<Pod> = Api::namespaced(client.clone(), "gone");
    in_gone
        .create(&PostParams::default(), &pod("x"))
        .await
        .unwrap();
    namespaces
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    let (code, _) = api_status(in_gone.get("x").await.unwrap_err());
    assert_eq!(code, 404, "deleting a namespace removes its pods");
    let missing: Api<Pod> = Api::namespaced(client, "nope");
    let (code, _) = api_status(
        missing
            .create(&PostParams::default(), &pod("z"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_kube_apply_creates_then_updates_and_detects_conflicts() {
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let client = kube_client(&sim.info.clusters[0].tenant_admin_kubeconfig).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": v}});
    let first = cms
        .patch(
            "cfg",
            &PatchParams::apply("tenantci"),
            &Patch::Apply(cm("1")),
        )
        .await
        .unwrap();
    let rv1 = first.metadata.resource_version.clone().unwrap();
    let mf = first.metadata.managed_fields.unwrap();
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("tenantci"), Some("Apply"))
    );
    let again = cms
        .patch(
            "cfg",
            &PatchParams::apply("tenantci"),
            &Patch::Apply(cm("1")),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version.unwrap(),
        rv1,
        "a no-op apply writes nothing"
    );
    let second = cms
        .patch(
            "cfg",
            &PatchParams::apply("tenantci"),
            &Patch::Apply(cm("2")),
        )
        .await
        .unwrap();
    assert_eq!(second.data.unwrap()["k"], "2");
    let (code, reason) = api_status(
        cms.patch("cfg", &PatchParams::apply("other"), &Patch::Apply(cm("3")))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    let forced = cms
        .patch(
            "cfg",
            &PatchParams::apply("other").force(),
            &Patch::Apply(cm("3")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k"], "3");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_kube_watcher_sees_added_modified_deleted() {
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let client = kube_client(&sim.info.clusters[0].tenant_admin_kubeconfig).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    // The initial list ends with InitDone: from then on every change is an event.
    loop {
        match tokio::time::timeout(DEADLINE, events.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(watcher::Event::InitDone) => break,
            Some(_) => {}
            None => panic!("watcher ended"),
        }
    }
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "w"}, "data": {"a": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("w", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match tokio::time::timeout(DEADLINE, events.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(watcher::Event::Apply(o)) => seen.push(format!("apply:{}", o.data.unwrap()["a"])),
            Some(watcher::Event::Delete(_)) => seen.push("delete".into()),
            _ => {}
        }
    }
    assert_eq!(seen, ["apply:1", "apply:2", "delete"]);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_kube_lease_update_with_stale_version_conflicts() {
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let client = kube_client(&sim.info.clusters[0].tenant_admin_kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "dispatcher"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let stale = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut fresh = stale.clone();
    fresh.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("dispatcher", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let mut late = stale;
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let (code, reason) = api_status(
        leases
            .replace("dispatcher", &PostParams::default(), &late)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        leases
            .get("dispatcher")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("b")
    );
    sim.shutdown().await;
}

/// What kube-runtime's metadata watcher needs of an apiserver: `PartialObjectMetadata` lists
/// and watch events (a Secret's data never on the wire), and, after a restart, a 410 for the
/// version it watched from, so it lists once again; `apiserver_request_total` counts each verb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_kube_metadata_watch_relists_once_after_a_restart_and_carries_no_data() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::core::PartialObjectMeta;
    let scratch = util::scratch();
    let sim = in_process(scratch.path(), "ci").await;
    let client = kube_client(&sim.info.clusters[0].tenant_admin_kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret = |name: &str| -> Secret {
        serde_json::from_value(
            json!({"metadata": {"name": name, "annotations": {"a": name}},
            "stringData": {"key": "s3cr3t-value"}}),
        )
        .unwrap()
    };
    secrets
        .create(&PostParams::default(), &secret("one"))
        .await
        .unwrap();
    let raw = http::Request::get("/api/v1/namespaces/default/secrets")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let list = client.request_text(raw).await.unwrap();
    assert!(
        list.contains("PartialObjectMetadataList") && list.contains("\"a\":\"one\""),
        "{list}"
    );
    assert!(!list.contains("s3cr3t"), "metadata only: {list}");

    let meta: Api<PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), "default");
    let mut events = watcher(meta, watcher::Config::default()).boxed();
    // Until `name` is seen, as an event or in the list after a 410.
    let mut seen = async |name: &str| loop {
        match tokio::time::timeout(DEADLINE, events.try_next())
            .await
            .unwrap()
        {
            Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o)))
                if o.metadata.name.as_deref() == Some(name) =>
            {
                return;
            }
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("watcher ended"),
        }
    };
    secrets
        .create(&PostParams::default(), &secret("two"))
        .await
        .unwrap();
    seen("two").await;
    let lists = || async {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        text.lines()
            .find(|l| l.contains("resource=\"secrets\"") && l.contains("verb=\"LIST\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // The raw list and the watcher's first.
    assert_eq!(lists().await, 2);
    sim.tenants[0].1.restart();
    secrets
        .create(&PostParams::default(), &secret("three"))
        .await
        .unwrap();
    seen("three").await;
    assert_eq!(lists().await, 3, "one list after the 410");
    sim.shutdown().await;
}
