//! The runner's namespace and permissions: computed from `manifests/gitlab-runner-rbac.yaml`
//! (the runbook's rules, embedded, usable with kubectl as is) with the names from the
//! operator's flags, then server-side applied, namespace first.
//!
//! The namespaced rules are bound with a RoleBinding in the runner namespace, not the
//! runbook's ClusterRoleBinding (which would let the runner read every Secret of the cluster,
//! kube-system's included); only the cluster-scoped priorityclasses rule, needed for pause
//! pods, is bound cluster-wide. The group bound is the credential's organization: one input,
//! so the two cannot disagree.
//!
//! The pause-pod rules (apps/deployments in the namespace, priorityclasses get/create at
//! cluster scope) are the runner's only when gitlab-runner runs its own pause pods
//! (`--gitlab-native-pause-pods`); tenantci's own Deployment is applied with the tenant-admin
//! kubeconfig and needs nothing from the runner. Leaving native mode,
//! [`remove_pause_pod_objects`] deletes the cluster-wide pair.

use crate::steps::Outcome;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use serde::Deserialize as _;

use super::apply::{Applied, Object, apply_all};
use tenantci_core::Result;

/// `manifests/gitlab-runner-rbac.yaml`, embedded: the runbook's objects, whose names and group
/// [`desired`] replaces.
pub const MANIFEST: &str = include_str!("../../../../manifests/gitlab-runner-rbac.yaml");

/// Names the objects get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacSpec {
    /// The runner's namespace, where job pods run; created, and the RoleBinding is in it.
    pub namespace: String,
    /// ClusterRole and RoleBinding name (the priorityclasses objects get `-priorityclasses`).
    pub role_name: String,
    /// The group bound: the credential's organization.
    pub group: String,
    /// Keep the apps/deployments rule and the priorityclasses objects: gitlab-runner's own
    /// pause-pod autoscaler needs them (docs/runbooks/prewarm.md).
    pub pause_pods: bool,
}

/// The objects, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct RbacObjects {
    /// The runner's namespace.
    pub namespace: Namespace,
    /// The ClusterRole of the namespaced rules (pods and their exec, attach and log; secrets,
    /// configmaps, services and the other objects jobs use; deployments only with pause pods),
    /// granted only in the namespace by `binding`.
    pub role: ClusterRole,
    /// Grants `role` to the group in the runner's namespace only.
    pub binding: RoleBinding,
    /// Only with pause pods.
    pub cluster_role: Option<ClusterRole>,
    /// Grants `cluster_role` to the group cluster-wide; only with pause pods.
    pub cluster_binding: Option<ClusterRoleBinding>,
}

fn is_pause_pod_rule(rule: &PolicyRule) -> bool {
    rule.api_groups
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|g| g == "apps")
}

fn label(meta: &mut ObjectMeta) {
    meta.labels
        .get_or_insert_with(Default::default)
        .insert("app.kubernetes.io/managed-by".into(), "tenantci".into());
}

/// Builds the objects from the embedded manifest.
pub fn desired(spec: &RbacSpec) -> RbacObjects {
    let mut namespace = None;
    let mut roles = Vec::new();
    let mut binding = None;
    let mut cluster_binding = None;
    for doc in serde_yaml::Deserializer::from_str(MANIFEST) {
        let value = serde_yaml::Value::deserialize(doc).expect("the embedded manifest is YAML");
        match value.get("kind").and_then(|k| k.as_str()) {
            Some("Namespace") => namespace = serde_yaml::from_value::<Namespace>(value).ok(),
            Some("ClusterRole") => roles.extend(serde_yaml::from_value::<ClusterRole>(value).ok()),
            Some("RoleBinding") => binding = serde_yaml::from_value::<RoleBinding>(value).ok(),
            Some("ClusterRoleBinding") => {
                cluster_binding = serde_yaml::from_value::<ClusterRoleBinding>(value).ok()
            }
            _ => {}
        }
    }
    let mut namespace = namespace.expect("manifest has a Namespace");
    let mut binding = binding.expect("manifest has a RoleBinding");
    let mut cluster_binding = cluster_binding.expect("manifest has a ClusterRoleBinding");
    let (mut role, mut cluster_role) = match (roles.first(), roles.get(1)) {
        (Some(a), Some(b)) => (a.clone(), b.clone()),
        _ => panic!("manifest has two ClusterRoles"),
    };
    let cluster_name = format!("{}-priorityclasses", spec.role_name);

    namespace.metadata.name = Some(spec.namespace.clone());
    role.metadata.name = Some(spec.role_name.clone());
    if !spec.pause_pods
        && let Some(rules) = role.rules.as_mut()
    {
        rules.retain(|r| !is_pause_pod_rule(r));
    }
    binding.metadata.name = Some(spec.role_name.clone());
    binding.metadata.namespace = Some(spec.namespace.clone());
    binding.role_ref.name = spec.role_name.clone();
    for s in binding.subjects.iter_mut().flatten() {
        s.name = spec.group.clone();
    }
    cluster_role.metadata.name = Some(cluster_name.clone());
    cluster_binding.metadata.name = Some(cluster_name.clone());
    cluster_binding.role_ref.name = cluster_name;
    for s in cluster_binding.subjects.iter_mut().flatten() {
        s.name = spec.group.clone();
    }
    for meta in [
        &mut namespace.metadata,
        &mut role.metadata,
        &mut binding.metadata,
        &mut cluster_role.metadata,
        &mut cluster_binding.metadata,
    ] {
        label(meta);
    }
    RbacObjects {
        namespace,
        role,
        binding,
        cluster_role: spec.pause_pods.then_some(cluster_role),
        cluster_binding: spec.pause_pods.then_some(cluster_binding),
    }
}

/// How to get a client that may apply and delete the runner's RBAC.
const ADMIN_HINT: &str = "use the cluster's tenant-admin.kubeconfig (it must be cluster admin), or pass the right --tenant-kubeconfig";

impl RbacObjects {
    /// The objects in apply order: the namespace, the role and binding, then the pause-pod
    /// objects when present.
    pub fn objects(&self) -> Vec<Object> {
        let mut v = vec![
            Object::Namespace(self.namespace.clone()),
            Object::ClusterRole(self.role.clone()),
            Object::RoleBinding(self.binding.clone()),
        ];
        if let (Some(cr), Some(crb)) = (&self.cluster_role, &self.cluster_binding) {
            v.push(Object::ClusterRole(cr.clone()));
            v.push(Object::ClusterRoleBinding(crb.clone()));
        }
        v
    }
}

/// Applies the namespace, then the roles and bindings (server-side apply, field manager
/// `tenantci`, skipped per object when the live one already matches).
pub async fn apply(client: &kube::Client, o: &RbacObjects, dry_run: bool) -> Result<Vec<Applied>> {
    apply_all(client, &o.objects(), dry_run, ADMIN_HINT).await
}

/// Leaving native pause pods: deletes the `<role>-priorityclasses` ClusterRole and binding
/// (the deployments rule leaves with the next apply of the role). Absent objects are fine.
pub async fn remove_pause_pod_objects(
    client: &kube::Client,
    spec: &RbacSpec,
    dry_run: bool,
) -> Result<Vec<Applied>> {
    let name = format!("{}-priorityclasses", spec.role_name);
    let params = kube::api::DeleteParams {
        dry_run,
        ..Default::default()
    };
    let outcome = |r: std::result::Result<(), kube::Error>, kind: &str| match r {
        Ok(()) => Ok(Outcome::Deleted),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Outcome::Absent),
        Err(e) => Err(tenantci_core::kube_client::api_error(
            e,
            &format!("delete {kind} `{name}`"),
            ADMIN_HINT,
        )),
    };
    let binding = outcome(
        Api::<ClusterRoleBinding>::all(client.clone())
            .delete(&name, &params)
            .await
            .map(|_| ()),
        "ClusterRoleBinding",
    )?;
    let role = outcome(
        Api::<ClusterRole>::all(client.clone())
            .delete(&name, &params)
            .await
            .map(|_| ()),
        "ClusterRole",
    )?;
    Ok(vec![
        Applied {
            kind: "ClusterRoleBinding".into(),
            name: name.clone(),
            outcome: binding,
        },
        Applied {
            kind: "ClusterRole".into(),
            name,
            outcome: role,
        },
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
    fn names_come_from_the_spec_and_the_group_is_bound_in_the_namespace_only() {
        let o = desired(&spec(true));
        assert_eq!(o.namespace.metadata.name.as_deref(), Some("ci-jobs"));
        assert_eq!(o.role.metadata.name.as_deref(), Some("runner-ci"));
        assert_eq!(o.binding.metadata.namespace.as_deref(), Some("ci-jobs"));
        assert_eq!(o.binding.role_ref.kind, "ClusterRole");
        assert_eq!(o.binding.role_ref.name, "runner-ci");
        let subjects = o.binding.subjects.as_ref().unwrap();
        assert_eq!(
            (subjects[0].kind.as_str(), subjects[0].name.as_str()),
            ("Group", "team-ci")
        );
        assert_eq!(o.role.rules.as_ref().unwrap().len(), 4);
        let crb = o.cluster_binding.unwrap();
        assert_eq!(crb.role_ref.name, "runner-ci-priorityclasses");
        assert_eq!(crb.subjects.unwrap()[0].name, "team-ci");
        let cr_rules = o.cluster_role.unwrap().rules.unwrap();
        assert_eq!(
            cr_rules[0].resources.as_deref().unwrap(),
            ["priorityclasses"]
        );
    }

    #[test]
    fn pause_pod_rules_only_with_pause_pods() {
        let o = desired(&spec(false));
        let rules = o.role.rules.unwrap();
        assert_eq!(rules.len(), 3);
        assert!(rules.iter().all(|r| !is_pause_pod_rule(r)));
        assert!(rules.iter().any(|r| {
            r.resources
                .as_ref()
                .unwrap()
                .contains(&"pods/exec".to_string())
        }));
        assert!(o.cluster_role.is_none() && o.cluster_binding.is_none());
    }

    #[test]
    fn objects_apply_namespace_first_and_pause_pod_objects_last() {
        let kinds = |o: &RbacObjects| o.objects().iter().map(Object::kind).collect::<Vec<_>>();
        assert_eq!(
            kinds(&desired(&spec(false))),
            ["Namespace", "ClusterRole", "RoleBinding"]
        );
        assert_eq!(
            kinds(&desired(&spec(true))),
            [
                "Namespace",
                "ClusterRole",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding"
            ]
        );
    }
}
