//! The runner's namespace, ClusterRole and ClusterRoleBinding: computed from
//! `manifests/gitlab-runner-rbac.yaml` (the runbook's objects, embedded, usable with kubectl as
//! is) with the names from the operator's flags, then server-side applied, namespace first.
//! The ClusterRole names the group the credential carries as its O: one input, so the two
//! cannot disagree.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use kube::api::Api;
use serde::Deserialize as _;

use super::apply::Applied;

use crate::{Error, Result};

pub const MANIFEST: &str = include_str!("../../manifests/gitlab-runner-rbac.yaml");

/// Names the objects get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacSpec {
    pub namespace: String,
    /// ClusterRole and ClusterRoleBinding name.
    pub role_name: String,
    /// The group bound: the credential's organization.
    pub group: String,
    /// Keep the apps/deployments and scheduling.k8s.io/priorityclasses rules (pause pods).
    pub pause_pods: bool,
}

/// The three objects, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct RbacObjects {
    pub namespace: Namespace,
    pub cluster_role: ClusterRole,
    pub binding: ClusterRoleBinding,
}

fn is_pause_pod_rule(rule: &PolicyRule) -> bool {
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    groups
        .iter()
        .any(|g| g == "apps" || g == "scheduling.k8s.io")
}

/// Builds the objects from the embedded manifest.
pub fn desired(spec: &RbacSpec) -> RbacObjects {
    let mut namespace = None;
    let mut cluster_role = None;
    let mut binding = None;
    for doc in serde_yaml::Deserializer::from_str(MANIFEST) {
        let value = serde_yaml::Value::deserialize(doc).expect("the embedded manifest is YAML");
        match value.get("kind").and_then(|k| k.as_str()) {
            Some("Namespace") => namespace = serde_yaml::from_value::<Namespace>(value).ok(),
            Some("ClusterRole") => cluster_role = serde_yaml::from_value::<ClusterRole>(value).ok(),
            Some("ClusterRoleBinding") => {
                binding = serde_yaml::from_value::<ClusterRoleBinding>(value).ok()
            }
            _ => {}
        }
    }
    let mut namespace = namespace.expect("manifest has a Namespace");
    let mut cluster_role = cluster_role.expect("manifest has a ClusterRole");
    let mut binding = binding.expect("manifest has a ClusterRoleBinding");
    namespace.metadata.name = Some(spec.namespace.clone());
    cluster_role.metadata.name = Some(spec.role_name.clone());
    if !spec.pause_pods {
        if let Some(rules) = cluster_role.rules.as_mut() {
            rules.retain(|r| !is_pause_pod_rule(r));
        }
    }
    binding.metadata.name = Some(spec.role_name.clone());
    binding.role_ref.name = spec.role_name.clone();
    if let Some(subjects) = binding.subjects.as_mut() {
        for s in subjects {
            s.name = spec.group.clone();
        }
    }
    for meta in [
        &mut namespace.metadata,
        &mut cluster_role.metadata,
        &mut binding.metadata,
    ] {
        meta.labels
            .get_or_insert_with(Default::default)
            .insert("app.kubernetes.io/managed-by".into(), "tenantci".into());
    }
    RbacObjects {
        namespace,
        cluster_role,
        binding,
    }
}

fn apply_error(kind: &str, name: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 403 => Error::bad_input(format!(
            "the tenant-admin kubeconfig may not apply {kind} `{name}`: {}",
            s.message
        ))
        .hint("use the cluster's tenant-admin.kubeconfig (it must be cluster admin), or pass the right --tenant-kubeconfig"),
        kube::Error::Api(s) if s.code == 401 => Error::bad_input(format!(
            "the tenant apiserver did not accept the tenant-admin credential while applying {kind} `{name}`"
        ))
        .hint("the tenant-admin kubeconfig is not from this cluster's ClientCA"),
        kube::Error::Api(s) => Error::external(format!("the tenant apiserver failed to apply {kind} `{name}`: {} ({})", s.message, s.code)),
        _ => Error::external(format!("cannot reach the tenant apiserver to apply {kind} `{name}`: {e}"))
            .hint("the apiserver binds loopback on the gateway host; is the gateway up? (`tenantci check-host`)"),
    }
}

/// Applies the namespace, then the ClusterRole, then the binding (server-side apply, field
/// manager `tenantci`, skipped per object when the live one already matches).
pub async fn apply(
    client: &kube::Client,
    objects: &RbacObjects,
    dry_run: bool,
) -> Result<Vec<Applied>> {
    let ns = &objects.namespace;
    let role = &objects.cluster_role;
    let binding = &objects.binding;
    let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.name.clone().unwrap_or_default()
    };
    Ok(vec![
        super::apply::apply(&Api::<Namespace>::all(client.clone()), ns, dry_run)
            .await
            .map_err(|e| apply_error("Namespace", &name(&ns.metadata), e))?,
        super::apply::apply(&Api::<ClusterRole>::all(client.clone()), role, dry_run)
            .await
            .map_err(|e| apply_error("ClusterRole", &name(&role.metadata), e))?,
        super::apply::apply(
            &Api::<ClusterRoleBinding>::all(client.clone()),
            binding,
            dry_run,
        )
        .await
        .map_err(|e| apply_error("ClusterRoleBinding", &name(&binding.metadata), e))?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pause: bool) -> RbacSpec {
        RbacSpec {
            namespace: "ci-jobs".into(),
            role_name: "runner-ci".into(),
            group: "team-ci".into(),
            pause_pods: pause,
        }
    }

    #[test]
    fn names_come_from_the_spec_and_the_group_is_bound() {
        let o = desired(&spec(true));
        assert_eq!(o.namespace.metadata.name.as_deref(), Some("ci-jobs"));
        assert_eq!(o.cluster_role.metadata.name.as_deref(), Some("runner-ci"));
        assert_eq!(o.binding.role_ref.name, "runner-ci");
        let subjects = o.binding.subjects.as_ref().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "Group");
        assert_eq!(subjects[0].name, "team-ci");
        assert_eq!(o.cluster_role.rules.as_ref().unwrap().len(), 5);
    }

    #[test]
    fn pause_pod_rules_only_with_pause_pods() {
        let rules = desired(&spec(false)).cluster_role.rules.unwrap();
        assert_eq!(rules.len(), 3);
        assert!(rules.iter().all(|r| !is_pause_pod_rule(r)));
        assert!(rules.iter().any(|r| {
            r.resources
                .as_ref()
                .unwrap()
                .contains(&"pods/exec".to_string())
        }));
    }
}
