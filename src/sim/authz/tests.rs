//! Table-driven tests of the authorization layer against kube-apiserver's documented behaviour
//! (facts/kubernetes-api.md §1-3).

use http::{HeaderMap, HeaderValue, Method};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::*;

const NO_GROUPS: [&str; 0] = [];

fn v(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| s.to_string()).collect())
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: v(verbs).unwrap(),
        api_groups: v(groups),
        resources: v(resources),
        ..PolicyRule::default()
    }
}

fn named_rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: v(names),
        ..rule(verbs, groups, resources)
    }
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: v(verbs).unwrap(),
        non_resource_urls: v(urls),
        ..PolicyRule::default()
    }
}

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject {
        api_group: (kind != "ServiceAccount").then(|| RBAC_GROUP.to_string()),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: None,
    }
}

fn sa(namespace: Option<&str>, name: &str) -> Subject {
    Subject {
        namespace: namespace.map(str::to_string),
        ..subject("ServiceAccount", name)
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some(RBAC_GROUP.to_string()),
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(None, name),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

fn role(ns: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: meta(Some(ns), name),
        rules: Some(rules),
    }
}

fn crb(name: &str, role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(None, name),
        role_ref: role_ref("ClusterRole", role),
        subjects: Some(subjects),
    }
}

fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(Some(ns), name),
        role_ref: role_ref(kind, role),
        subjects: Some(subjects),
    }
}

/// A user `alice` granted `rules` cluster-wide through a ClusterRoleBinding.
fn cluster_grant(rules: Vec<PolicyRule>) -> RbacObjects {
    RbacObjects {
        cluster_roles: vec![cluster_role("r", rules)],
        cluster_role_bindings: vec![crb("b", "r", vec![subject("User", "alice")])],
        ..RbacObjects::default()
    }
}

fn alice() -> UserInfo {
    UserInfo::authenticated("alice", ["dev"])
}

fn res(verb: &str, group: &str, resource: &str) -> ResourceAttributes {
    ResourceAttributes::new(verb, group, resource)
}

fn allowed(user: &UserInfo, attrs: impl Into<Attributes>, rbac: &RbacObjects) -> bool {
    authorize(user, &attrs.into(), rbac).allowed
}

// ---------------------------------------------------------------- request info

#[test]
fn request_info_parses_like_kube_apiserver() {
    struct Case {
        method: Method,
        path: &'static str,
        query: Option<&'static str>,
        resource_request: bool,
        verb: &'static str,
        group: &'static str,
        version: &'static str,
        namespace: &'static str,
        resource: &'static str,
        sub: &'static str,
        name: &'static str,
    }
    let case = |method: Method, path, query, verb, ns, resource, sub, name| Case {
        method,
        path,
        query,
        resource_request: true,
        verb,
        group: "",
        version: "v1",
        namespace: ns,
        resource,
        sub,
        name,
    };
    let non = |method: Method, path, verb| Case {
        method,
        path,
        query: None,
        resource_request: false,
        verb,
        group: "",
        version: "",
        namespace: "",
        resource: "",
        sub: "",
        name: "",
    };
    let cases = vec![
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "get",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            None,
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=true&resourceVersion=5"),
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=1"),
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=false"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("watch=0"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/pods",
            None,
            "list",
            "",
            "pods",
            "",
            "",
        ),
        case(
            Method::HEAD,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "get",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces/ns/pods",
            None,
            "create",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "update",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::PATCH,
            "/api/v1/namespaces/ns/pods/p",
            Some("fieldManager=m"),
            "patch",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/p",
            None,
            "delete",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods",
            None,
            "deletecollection",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces/ns/pods/p/exec",
            Some("command=sh"),
            "create",
            "ns",
            "pods",
            "exec",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods/p/log",
            None,
            "get",
            "ns",
            "pods",
            "log",
            "p",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/ns/pods/p/status",
            None,
            "update",
            "ns",
            "pods",
            "status",
            "p",
        ),
        // The namespace object itself: the request namespace is the namespace's name.
        case(
            Method::GET,
            "/api/v1/namespaces/x",
            None,
            "get",
            "x",
            "namespaces",
            "",
            "x",
        ),
        case(
            Method::DELETE,
            "/api/v1/namespaces/x",
            None,
            "delete",
            "x",
            "namespaces",
            "",
            "x",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/x/status",
            None,
            "update",
            "x",
            "namespaces",
            "status",
            "x",
        ),
        case(
            Method::PUT,
            "/api/v1/namespaces/x/finalize",
            None,
            "update",
            "x",
            "namespaces",
            "finalize",
            "x",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces",
            None,
            "list",
            "",
            "namespaces",
            "",
            "",
        ),
        case(
            Method::POST,
            "/api/v1/namespaces",
            None,
            "create",
            "",
            "namespaces",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/nodes/n1",
            None,
            "get",
            "",
            "nodes",
            "",
            "n1",
        ),
        // Deprecated watch prefix.
        case(
            Method::GET,
            "/api/v1/watch/namespaces/ns/pods",
            None,
            "watch",
            "ns",
            "pods",
            "",
            "",
        ),
        // A list narrowed to one name by field selector names the object.
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name%3Dp&watch=true"),
            "watch",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name==p"),
            "list",
            "ns",
            "pods",
            "",
            "p",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=metadata.name!=p"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        case(
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            Some("fieldSelector=spec.nodeName=n"),
            "list",
            "ns",
            "pods",
            "",
            "",
        ),
        // Path escapes are decoded before splitting, as Go's URL.Path.
        case(
            Method::GET,
            "/api/v1/namespaces/ns/configmaps/a%2Eb",
            None,
            "get",
            "ns",
            "configmaps",
            "",
            "a.b",
        ),
        non(Method::GET, "/api", "get"),
        non(Method::GET, "/api/v1", "get"),
        non(Method::GET, "/apis", "get"),
        non(Method::GET, "/apis/apps", "get"),
        non(Method::GET, "/apis/apps/v1", "get"),
        non(Method::GET, "/healthz", "get"),
        non(Method::GET, "/version", "get"),
        non(Method::POST, "/foo/bar/baz", "post"),
        non(Method::HEAD, "/", "head"),
        non(Method::OPTIONS, "/openapi/v2", "options"),
    ];
    let mut grouped = vec![
        (
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            Method::PATCH,
            "patch",
            "apps",
            "ns",
            "deployments",
            "scale",
            "d",
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Method::POST,
            "create",
            "rbac.authorization.k8s.io",
            "",
            "clusterrolebindings",
            "",
            "",
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            Method::PUT,
            "update",
            "coordination.k8s.io",
            "ns",
            "leases",
            "",
            "l",
        ),
        (
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            Method::POST,
            "create",
            "authorization.k8s.io",
            "",
            "selfsubjectaccessreviews",
            "",
            "",
        ),
    ];
    for (path, method, verb, group, ns, resource, sub, name) in grouped.drain(..) {
        let info = request_info(&method, path, None);
        assert!(info.is_resource_request, "{path}");
        assert_eq!(
            (
                info.verb.as_str(),
                info.api_group.as_str(),
                info.api_version.as_str()
            ),
            (verb, group, "v1"),
            "{path}"
        );
        assert_eq!(
            (
                info.namespace.as_str(),
                info.resource.as_str(),
                info.subresource.as_str(),
                info.name.as_str()
            ),
            (ns, resource, sub, name),
            "{path}"
        );
    }
    for c in cases {
        let info = request_info(&c.method, c.path, c.query);
        let what = format!("{} {}?{}", c.method, c.path, c.query.unwrap_or(""));
        assert_eq!(info.is_resource_request, c.resource_request, "{what}");
        assert_eq!(info.verb, c.verb, "{what}");
        assert_eq!(info.api_group, c.group, "{what}");
        assert_eq!(info.api_version, c.version, "{what}");
        assert_eq!(info.namespace, c.namespace, "{what}");
        assert_eq!(info.resource, c.resource, "{what}");
        assert_eq!(info.subresource, c.sub, "{what}");
        assert_eq!(info.name, c.name, "{what}");
        if !c.resource_request {
            assert_eq!(info.path, c.path, "{what}");
        }
    }
}

#[test]
fn request_info_converts_to_attributes() {
    let info = request_info(&Method::POST, "/api/v1/namespaces/ns/pods/p/exec", None);
    assert_eq!(
        Attributes::from(&info),
        Attributes::Resource(ResourceAttributes {
            verb: "create".into(),
            api_group: "".into(),
            api_version: "v1".into(),
            resource: "pods".into(),
            subresource: "exec".into(),
            namespace: "ns".into(),
            name: "p".into(),
        })
    );
    let info = request_info(&Method::GET, "/apis/apps/v1", None);
    assert_eq!(
        Attributes::from(info),
        Attributes::non_resource("get", "/apis/apps/v1")
    );
}

// ---------------------------------------------------------------- rule matching

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

// ---------------------------------------------------------------- bindings and subjects

fn namespace_fixture() -> RbacObjects {
    RbacObjects {
        roles: vec![
            role(
                "team",
                "pod-reader",
                vec![rule(&["get", "list"], &[""], &["pods"])],
            ),
            // Same name in another namespace grants more; must never leak into "team".
            role("other", "pod-reader", vec![rule(&["*"], &["*"], &["*"])]),
        ],
        cluster_roles: vec![
            cluster_role("secret-reader", vec![rule(&["get"], &[""], &["secrets"])]),
            cluster_role(
                "pc-reader",
                vec![rule(
                    &["get", "list"],
                    &["scheduling.k8s.io"],
                    &["priorityclasses"],
                )],
            ),
        ],
        role_bindings: vec![
            rb(
                "team",
                "read-pods",
                "Role",
                "pod-reader",
                vec![subject("User", "alice")],
            ),
            rb(
                "team",
                "read-secrets",
                "ClusterRole",
                "secret-reader",
                vec![subject("Group", "auditors")],
            ),
            rb(
                "team",
                "pc",
                "ClusterRole",
                "pc-reader",
                vec![subject("User", "alice")],
            ),
            rb(
                "team",
                "sa-local",
                "ClusterRole",
                "secret-reader",
                vec![sa(None, "builder")],
            ),
            rb(
                "team",
                "sa-remote",
                "Role",
                "pod-reader",
                vec![sa(Some("ci"), "runner")],
            ),
        ],
        cluster_role_bindings: Vec::new(),
    }
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

// ---------------------------------------------------------------- status bodies

#[test]
fn forbidden_and_unauthorized_bodies_match_kube_apiserver() {
    let u = UserInfo::authenticated("u", ["g"]);
    let cases: Vec<(Attributes, Value)> = vec![
        (
            res("create", "", "pods").namespace("ns").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"u\" cannot create resource \"pods\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}),
        ),
        (
            res("get", "", "pods").namespace("ns").name("p").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" is forbidden: User \"u\" cannot get resource \"pods\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403}),
        ),
        (
            res("create", "", "pods")
                .namespace("ns")
                .name("p")
                .subresource("exec")
                .into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" is forbidden: User \"u\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","details":{"name":"p","kind":"pods"},"code":403}),
        ),
        (
            res("create", "rbac.authorization.k8s.io", "clusterrolebindings").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"u\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope","reason":"Forbidden","details":{"group":"rbac.authorization.k8s.io","kind":"clusterrolebindings"},"code":403}),
        ),
        (
            res("get", "", "namespaces").namespace("x").name("x").into(),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \"x\" is forbidden: User \"u\" cannot get resource \"namespaces\" in API group \"\" in the namespace \"x\"","reason":"Forbidden","details":{"name":"x","kind":"namespaces"},"code":403}),
        ),
        (
            Attributes::non_resource("get", "/foo"),
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"u\" cannot get path \"/foo\"","reason":"Forbidden","details":{},"code":403}),
        ),
    ];
    for (attrs, want) in cases {
        assert_eq!(forbidden_status(&u, &attrs), want);
    }
    assert_eq!(
        forbidden_status_with_reason(&u, &Attributes::non_resource("get", "/<x>"), "RBAC: oops")["message"],
        "forbidden: User \"u\" cannot get path \"/&lt;x&gt;\": RBAC: oops"
    );
    assert_eq!(
        unauthorized_status(),
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})
    );
}

#[test]
fn go_quoting_matches_percent_q() {
    assert_eq!(go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    assert_eq!(go_quote("é"), "\"é\"");
    assert_eq!(go_quote_list(&["a".into(), "b c".into()]), r#"["a" "b c"]"#);
    assert_eq!(go_quote_list(&[]), "[]");
}

// ---------------------------------------------------------------- escalation

fn to_json<T: serde::Serialize>(t: &T, kind: &str) -> Value {
    let mut v = serde_json::to_value(t).unwrap();
    v["kind"] = json!(kind);
    v["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
    v
}

/// alice holds get/list pods and get secrets in "team", and `extra` cluster-wide.
fn escalation_fixture(extra: Vec<PolicyRule>) -> RbacObjects {
    let mut rbac = RbacObjects {
        roles: vec![role(
            "team",
            "base",
            vec![
                rule(&["get", "list"], &[""], &["pods"]),
                rule(&["get"], &[""], &["secrets"]),
            ],
        )],
        role_bindings: vec![rb(
            "team",
            "base",
            "Role",
            "base",
            vec![subject("User", "alice")],
        )],
        cluster_roles: vec![
            cluster_role("extra", extra),
            cluster_role(
                "cluster-admin",
                vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
            ),
            cluster_role("pod-reader", vec![rule(&["get"], &[""], &["pods"])]),
        ],
        cluster_role_bindings: vec![crb("extra", "extra", vec![subject("User", "alice")])],
    };
    rbac.roles.push(role(
        "team",
        "exec",
        vec![rule(&["create"], &[""], &["pods/exec"])],
    ));
    rbac
}

#[test]
fn role_writes_need_held_rules_or_escalate() {
    let user = alice();
    let none = escalation_fixture(vec![]);
    let covered = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["get"], &[""], &["pods", "secrets"])],
        ),
        "Role",
    );
    let wider = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["get", "delete"], &[""], &["pods"])],
        ),
        "Role",
    );
    let exec = to_json(
        &role(
            "team",
            "new",
            vec![rule(&["create"], &[""], &["pods/exec"])],
        ),
        "Role",
    );
    let named = to_json(
        &role(
            "team",
            "new",
            vec![named_rule(&["get"], &[""], &["secrets"], &["s1"])],
        ),
        "Role",
    );
    let urls = to_json(
        &cluster_role("new", vec![url_rule(&["get"], &["/healthz"])]),
        "ClusterRole",
    );

    assert_eq!(
        check_escalation(&user, Some("team"), &covered, &none),
        Ok(()),
        "rules already held"
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &named, &none),
        Ok(()),
        "a named rule is covered by the unnamed one"
    );
    let err = check_escalation(&user, Some("team"), &wider, &none).unwrap_err();
    assert_eq!(
        err,
        "user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"
    );
    // Held in "team" is not held in "prod".
    let in_prod = to_json(
        &role("prod", "new", vec![rule(&["get"], &[""], &["pods"])]),
        "Role",
    );
    assert!(
        check_escalation(&user, Some("prod"), &in_prod, &none)
            .unwrap_err()
            .contains("is attempting to grant RBAC permissions not currently held")
    );
    // pods does not cover pods/exec for escalation either.
    assert!(check_escalation(&user, Some("team"), &exec, &none).is_err());
    assert!(
        check_escalation(&user, None, &urls, &none)
            .unwrap_err()
            .contains("NonResourceURLs:[\"/healthz\"]")
    );

    // `*/exec` and URL prefixes held cover the servant rules.
    let held = escalation_fixture(vec![
        rule(&["create"], &[""], &["*/exec"]),
        url_rule(&["get"], &["/heal*"]),
    ]);
    assert_eq!(check_escalation(&user, Some("team"), &exec, &held), Ok(()));
    assert_eq!(check_escalation(&user, None, &urls, &held), Ok(()));

    // `escalate` on roles lets anything through, in that namespace only.
    let mut esc = escalation_fixture(vec![]);
    esc.roles.push(role(
        "team",
        "esc",
        vec![rule(
            &["escalate"],
            &["rbac.authorization.k8s.io"],
            &["roles"],
        )],
    ));
    esc.role_bindings.push(rb(
        "team",
        "esc",
        "Role",
        "esc",
        vec![subject("User", "alice")],
    ));
    assert_eq!(check_escalation(&user, Some("team"), &wider, &esc), Ok(()));
    let wider_prod = to_json(
        &role("prod", "new", vec![rule(&["delete"], &[""], &["pods"])]),
        "Role",
    );
    assert!(check_escalation(&user, Some("prod"), &wider_prod, &esc).is_err());
    // escalate on roles is not escalate on clusterroles.
    assert!(check_escalation(&user, None, &urls, &esc).is_err());
    // escalate restricted by name follows the request name.
    let named_esc = escalation_fixture(vec![named_rule(
        &["escalate"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["new"],
    )]);
    assert_eq!(check_escalation(&user, None, &urls, &named_esc), Ok(()));
    let create = res("create", "rbac.authorization.k8s.io", "clusterroles");
    assert!(
        check_escalation_for(&user, &create, &urls, &named_esc).is_err(),
        "a create has no request name"
    );

    // system:masters may write anything; other kinds are not checked.
    let admin = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    assert_eq!(
        check_escalation(&admin, Some("team"), &wider, &RbacObjects::default()),
        Ok(())
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &json!({"kind": "Pod"}), &none),
        Ok(())
    );
    // A body without kind is recognised by its shape.
    let mut kindless = wider.clone();
    kindless.as_object_mut().unwrap().remove("kind");
    kindless.as_object_mut().unwrap().remove("apiVersion");
    assert!(check_escalation(&user, Some("team"), &kindless, &none).is_err());
    let mut kindless_crb = to_json(
        &crb("x", "cluster-admin", vec![subject("User", "alice")]),
        "ClusterRoleBinding",
    );
    kindless_crb.as_object_mut().unwrap().remove("kind");
    assert!(check_escalation(&user, None, &kindless_crb, &escalation_fixture(vec![])).is_err());
}

#[test]
fn aggregated_cluster_roles_need_full_authority() {
    let mut agg = to_json(&cluster_role("agg", vec![]), "ClusterRole");
    agg["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]});
    let user = alice();
    assert_eq!(
        check_escalation(&user, None, &agg, &escalation_fixture(vec![])),
        Err("must have cluster-admin privileges to use the aggregationRule".to_string())
    );
    let mut admin = escalation_fixture(vec![]);
    admin
        .cluster_role_bindings
        .push(crb("root", "cluster-admin", vec![subject("User", "alice")]));
    assert_eq!(check_escalation(&user, None, &agg, &admin), Ok(()));
}

#[test]
fn binding_writes_need_the_roles_rules_or_bind() {
    let user = alice();
    let none = escalation_fixture(vec![]);
    let bind_admin = to_json(
        &crb("mine", "cluster-admin", vec![subject("User", "alice")]),
        "ClusterRoleBinding",
    );
    let bind_reader_ns = to_json(
        &rb(
            "team",
            "mine",
            "ClusterRole",
            "pod-reader",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    let bind_reader_cluster = to_json(
        &crb("mine", "pod-reader", vec![subject("User", "bob")]),
        "ClusterRoleBinding",
    );
    let bind_exec = to_json(
        &rb("team", "mine", "Role", "exec", vec![subject("User", "bob")]),
        "RoleBinding",
    );
    let bind_missing = to_json(
        &rb("team", "mine", "Role", "gone", vec![subject("User", "bob")]),
        "RoleBinding",
    );

    let err = check_escalation(&user, None, &bind_admin, &none).unwrap_err();
    assert!(err.starts_with("user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"), "{err}");
    assert!(
        err.contains("{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    assert!(
        err.contains("{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    // alice holds get pods in team: she may bind pod-reader there, not cluster-wide.
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_reader_ns, &none),
        Ok(())
    );
    assert!(check_escalation(&user, None, &bind_reader_cluster, &none).is_err());
    assert!(check_escalation(&user, Some("team"), &bind_exec, &none).is_err());
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_missing, &none),
        Err("role.rbac.authorization.k8s.io \"gone\" not found".to_string())
    );

    // `bind` on the referenced role (by name) allows it without holding its rules.
    let bind = escalation_fixture(vec![named_rule(
        &["bind"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["cluster-admin"],
    )]);
    assert_eq!(check_escalation(&user, None, &bind_admin, &bind), Ok(()));
    let bind_other = escalation_fixture(vec![named_rule(
        &["bind"],
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["view"],
    )]);
    assert!(check_escalation(&user, None, &bind_admin, &bind_other).is_err());
    // bind on clusterroles granted in a namespace allows RoleBindings there only.
    let mut ns_bind = escalation_fixture(vec![]);
    ns_bind.cluster_roles.push(cluster_role(
        "binder",
        vec![rule(
            &["bind"],
            &["rbac.authorization.k8s.io"],
            &["clusterroles", "roles"],
        )],
    ));
    ns_bind.role_bindings.push(rb(
        "team",
        "binder",
        "ClusterRole",
        "binder",
        vec![subject("User", "alice")],
    ));
    let rb_admin = to_json(
        &rb(
            "team",
            "mine",
            "ClusterRole",
            "cluster-admin",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &rb_admin, &ns_bind),
        Ok(())
    );
    assert_eq!(
        check_escalation(&user, Some("team"), &bind_exec, &ns_bind),
        Ok(())
    );
    assert!(check_escalation(&user, None, &bind_admin, &ns_bind).is_err());
    let rb_admin_prod = to_json(
        &rb(
            "prod",
            "mine",
            "ClusterRole",
            "cluster-admin",
            vec![subject("User", "bob")],
        ),
        "RoleBinding",
    );
    assert!(check_escalation(&user, Some("prod"), &rb_admin_prod, &ns_bind).is_err());

    let status = escalation_forbidden_status("clusterrolebindings", "mine", &err);
    assert_eq!(status["code"], 403);
    assert_eq!(
        status["details"],
        json!({"group": "rbac.authorization.k8s.io", "kind": "clusterrolebindings", "name": "mine"})
    );
    assert!(status["message"].as_str().unwrap().starts_with(
        "clusterrolebindings.rbac.authorization.k8s.io \"mine\" is forbidden: user \"alice\""
    ));
}

#[test]
fn missing_rights_are_compacted_and_sorted() {
    let user = UserInfo::new("u", ["g"]);
    let wanted = to_json(
        &cluster_role(
            "new",
            vec![
                rule(&["get", "list"], &[""], &["pods", "secrets"]),
                named_rule(&["get"], &[""], &["configmaps"], &["a", "b"]),
            ],
        ),
        "ClusterRole",
    );
    let err = check_escalation(&user, None, &wanted, &RbacObjects::default()).unwrap_err();
    assert_eq!(
        err,
        "user \"u\" (groups=[\"g\"]) is attempting to grant RBAC permissions not currently held:\n\
{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"a\"], Verbs:[\"get\"]}\n\
{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"b\"], Verbs:[\"get\"]}\n\
{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\"]}\n\
{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
}

// ---------------------------------------------------------------- impersonation

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn impersonator(rules: Vec<PolicyRule>) -> RbacObjects {
    RbacObjects {
        cluster_roles: vec![cluster_role("imp", rules)],
        cluster_role_bindings: vec![crb("imp", "imp", vec![subject("User", "admin")])],
        ..RbacObjects::default()
    }
}

#[test]
fn impersonation_needs_impersonate_on_each_value() {
    let admin = UserInfo::authenticated("admin", ["ops"]);
    let users_and_groups = impersonator(vec![
        named_rule(&["impersonate"], &[""], &["users"], &["gitlab-runner"]),
        named_rule(&["impersonate"], &[""], &["groups"], &["gitlab-runner"]),
    ]);
    // kubectl --as=gitlab-runner --as-group=gitlab-runner
    let h = headers(&[
        ("Impersonate-User", "gitlab-runner"),
        ("Impersonate-Group", "gitlab-runner"),
    ]);
    assert_eq!(
        impersonate(&admin, &h, &users_and_groups),
        Ok(UserInfo::new(
            "gitlab-runner",
            ["gitlab-runner", "system:authenticated"]
        ))
    );
    // No headers: the caller unchanged.
    assert_eq!(
        impersonate(&admin, &HeaderMap::new(), &RbacObjects::default()),
        Ok(admin.clone())
    );
    // No group requested: only system:authenticated (the caller's groups are not kept).
    let h = headers(&[("Impersonate-User", "gitlab-runner")]);
    assert_eq!(
        impersonate(&admin, &h, &users_and_groups),
        Ok(UserInfo::new("gitlab-runner", ["system:authenticated"]))
    );
    // An unlisted group is refused, with the Forbidden body for groups.
    let h = headers(&[
        ("Impersonate-User", "gitlab-runner"),
        ("Impersonate-Group", "gitlab-runner"),
        ("Impersonate-Group", "system:masters"),
    ]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(
        err.status,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"groups \"system:masters\" is forbidden: User \"admin\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"name":"system:masters","kind":"groups"},"code":403})
    );
    // Without the right to impersonate users at all.
    let h = headers(&[("Impersonate-User", "root")]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(
        err.status["message"],
        "users \"root\" is forbidden: User \"admin\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // Groups without a user are an error.
    let h = headers(&[("Impersonate-Group", "gitlab-runner")]);
    let err = impersonate(&admin, &h, &users_and_groups).unwrap_err();
    assert_eq!(err.code, 500);
    assert!(
        err.status["message"]
            .as_str()
            .unwrap()
            .contains("without impersonating a user")
    );
    // system:masters may impersonate anyone, and the target's groups decide from then on.
    let root = UserInfo::authenticated("tenant-admin", ["system:masters"]);
    let h = headers(&[("Impersonate-User", "u"), ("Impersonate-Group", "g")]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default()),
        Ok(UserInfo::new("u", ["g", "system:authenticated"]))
    );
    // Requested system:authenticated is not doubled; system:unauthenticated suppresses it.
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Group", "system:authenticated"),
    ]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default())
            .unwrap()
            .groups,
        ["system:authenticated"]
    );
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Group", "system:unauthenticated"),
    ]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default())
            .unwrap()
            .groups,
        ["system:unauthenticated"]
    );
    let h = headers(&[("Impersonate-User", "system:anonymous")]);
    assert_eq!(
        impersonate(&root, &h, &RbacObjects::default()),
        Ok(UserInfo::anonymous())
    );
}

#[test]
fn impersonating_service_accounts_uids_and_extras() {
    let admin = UserInfo::authenticated("admin", NO_GROUPS);
    let rbac = RbacObjects {
        roles: vec![role(
            "ci",
            "imp-sa",
            vec![rule(&["impersonate"], &[""], &["serviceaccounts"])],
        )],
        role_bindings: vec![rb(
            "ci",
            "imp-sa",
            "Role",
            "imp-sa",
            vec![subject("User", "admin")],
        )],
        ..impersonator(vec![
            rule(&["impersonate"], &[""], &["users"]),
            rule(
                &["impersonate"],
                &["authentication.k8s.io"],
                &["uids", "userextras/scopes"],
            ),
        ])
    };
    // A service account user is authorized as serviceaccounts in its namespace and gets its groups.
    let h = headers(&[("Impersonate-User", "system:serviceaccount:ci:runner")]);
    assert_eq!(
        impersonate(&admin, &h, &rbac),
        Ok(UserInfo::new(
            "system:serviceaccount:ci:runner",
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                "system:authenticated"
            ]
        ))
    );
    let h = headers(&[("Impersonate-User", "system:serviceaccount:prod:runner")]);
    let err = impersonate(&admin, &h, &rbac).unwrap_err();
    assert_eq!(
        err.status["message"],
        "serviceaccounts \"runner\" is forbidden: User \"admin\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"prod\""
    );
    // Not a valid SA name: a plain user (allowed through `users`).
    let h = headers(&[("Impersonate-User", "system:serviceaccount:Bad:runner")]);
    assert_eq!(
        impersonate(&admin, &h, &rbac).unwrap().name,
        "system:serviceaccount:Bad:runner"
    );
    // uid and extras.
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Uid", "1234"),
        ("Impersonate-Extra-Scopes", "view"),
    ]);
    assert_eq!(
        impersonate(&admin, &h, &rbac),
        Ok(UserInfo::new("u", ["system:authenticated"]))
    );
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Extra-Reason", "because"),
    ]);
    let err = impersonate(&admin, &h, &rbac).unwrap_err();
    assert_eq!(
        err.status["message"],
        "userextras.authentication.k8s.io \"because\" is forbidden: User \"admin\" cannot impersonate resource \"userextras/reason\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
    // Escaped extra keys are unescaped before authorization.
    let rbac2 = impersonator(vec![
        rule(&["impersonate"], &[""], &["users"]),
        rule(
            &["impersonate"],
            &["authentication.k8s.io"],
            &["userextras/example.com/scope"],
        ),
    ]);
    let h = headers(&[
        ("Impersonate-User", "u"),
        ("Impersonate-Extra-Example.com%2fscope", "x"),
    ]);
    assert!(impersonate(&admin, &h, &rbac2).is_ok());
    let h = headers(&[("Impersonate-User", "u"), ("Impersonate-Uid", "9")]);
    assert!(
        impersonate(&admin, &h, &rbac2).unwrap_err().status["message"]
            .as_str()
            .unwrap()
            .starts_with("uids.authentication.k8s.io \"9\" is forbidden")
    );
}

// ---------------------------------------------------------------- access reviews

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

// ---------------------------------------------------------------- the runbook, end to end

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

// ---------------------------------------------------------------- properties

mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::sim::authz::escalation::uncovered;
    use crate::sim::authz::rbac::list;

    fn pick(options: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
        proptest::sample::subsequence(options, 1..=options.len().min(3))
            .prop_map(|v| v.into_iter().map(str::to_string).collect())
    }

    fn any_rule() -> impl Strategy<Value = PolicyRule> {
        let resource_rule = (
            pick(&["get", "list", "create", "*"]),
            pick(&["", "apps", "*"]),
            pick(&["pods", "pods/exec", "*/exec", "secrets", "*"]),
            proptest::option::of(pick(&["a", "b"])),
        )
            .prop_map(|(verbs, groups, resources, names)| PolicyRule {
                verbs,
                api_groups: Some(groups),
                resources: Some(resources),
                resource_names: names,
                ..PolicyRule::default()
            });
        let url_rule = (
            pick(&["get", "post", "*"]),
            pick(&["/a", "/a/*", "/a*", "/b", "*"]),
        )
            .prop_map(|(verbs, urls)| PolicyRule {
                verbs,
                non_resource_urls: Some(urls),
                ..PolicyRule::default()
            });
        prop_oneof![resource_rule, url_rule]
    }

    /// Picks one element of `v` or, when it holds `*`, any of `all`.
    fn one_of(v: &[String], all: &'static [&'static str]) -> BoxedStrategy<String> {
        if v.iter().any(|x| x == "*") {
            proptest::sample::select(all)
                .prop_map(str::to_string)
                .boxed()
        } else {
            proptest::sample::select(v.to_vec()).boxed()
        }
    }

    /// A rule the holder of `rule` may grant without escalating.
    fn narrow(rule: PolicyRule) -> BoxedStrategy<PolicyRule> {
        let verbs = one_of(&rule.verbs, &["get", "list", "create", "post", "*"]);
        if let Some(urls) = rule.non_resource_urls.clone() {
            let url = proptest::sample::select(urls).prop_flat_map(|u| match u.as_str() {
                "*" => proptest::sample::select(vec!["/a", "/a/*", "/a*", "/b", "*"])
                    .prop_map(str::to_string)
                    .boxed(),
                "/a*" => proptest::sample::select(vec!["/a", "/a/*", "/a*", "/ab"])
                    .prop_map(str::to_string)
                    .boxed(),
                "/a/*" => proptest::sample::select(vec!["/a/x", "/a/*", "/a/x*"])
                    .prop_map(str::to_string)
                    .boxed(),
                other => Just(other.to_string()).boxed(),
            });
            return (verbs, url)
                .prop_map(|(v, u)| PolicyRule {
                    verbs: vec![v],
                    non_resource_urls: Some(vec![u]),
                    ..PolicyRule::default()
                })
                .boxed();
        }
        let groups = one_of(list(&rule.api_groups), &["", "apps", "*"]);
        let resources =
            proptest::sample::select(list(&rule.resources).to_vec()).prop_flat_map(|r| {
                match r.as_str() {
                    "*" => proptest::sample::select(vec![
                        "pods",
                        "pods/exec",
                        "*/exec",
                        "secrets",
                        "*",
                    ])
                    .prop_map(str::to_string)
                    .boxed(),
                    "*/exec" => {
                        proptest::sample::select(vec!["pods/exec", "*/exec", "deployments/exec"])
                            .prop_map(str::to_string)
                            .boxed()
                    }
                    other => Just(other.to_string()).boxed(),
                }
            });
        let names: BoxedStrategy<Option<Vec<String>>> =
            match rule.resource_names.clone().filter(|n| !n.is_empty()) {
                None => proptest::option::of(pick(&["a", "b"])).boxed(),
                Some(n) => proptest::sample::subsequence(n.clone(), 1..=n.len())
                    .prop_map(Some)
                    .boxed(),
            };
        (verbs, groups, resources, names)
            .prop_map(|(v, g, r, n)| PolicyRule {
                verbs: vec![v],
                api_groups: Some(vec![g]),
                resources: Some(vec![r]),
                resource_names: n,
                ..PolicyRule::default()
            })
            .boxed()
    }

    fn request_grid() -> Vec<Attributes> {
        let mut out = Vec::new();
        for verb in ["get", "list", "create", "delete"] {
            for group in ["", "apps"] {
                for (resource, sub) in [
                    ("pods", ""),
                    ("pods", "exec"),
                    ("secrets", ""),
                    ("deployments", "exec"),
                ] {
                    for name in ["", "a", "b"] {
                        out.push(
                            res(verb, group, resource)
                                .subresource(sub)
                                .namespace("ns")
                                .name(name)
                                .into(),
                        );
                    }
                }
            }
            for path in ["/a", "/a/x", "/ab", "/b", "/c"] {
                out.push(Attributes::non_resource(
                    &verb.replace("create", "post"),
                    path,
                ));
            }
        }
        out
    }

    proptest! {
        /// Escalation soundness: when the owner's rules cover the servant's (nothing
        /// uncovered), every request a servant rule allows is allowed by some owner rule.
        #[test]
        fn prop_covered_rules_grant_no_more(
            owner in proptest::collection::vec(any_rule(), 0..4),
            servant in proptest::collection::vec(any_rule(), 1..3),
        ) {
            if uncovered(&owner, &servant).is_empty() {
                for attrs in request_grid() {
                    if servant.iter().any(|r| rule_allows(&attrs, r)) {
                        prop_assert!(owner.iter().any(|r| rule_allows(&attrs, r)), "{attrs:?} escapes {owner:?}");
                    }
                }
            }
        }

        /// A narrowing of a held rule (fewer verbs, wildcards replaced by what they match,
        /// names added) is always covered, and grants nothing the held rule does not.
        #[test]
        fn prop_narrowed_rules_are_covered((owner, servant) in any_rule().prop_flat_map(|o| (Just(o.clone()), narrow(o)))) {
            prop_assert!(uncovered(std::slice::from_ref(&owner), std::slice::from_ref(&servant)).is_empty(), "{servant:?} not covered by {owner:?}");
            for attrs in request_grid() {
                if rule_allows(&attrs, &servant) {
                    prop_assert!(rule_allows(&attrs, &owner), "{attrs:?}");
                }
            }
        }

        /// A rule always covers itself.
        #[test]
        fn prop_rules_cover_themselves(rule in any_rule()) {
            prop_assert!(uncovered(std::slice::from_ref(&rule), std::slice::from_ref(&rule)).is_empty());
        }

        /// Request parsing is total and keeps the decoded path.
        #[test]
        fn prop_request_info_is_total(path in "(/[a-z0-9%.]{0,6}){0,7}/?", query in proptest::option::of("[a-z=&%.]{0,20}")) {
            for method in [Method::GET, Method::POST, Method::DELETE, Method::OPTIONS] {
                let info = request_info(&method, &path, query.as_deref());
                if info.is_resource_request {
                    prop_assert!(!info.api_version.is_empty());
                }
            }
        }
    }
}
