use super::*;
use serde_json::json;

const BOOT: Duration = Duration::from_secs(2);

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn body(task: &str) -> Value {
    json!({
        "image": {"uri": "registry.example/executor@sha256:abc"},
        "entrypoint": ["/bin/runner", "one-task"],
        "resourceLimits": {"cpu": "2", "memory": "4Gi"},
        "timeout": 3600,
        "env": {"A": "1"},
        "metadata": {"tenantci.io/task-id": task, "tenantci.io/dispatcher": "7"},
    })
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

#[test]
fn pending_until_the_boot_delay_then_running() {
    let mut s = Sandboxes::default();
    let created = s.create(&body("1"), BOOT, t(0)).unwrap();
    assert_eq!(created["status"]["state"], "Pending");
    let id = id(&created);
    assert_eq!(s.get(&id, t(1)).unwrap().state(t(1)), "Pending");
    assert_eq!(s.get(&id, t(2)).unwrap().state(t(2)), "Running");
    s.fail(&id, None, None, t(3)).unwrap();
    let api = s.get(&id, t(3)).unwrap().to_api(t(3));
    assert_eq!(api["status"]["state"], "Failed");
    assert_eq!(api["status"]["reason"], "runtime_error");
}

#[test]
fn create_refuses_what_the_api_refuses() {
    let mut s = Sandboxes::default();
    let refuse = |s: &mut Sandboxes, f: &dyn Fn(&mut Value)| {
        let mut b = body("1");
        f(&mut b);
        s.create(&b, BOOT, t(0)).unwrap_err()
    };
    assert_eq!(refuse(&mut s, &|b| b["timeout"] = json!(59)).status, 400);
    assert_eq!(refuse(&mut s, &|b| b["entrypoint"] = json!([])).status, 400);
    assert_eq!(refuse(&mut s, &|b| b["image"] = json!({})).status, 400);
    assert_eq!(
        refuse(&mut s, &|b| b
            .as_object_mut()
            .unwrap()
            .remove("resourceLimits")
            .map(drop)
            .unwrap())
        .status,
        400
    );
    let e = refuse(&mut s, &|b| b["metadata"]["opensandbox.io/x"] = json!("y"));
    assert_eq!((e.status, e.code), (400, "INVALID_METADATA_LABEL"));
    let e = refuse(&mut s, &|b| b["metadata"]["k"] = json!("a:b"));
    assert_eq!(e.code, "INVALID_METADATA_LABEL");
    assert_eq!(s.stats(t(0)).created, 0, "nothing created by a refusal");
    let mut pooled = body("1");
    pooled.as_object_mut().unwrap().remove("resourceLimits");
    pooled["extensions"] = json!({"poolRef": "p"});
    pooled["timeout"] = Value::Null;
    assert!(s.create(&pooled, BOOT, t(0)).is_ok());
}

#[test]
fn list_filters_states_or_and_metadata_and_and_pages() {
    let mut s = Sandboxes::default();
    for task in ["1", "2", "3", "4", "5"] {
        s.create(&body(task), BOOT, t(0)).unwrap();
    }
    let mut other = body("1");
    other["metadata"]["tenantci.io/dispatcher"] = json!("8");
    s.create(&other, Duration::ZERO, t(0)).unwrap();
    let q = |states: &[&str], md: &[(&str, &str)], page, size| ListQuery {
        states: states.iter().map(|s| s.to_string()).collect(),
        metadata: md
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        page,
        page_size: size,
    };
    let ours = [("tenantci.io/dispatcher", "7")];
    let p1 = s.list(&q(&[], &ours, 1, 2), t(1));
    assert_eq!(p1["items"].as_array().unwrap().len(), 2);
    assert_eq!(p1["pagination"]["totalItems"], 5);
    assert_eq!(p1["pagination"]["totalPages"], 3);
    assert_eq!(p1["pagination"]["hasNextPage"], true);
    let p3 = s.list(&q(&[], &ours, 3, 2), t(1));
    assert_eq!(p3["items"].as_array().unwrap().len(), 1);
    assert_eq!(p3["pagination"]["hasNextPage"], false);
    let both = [
        ("tenantci.io/dispatcher", "7"),
        ("tenantci.io/task-id", "1"),
    ];
    assert_eq!(
        s.list(&q(&[], &both, 1, 20), t(1))["pagination"]["totalItems"],
        1
    );
    assert_eq!(
        s.list(&q(&["Running"], &[], 1, 20), t(1))["pagination"]["totalItems"],
        1
    );
    let either = s.list(&q(&["Running", "Pending"], &[], 1, 20), t(1));
    assert_eq!(either["pagination"]["totalItems"], 6);
}

#[test]
fn metadata_merge_patch_sets_and_removes_and_keeps_the_rules() {
    let mut s = Sandboxes::default();
    let id = id(&s.create(&body("1"), BOOT, t(0)).unwrap());
    let v = s
        .patch_metadata(
            &id,
            &json!({"tenantci.io/terminal": "success", "tenantci.io/task-id": null}),
            t(1),
        )
        .unwrap();
    assert_eq!(
        v["metadata"],
        json!({"tenantci.io/dispatcher": "7", "tenantci.io/terminal": "success"})
    );
    let e = s
        .patch_metadata(&id, &json!({"opensandbox.io/owner": "me"}), t(1))
        .unwrap_err();
    assert_eq!(e.code, "INVALID_METADATA_LABEL");
    assert_eq!(
        s.get(&id, t(1)).unwrap().metadata.len(),
        2,
        "a refused patch changes nothing"
    );
}

#[test]
fn renew_must_be_future_and_later_and_expiry_removes() {
    let mut s = Sandboxes::default();
    let id = id(&s.create(&body("1"), BOOT, t(0)).unwrap());
    let at = |secs| json!({"expiresAt": rfc3339(t(secs))});
    assert_eq!(
        s.renew(&id, &at(5), t(10)).unwrap_err().status,
        409,
        "in the past"
    );
    assert_eq!(
        s.renew(&id, &at(3000), t(10)).unwrap_err().status,
        409,
        "earlier than 3600"
    );
    assert_eq!(
        s.renew(&id, &json!({"expiresAt": "soon"}), t(10))
            .unwrap_err()
            .status,
        400
    );
    assert_eq!(
        s.renew(&id, &at(7200), t(10)).unwrap()["expiresAt"],
        rfc3339(t(7200))
    );
    assert!(s.get(&id, t(7199)).is_ok());
    assert_eq!(
        s.get(&id, t(7200)).unwrap_err().status,
        404,
        "expired: gone"
    );
    assert_eq!(s.gone(&id), Some(Gone::TtlExpiry));
}

#[test]
fn delete_then_not_found() {
    let mut s = Sandboxes::default();
    let a = id(&s.create(&body("1"), BOOT, t(0)).unwrap());
    s.create(&body("2"), BOOT, t(0)).unwrap();
    s.delete(&a, t(1)).unwrap();
    assert_eq!(s.delete(&a, t(1)).unwrap_err().status, 404);
    assert_eq!(s.get(&a, t(1)).unwrap_err().code, "SANDBOX_NOT_FOUND");
    let st = s.stats(t(1));
    assert_eq!((st.created, st.deleted, st.live, st.max_live), (2, 1, 1, 2));
}
