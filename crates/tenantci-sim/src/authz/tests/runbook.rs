//! The runbook's RBAC, end to end.

use super::*;

/// The runbook's step 5 RBAC (seeds/000): a ClusterRole bound cluster-wide to group
/// gitlab-runner, checked the way `kubectl auth can-i --as --as-group` and the minted
/// credential exercise it.
#[test]
fn runbook_rbac_behaves_like_kube_apiserver() {
    let yaml = r#"
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: gitlab-runner}
  rules:
    - apiGroups: [""]
      resources: ["pods", "pods/exec", "pods/attach", "pods/log"]
      verbs: ["create", "delete", "get", "list", "watch", "patch", "update"]
    - apiGroups: [""]
      resources: ["secrets", "configmaps", "services", "serviceaccounts", "events", "persistentvolumeclaims"]
      verbs: ["create", "delete", "get", "list", "watch", "update"]
    - apiGroups: ["apps"]
      resources: ["deployments"]
      verbs: ["create", "delete", "get", "list", "update"]
    - apiGroups: ["policy"]
      resources: ["poddisruptionbudgets"]
      verbs: ["create", "delete", "get", "list", "update"]
    - apiGroups: ["scheduling.k8s.io"]
      resources: ["priorityclasses"]
      verbs: ["get", "create"]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: gitlab-runner}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gitlab-runner}
  subjects:
    - {kind: Group, name: gitlab-runner, apiGroup: rbac.authorization.k8s.io}
"#;
    let docs: Vec<Value> = serde_yaml::from_str(yaml).unwrap();
    let mut rbac = default_rbac();
    rbac.cluster_roles
        .push(serde_json::from_value(docs[0].clone()).unwrap());
    rbac.cluster_role_bindings
        .push(serde_json::from_value(docs[1].clone()).unwrap());

    // kubectl --kubeconfig tenant-admin auth can-i create pods -n gitlab-runner --as=gitlab-runner --as-group=gitlab-runner
    let admin = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let h = headers(&[
        ("Impersonate-User", "gitlab-runner"),
        ("Impersonate-Group", "gitlab-runner"),
    ]);
    let runner = impersonate(&admin, &h, &rbac).unwrap();
    assert_eq!(
        runner,
        UserInfo::new("gitlab-runner", ["gitlab-runner", "system:authenticated"])
    );
    let can_i = |user: &UserInfo, attrs: Value| {
        let body = json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": {"resourceAttributes": attrs}});
        evaluate_access_review(ReviewKind::SelfSubjectAccessReview, &body, user, &rbac).unwrap()["status"]
            ["allowed"]
            == true
    };
    // Discovery and the review itself are allowed by the defaults.
    for path in ["/version", "/api", "/api/v1", "/apis"] {
        let info = request_info(&Method::GET, path, Some("timeout=32s"));
        assert!(allowed(&runner, Attributes::from(&info), &rbac), "{path}");
    }
    let review = request_info(
        &Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        None,
    );
    assert!(allowed(&runner, Attributes::from(&review), &rbac));
    assert!(can_i(
        &runner,
        json!({"namespace": "gitlab-runner", "verb": "create", "resource": "pods"})
    ));
    assert!(can_i(
        &runner,
        json!({"namespace": "gitlab-runner", "verb": "create", "resource": "pods", "subresource": "exec"})
    ));
    assert!(can_i(
        &runner,
        json!({"verb": "create", "group": "scheduling.k8s.io", "resource": "priorityclasses"})
    ));
    assert!(!can_i(
        &runner,
        json!({"verb": "delete", "group": "scheduling.k8s.io", "resource": "priorityclasses"})
    ));
    assert!(!can_i(
        &runner,
        json!({"namespace": "gitlab-runner", "verb": "create", "resource": "pods", "subresource": "portforward"})
    ));
    assert!(!can_i(
        &runner,
        json!({"namespace": "gitlab-runner", "verb": "patch", "resource": "secrets"})
    ));
    // The runbook binds with a ClusterRoleBinding, so secrets are readable in every namespace,
    // kube-system included: kube-apiserver answers yes here too.
    assert!(can_i(
        &runner,
        json!({"namespace": "kube-system", "verb": "get", "resource": "secrets"})
    ));
    // A credential whose O differs from the bound group gets nothing but discovery.
    let wrong_o = UserInfo::authenticated("gitlab-runner", ["other-team"]);
    let list_pods = request_info(&Method::GET, "/api/v1/namespaces/gitlab-runner/pods", None);
    assert!(allowed(&runner, Attributes::from(&list_pods), &rbac));
    assert!(!allowed(&wrong_o, Attributes::from(&list_pods), &rbac));
    assert_eq!(
        forbidden_status(&wrong_o, &Attributes::from(&list_pods))["message"],
        "pods is forbidden: User \"gitlab-runner\" cannot list resource \"pods\" in API group \"\" in the namespace \"gitlab-runner\""
    );
    // Creating a ClusterRoleBinding is refused by the authorizer before escalation matters,
    // and escalation prevention would refuse binding cluster-admin anyway.
    let create_crb = request_info(
        &Method::POST,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        None,
    );
    assert!(!allowed(&runner, Attributes::from(&create_crb), &rbac));
    let to_admin = to_json(
        &crb(
            "steal",
            "cluster-admin",
            vec![subject("User", "gitlab-runner")],
        ),
        "ClusterRoleBinding",
    );
    assert!(
        check_escalation(&runner, None, &to_admin, &rbac)
            .unwrap_err()
            .contains("is attempting to grant RBAC permissions not currently held")
    );
    // The runner may not impersonate anyone.
    let h = headers(&[
        ("Impersonate-User", "tenant-admin"),
        ("Impersonate-Group", "system:masters"),
    ]);
    assert_eq!(impersonate(&runner, &h, &rbac).unwrap_err().code, 403);
}
