//! Table-driven tests of the authorization layer against kube-apiserver's documented behaviour
//! (docs/simulator-authz.md).

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

mod escalation;
mod impersonation;
mod properties;
mod rbac;
mod refusal;
mod request;
mod review;
mod runbook;
