//! What a fresh simulated cluster holds before anyone writes: the four standard namespaces
//! (each with its `default` ServiceAccount) and the bootstrap RBAC roles
//! and bindings from `authz::default_rbac`. No nodes: a cluster starts with none, and
//! `nodes` rents them when a Pod needs one. The admin apiserver holds one `Cluster` per tenant.

use serde_json::{Value, json};

use super::api::ApiServer;
use super::authz;

fn to_values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|i| serde_json::to_value(i).ok())
        .collect()
}

/// Seeds a fresh tenant cluster: the four standard namespaces (each given its `default`
/// ServiceAccount by the apiserver) and the bootstrap RBAC objects.
pub fn tenant(api: &ApiServer) {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        api.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    let rbac = authz::default_rbac();
    for obj in to_values(&rbac.cluster_roles)
        .into_iter()
        .chain(to_values(&rbac.cluster_role_bindings))
        .chain(to_values(&rbac.roles))
        .chain(to_values(&rbac.role_bindings))
    {
        api.seed(obj);
    }
}

/// The gateway's `Cluster` object for a tenant apiserver at `url`.
pub fn cluster_object(name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "tenancy.socialweb.computer/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {},
        "status": {"url": url, "phase": "Ready"}
    })
}
