//! The bootstrap ClusterRoles and ClusterRoleBindings kube-apiserver seeds that matter to a
//! tenant apiserver (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). Lists are
//! sorted, as the bootstrap policy's rule builder sorts them.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::rbac::{RBAC_GROUP, RbacObjects};
use super::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, SYSTEM_MASTERS};

fn strings(items: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(BTreeMap::from([(
            "kubernetes.io/bootstrapping".to_string(),
            "rbac-defaults".to_string(),
        )])),
        annotations: Some(BTreeMap::from([(
            "rbac.authorization.kubernetes.io/autoupdate".to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs),
        non_resource_urls: Some(strings(urls)),
        ..PolicyRule::default()
    }
}

fn resource_rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs),
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        ..PolicyRule::default()
    }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(name),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

fn binding(role: &str, groups: &[&str]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role),
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_string()),
            kind: "ClusterRole".to_string(),
            name: role.to_string(),
        },
        subjects: Some(
            groups
                .iter()
                .map(|g| Subject {
                    api_group: Some(RBAC_GROUP.to_string()),
                    kind: "Group".to_string(),
                    name: g.to_string(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

/// `cluster-admin` (everything, bound to `system:masters`), `system:discovery`,
/// `system:basic-user` and `system:public-info-viewer` (bound to `system:authenticated`; the
/// last also to `system:unauthenticated`). The aggregated `admin`/`edit`/`view` roles and the
/// controllers' roles are not seeded.
pub fn default_rbac() -> RbacObjects {
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery: Vec<&str> = vec![
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
    ];
    discovery.extend(health);
    RbacObjects {
        roles: Vec::new(),
        role_bindings: Vec::new(),
        cluster_roles: vec![
            cluster_role(
                "cluster-admin",
                vec![
                    resource_rule(&["*"], &["*"], &["*"]),
                    url_rule(&["*"], &["*"]),
                ],
            ),
            cluster_role("system:discovery", vec![url_rule(&["get"], &discovery)]),
            cluster_role(
                "system:basic-user",
                vec![
                    resource_rule(
                        &["create"],
                        &["authorization.k8s.io"],
                        &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    ),
                    resource_rule(
                        &["create"],
                        &["authentication.k8s.io"],
                        &["selfsubjectreviews"],
                    ),
                ],
            ),
            cluster_role(
                "system:public-info-viewer",
                vec![url_rule(&["get"], &health)],
            ),
        ],
        cluster_role_bindings: vec![
            binding("cluster-admin", &[SYSTEM_MASTERS]),
            binding("system:discovery", &[ALL_AUTHENTICATED]),
            binding("system:basic-user", &[ALL_AUTHENTICATED]),
            binding(
                "system:public-info-viewer",
                &[ALL_AUTHENTICATED, ALL_UNAUTHENTICATED],
            ),
        ],
    }
}
