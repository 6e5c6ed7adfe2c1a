//! (Self)SubjectAccessReviews.

use super::*;

#[test]
fn self_subject_access_review_evaluates_the_caller() {
    let rbac = {
        let mut r = default_rbac();
        r.extend(namespace_fixture());
        r
    };
    let body = json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {"resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods", "name": "p"}}
    });
    let out = evaluate_access_review(ReviewKind::SelfSubjectAccessReview, &body, &alice(), &rbac)
        .unwrap();
    assert_eq!(
        out["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"read-pods/team\" of Role \"pod-reader\" to User \"alice\""})
    );
    assert_eq!(out["spec"], body["spec"]);
    assert_eq!(out["kind"], "SelfSubjectAccessReview");
    let mut denied = body.clone();
    denied["spec"]["resourceAttributes"]["namespace"] = json!("kube-system");
    let out = evaluate_access_review(
        ReviewKind::SelfSubjectAccessReview,
        &denied,
        &alice(),
        &rbac,
    )
    .unwrap();
    assert_eq!(out["status"], json!({"allowed": false}));
    let nonres = json!({"spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}});
    let out = evaluate_access_review(
        ReviewKind::SelfSubjectAccessReview,
        &nonres,
        &UserInfo::anonymous(),
        &rbac,
    )
    .unwrap();
    assert_eq!(out["status"]["allowed"], true);
    assert_eq!(out["apiVersion"], "authorization.k8s.io/v1");
    let neither = json!({"spec": {}});
    assert!(
        evaluate_access_review(
            ReviewKind::SelfSubjectAccessReview,
            &neither,
            &alice(),
            &rbac
        )
        .unwrap_err()
        .contains("exactly one of")
    );
    let both = json!({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {}}});
    assert!(
        evaluate_access_review(ReviewKind::SelfSubjectAccessReview, &both, &alice(), &rbac)
            .is_err()
    );
    let admin = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let out = evaluate_access_review(ReviewKind::SelfSubjectAccessReview, &denied, &admin, &rbac)
        .unwrap();
    assert_eq!(out["status"], json!({"allowed": true}));
}

#[test]
fn subject_access_review_evaluates_the_named_subject() {
    let rbac = namespace_fixture();
    let review = |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
    let caller = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let eval = |spec: Value| {
        evaluate_access_review(
            ReviewKind::SubjectAccessReview,
            &review(spec),
            &caller,
            &rbac,
        )
    };
    let ok = eval(json!({"user": "alice", "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}})).unwrap();
    assert_eq!(ok["status"]["allowed"], true);
    // Groups are exactly those given: no system:authenticated is added.
    let mut with_auth = namespace_fixture();
    with_auth.cluster_roles.push(cluster_role(
        "all-pods",
        vec![rule(&["list"], &[""], &["pods"])],
    ));
    with_auth.cluster_role_bindings.push(crb(
        "all-pods",
        "all-pods",
        vec![subject("Group", "system:authenticated")],
    ));
    let spec = json!({"user": "bob", "resourceAttributes": {"namespace": "x", "verb": "list", "resource": "pods"}});
    let out = evaluate_access_review(
        ReviewKind::SubjectAccessReview,
        &review(spec.clone()),
        &caller,
        &with_auth,
    )
    .unwrap();
    assert_eq!(out["status"]["allowed"], false);
    let mut spec2 = spec;
    spec2["groups"] = json!(["system:authenticated"]);
    let out = evaluate_access_review(
        ReviewKind::SubjectAccessReview,
        &review(spec2),
        &caller,
        &with_auth,
    )
    .unwrap();
    assert_eq!(out["status"]["allowed"], true);
    // The caller's own rights do not matter.
    let denied = eval(json!({"user": "bob", "groups": ["nobody"], "resourceAttributes": {"verb": "get", "resource": "secrets"}})).unwrap();
    assert_eq!(denied["status"], json!({"allowed": false}));
    let err = eval(json!({"resourceAttributes": {"verb": "get", "resource": "pods"}})).unwrap_err();
    assert_eq!(
        err,
        "spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    let status = review_invalid_status(ReviewKind::SubjectAccessReview, &err);
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "spec.user", "message": "Invalid value: \"\": at least one of user or group must be specified"}])
    );
    // Empty version means any version; groups-only subjects work.
    let g = eval(json!({"groups": ["auditors"], "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "secrets", "name": "s", "version": ""}})).unwrap();
    assert_eq!(g["status"]["allowed"], true);
}

#[test]
fn review_attributes_default_version_to_any() {
    let a = Attributes::from_review_spec(&json!({"resourceAttributes": {"verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale", "namespace": "n", "name": "d"}})).unwrap();
    assert_eq!(
        a,
        Attributes::Resource(ResourceAttributes {
            verb: "get".into(),
            api_group: "apps".into(),
            api_version: "*".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            namespace: "n".into(),
            name: "d".into()
        })
    );
    let n = Attributes::from_review_spec(
        &json!({"nonResourceAttributes": {"verb": "get", "path": "/api"}}),
    )
    .unwrap();
    assert_eq!(n, Attributes::non_resource("get", "/api"));
    assert!(Attributes::from_review_spec(&json!({"resourceAttributes": {"verb": 3}})).is_err());
}
