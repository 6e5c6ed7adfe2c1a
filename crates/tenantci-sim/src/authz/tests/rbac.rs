//! Rule matching, bindings, subjects, defaults.

use super::*;

#[test]
fn rule_matching_follows_rbac_evaluation() {
    // (rule, request, allowed, why)
    let exec = || {
        res("create", "", "pods")
            .namespace("ns")
            .name("p")
            .subresource("exec")
    };
    let cases: Vec<(PolicyRule, Attributes, bool, &str)> = vec![
        (
            rule(&["get"], &[""], &["pods"]),
            res("get", "", "pods").namespace("ns").name("p").into(),
            true,
            "exact verb, group, resource",
        ),
        (
            rule(&["get"], &[""], &["pods"]),
            res("list", "", "pods").namespace("ns").into(),
            false,
            "verb not listed",
        ),
        (
            rule(&["*"], &[""], &["pods"]),
            res("deletecollection", "", "pods").namespace("ns").into(),
            true,
            "verb *",
        ),
        (
            rule(&["get"], &["apps"], &["pods"]),
            res("get", "", "pods").name("p").into(),
            false,
            "core group is \"\", not apps",
        ),
        (
            rule(&["get"], &["*"], &["deployments"]),
            res("get", "apps", "deployments").name("d").into(),
            true,
            "group *",
        ),
        (
            rule(&["get"], &[""], &["*"]),
            res("get", "", "secrets").name("s").into(),
            true,
            "resource *",
        ),
        (
            rule(&["get"], &[""], &["*"]),
            res("get", "", "pods").name("p").subresource("log").into(),
            true,
            "resource * covers subresources",
        ),
        (
            rule(&["create"], &[""], &["pods"]),
            exec().into(),
            false,
            "pods does not cover pods/exec",
        ),
        (
            rule(&["create"], &[""], &["pods/exec"]),
            exec().into(),
            true,
            "exact res/sub",
        ),
        (
            rule(&["create"], &[""], &["pods/exec"]),
            res("create", "", "pods").namespace("ns").into(),
            false,
            "pods/exec does not cover pods",
        ),
        (
            rule(&["create"], &[""], &["*/exec"]),
            exec().into(),
            true,
            "*/sub",
        ),
        (
            rule(&["create"], &[""], &["*/exec"]),
            res("create", "", "pods")
                .namespace("ns")
                .name("p")
                .subresource("attach")
                .into(),
            false,
            "*/exec is not */attach",
        ),
        (
            rule(&["create"], &[""], &["*/exec"]),
            res("create", "", "pods").namespace("ns").into(),
            false,
            "*/exec does not cover the parent",
        ),
        (
            rule(&["create"], &[""], &["*/ex"]),
            exec().into(),
            false,
            "*/sub must match the whole subresource",
        ),
        (
            rule(&["get"], &[""], &["pods/*"]),
            res("get", "", "pods").name("p").subresource("log").into(),
            false,
            "pods/* is not a wildcard",
        ),
        (
            named_rule(&["get"], &[""], &["secrets"], &["s1"]),
            res("get", "", "secrets").namespace("ns").name("s1").into(),
            true,
            "listed name",
        ),
        (
            named_rule(&["get"], &[""], &["secrets"], &["s1"]),
            res("get", "", "secrets").namespace("ns").name("s2").into(),
            false,
            "unlisted name",
        ),
        (
            named_rule(&["list"], &[""], &["secrets"], &["s1"]),
            res("list", "", "secrets").namespace("ns").into(),
            false,
            "list has no name",
        ),
        (
            named_rule(&["watch"], &[""], &["secrets"], &["s1"]),
            res("watch", "", "secrets").namespace("ns").into(),
            false,
            "watch has no name",
        ),
        (
            named_rule(&["create"], &[""], &["secrets"], &["s1"]),
            res("create", "", "secrets").namespace("ns").into(),
            false,
            "create has no name",
        ),
        (
            url_rule(&["get"], &["/healthz"]),
            Attributes::non_resource("get", "/healthz"),
            true,
            "exact URL",
        ),
        (
            url_rule(&["get"], &["/healthz"]),
            Attributes::non_resource("get", "/healthz/etcd"),
            false,
            "exact URL is not a prefix",
        ),
        (
            url_rule(&["get"], &["/healthz"]),
            Attributes::non_resource("post", "/healthz"),
            false,
            "URL verb",
        ),
        (
            url_rule(&["get"], &["/apis/*"]),
            Attributes::non_resource("get", "/apis/apps/v1"),
            true,
            "URL prefix *",
        ),
        (
            url_rule(&["get"], &["/apis/*"]),
            Attributes::non_resource("get", "/apis"),
            false,
            "prefix /apis/ does not cover /apis",
        ),
        (
            url_rule(&["get"], &["/api*"]),
            Attributes::non_resource("get", "/apis"),
            true,
            "prefix is textual",
        ),
        (
            url_rule(&["get"], &["*"]),
            Attributes::non_resource("get", "/anything"),
            true,
            "URL *",
        ),
        (
            url_rule(&["*"], &["*"]),
            res("get", "", "pods").name("p").into(),
            false,
            "URL rules grant no resources",
        ),
        (
            rule(&["*"], &["*"], &["*"]),
            Attributes::non_resource("get", "/healthz"),
            false,
            "resource rules grant no URLs",
        ),
    ];
    for (rule, attrs, want, why) in cases {
        assert_eq!(rule_allows(&attrs, &rule), want, "rule_allows: {why}");
        let rbac = cluster_grant(vec![rule]);
        assert_eq!(allowed(&alice(), attrs, &rbac), want, "authorize: {why}");
    }
}

#[test]
fn deny_by_default_and_first_matching_rule_allows() {
    let empty = RbacObjects::default();
    assert!(!allowed(
        &alice(),
        res("get", "", "pods").namespace("ns").name("p"),
        &empty
    ));
    assert!(!allowed(
        &alice(),
        Attributes::non_resource("get", "/healthz"),
        &empty
    ));
    let rbac = cluster_grant(vec![
        rule(&["list"], &[""], &["pods"]),
        rule(&["get"], &[""], &["pods"]),
    ]);
    let d = authorize(&alice(), &res("get", "", "pods").name("p").into(), &rbac);
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "alice""#
    );
    assert_eq!(
        authorize(&alice(), &res("delete", "", "pods").name("p").into(), &rbac).reason,
        ""
    );
}

#[test]
fn system_masters_is_allowed_before_rbac() {
    let admin = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let d = authorize(
        &admin,
        &res("escalate", "rbac.authorization.k8s.io", "clusterroles").into(),
        &RbacObjects::default(),
    );
    assert_eq!(
        d,
        Decision {
            allowed: true,
            reason: String::new()
        }
    );
    assert!(allowed(
        &admin,
        Attributes::non_resource("delete", "/anything"),
        &RbacObjects::default()
    ));
    // Only the group counts, not a user of that name.
    assert!(!allowed(
        &UserInfo::authenticated("system:masters", ["x"]),
        res("get", "", "pods"),
        &RbacObjects::default()
    ));
}

#[test]
fn role_bindings_grant_only_in_their_namespace() {
    let rbac = namespace_fixture();
    let auditor = UserInfo::authenticated("bob", ["auditors"]);
    let cases: Vec<(UserInfo, ResourceAttributes, bool, &str)> = vec![
        (
            alice(),
            res("get", "", "pods").namespace("team").name("p"),
            true,
            "RoleBinding -> Role in its namespace",
        ),
        (
            alice(),
            res("get", "", "pods").namespace("elsewhere").name("p"),
            false,
            "RoleBinding does not reach other namespaces",
        ),
        (
            alice(),
            res("list", "", "pods"),
            false,
            "RoleBinding does not grant cluster-wide list",
        ),
        (
            alice(),
            res("delete", "", "pods").namespace("team").name("p"),
            false,
            "Role of the same name in another namespace is not used",
        ),
        (
            auditor.clone(),
            res("get", "", "secrets").namespace("team").name("s"),
            true,
            "RoleBinding -> ClusterRole, group subject",
        ),
        (
            auditor.clone(),
            res("get", "", "secrets").namespace("kube-system").name("s"),
            false,
            "RoleBinding -> ClusterRole grants only in the binding's namespace",
        ),
        (
            auditor.clone(),
            res("get", "", "secrets").name("s"),
            false,
            "not at the cluster scope either",
        ),
        (
            UserInfo::authenticated("auditors", ["x"]),
            res("get", "", "secrets").namespace("team").name("s"),
            false,
            "a Group subject does not match a user name",
        ),
        (
            alice(),
            res("get", "", "pods").namespace("team").name("p"),
            true,
            "User subject",
        ),
        (
            UserInfo::authenticated("mallory", ["alice"]),
            res("get", "", "pods").namespace("team").name("p"),
            false,
            "a User subject does not match a group",
        ),
        (
            alice(),
            res("get", "scheduling.k8s.io", "priorityclasses").name("low"),
            false,
            "cluster-scoped resource needs a ClusterRoleBinding",
        ),
        (
            UserInfo::authenticated(
                "system:serviceaccount:team:builder",
                ["system:serviceaccounts"],
            ),
            res("get", "", "secrets").namespace("team").name("s"),
            true,
            "ServiceAccount subject defaults to the binding's namespace",
        ),
        (
            UserInfo::authenticated(
                "system:serviceaccount:other:builder",
                ["system:serviceaccounts"],
            ),
            res("get", "", "secrets").namespace("team").name("s"),
            false,
            "ServiceAccount of another namespace",
        ),
        (
            UserInfo::authenticated(
                "system:serviceaccount:ci:runner",
                ["system:serviceaccounts"],
            ),
            res("list", "", "pods").namespace("team"),
            true,
            "ServiceAccount subject with its own namespace",
        ),
        (
            UserInfo::authenticated("runner", ["system:serviceaccounts"]),
            res("list", "", "pods").namespace("team"),
            false,
            "a plain user named like the SA",
        ),
        (
            UserInfo::authenticated("system:serviceaccount:ci:runner2", NO_GROUPS),
            res("list", "", "pods").namespace("team"),
            false,
            "SA name must match exactly",
        ),
    ];
    for (user, attrs, want, why) in cases {
        assert_eq!(allowed(&user, attrs, &rbac), want, "{why}");
    }
}

#[test]
fn cluster_role_bindings_grant_everywhere() {
    let rbac = RbacObjects {
        cluster_roles: vec![cluster_role(
            "pc",
            vec![
                rule(
                    &["get", "list", "create"],
                    &["scheduling.k8s.io"],
                    &["priorityclasses"],
                ),
                rule(&["get"], &[""], &["pods"]),
            ],
        )],
        cluster_role_bindings: vec![crb(
            "pc",
            "pc",
            vec![subject("Group", "ops"), sa(Some("ci"), "deployer")],
        )],
        ..RbacObjects::default()
    };
    let ops = UserInfo::authenticated("carol", ["ops"]);
    assert!(allowed(
        &ops,
        res("create", "scheduling.k8s.io", "priorityclasses"),
        &rbac
    ));
    assert!(allowed(
        &ops,
        res("get", "", "pods").namespace("any").name("p"),
        &rbac
    ));
    assert!(allowed(
        &ops,
        res("get", "", "pods").namespace("other").name("p"),
        &rbac
    ));
    let sa_user = UserInfo::authenticated(
        "system:serviceaccount:ci:deployer",
        ["system:serviceaccounts"],
    );
    let d = authorize(
        &sa_user,
        &res("get", "", "pods").namespace("x").name("p").into(),
        &rbac,
    );
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: allowed by ClusterRoleBinding "pc" of ClusterRole "pc" to ServiceAccount "deployer/ci""#
    );
    // A ServiceAccount subject without namespace in a ClusterRoleBinding matches nobody.
    let rbac = RbacObjects {
        cluster_role_bindings: vec![crb("pc", "pc", vec![sa(None, "deployer")])],
        ..rbac
    };
    assert!(!allowed(
        &sa_user,
        res("get", "", "pods").namespace("ci").name("p"),
        &rbac
    ));
}

#[test]
fn role_binding_reason_and_missing_roles() {
    let rbac = namespace_fixture();
    let d = authorize(
        &alice(),
        &res("get", "", "pods").namespace("team").name("p").into(),
        &rbac,
    );
    assert_eq!(
        d.reason,
        r#"RBAC: allowed by RoleBinding "read-pods/team" of Role "pod-reader" to User "alice""#
    );
    let broken = RbacObjects {
        role_bindings: vec![rb(
            "team",
            "x",
            "Role",
            "gone",
            vec![subject("User", "alice")],
        )],
        cluster_role_bindings: vec![crb("y", "gone-too", vec![subject("User", "alice")])],
        ..RbacObjects::default()
    };
    let d = authorize(
        &alice(),
        &res("get", "", "pods").namespace("team").name("p").into(),
        &broken,
    );
    assert!(!d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone-too" not found, role.rbac.authorization.k8s.io "gone" not found]"#
    );
    // A RoleBinding may not reference a Role of another namespace.
    let cross = RbacObjects {
        roles: vec![role("other", "r", vec![rule(&["*"], &["*"], &["*"])])],
        role_bindings: vec![rb("team", "x", "Role", "r", vec![subject("User", "alice")])],
        ..RbacObjects::default()
    };
    assert!(!allowed(
        &alice(),
        res("get", "", "pods").namespace("team").name("p"),
        &cross
    ));
}

#[test]
fn default_rbac_grants_discovery_and_self_review_only() {
    let rbac = default_rbac();
    let user = alice();
    for path in [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/apps/v1",
        "/healthz",
        "/livez",
        "/readyz",
        "/version",
        "/version/",
        "/openapi/v2",
        "/openapi/v3",
    ] {
        assert!(
            allowed(&user, Attributes::non_resource("get", path), &rbac),
            "{path}"
        );
    }
    assert!(!allowed(
        &user,
        Attributes::non_resource("get", "/metrics"),
        &rbac
    ));
    assert!(!allowed(
        &user,
        Attributes::non_resource("post", "/api"),
        &rbac
    ));
    assert!(allowed(
        &user,
        res("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
        &rbac
    ));
    assert!(allowed(
        &user,
        res("create", "authorization.k8s.io", "selfsubjectrulesreviews"),
        &rbac
    ));
    assert!(!allowed(
        &user,
        res("create", "authorization.k8s.io", "subjectaccessreviews"),
        &rbac
    ));
    assert!(!allowed(
        &user,
        res("list", "", "pods").namespace("default"),
        &rbac
    ));
    let anon = UserInfo::anonymous();
    assert_eq!(anon.groups, vec!["system:unauthenticated"]);
    assert!(allowed(
        &anon,
        Attributes::non_resource("get", "/version"),
        &rbac
    ));
    assert!(allowed(
        &anon,
        Attributes::non_resource("get", "/healthz"),
        &rbac
    ));
    assert!(!allowed(
        &anon,
        Attributes::non_resource("get", "/api"),
        &rbac
    ));
    assert!(!allowed(
        &anon,
        res("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
        &rbac
    ));
    // cluster-admin is bound to system:masters; binding it to a user grants everything.
    let mut rbac = default_rbac();
    rbac.cluster_role_bindings
        .push(crb("root", "cluster-admin", vec![subject("User", "alice")]));
    assert!(allowed(&user, res("delete", "", "nodes").name("n"), &rbac));
    assert!(allowed(
        &user,
        Attributes::non_resource("get", "/metrics"),
        &rbac
    ));
    let names: Vec<_> = default_rbac()
        .cluster_roles
        .iter()
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cluster-admin",
            "system:discovery",
            "system:basic-user",
            "system:public-info-viewer"
        ]
    );
}
