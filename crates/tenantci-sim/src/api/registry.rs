//! The resources an apiserver serves: group, version, kind, plural, scope, verbs, short names
//! and subresources, as discovery advertises them and the router resolves them.
//! Data only; behaviour that differs per resource is keyed on `ResourceDef::key`.

use crate::validate::NameRule;

/// One resource an apiserver serves, as discovery advertises it and the router resolves it.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// Store key and identity: `pods`, `deployments.apps`.
    pub key: &'static str,
    /// The API group (empty: the core group).
    pub group: &'static str,
    /// The one version served.
    pub version: &'static str,
    /// The kind's name (`Pod`).
    pub kind: &'static str,
    /// The plural resource name in URLs (`pods`).
    pub plural: &'static str,
    /// The singular name discovery advertises (`pod`).
    pub singular: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// The verbs discovery advertises.
    pub verbs: &'static [&'static str],
    /// The short names discovery advertises (`po`).
    pub short_names: &'static [&'static str],
    /// Subresources beyond the object itself: `status`, `log`, `exec`, `attach`, `portforward`.
    pub subresources: &'static [&'static str],
    /// How names are validated on create.
    pub name_rule: NameRule,
    /// Whether metadata.generation is maintained (bumped when the spec changes).
    pub generation: bool,
}

impl ResourceDef {
    /// The `apiVersion` objects of the resource carry: `v1`, `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Its group and resource, as Status bodies name them.
    pub fn group_resource(&self) -> super::super::api_error::GroupResource<'static> {
        super::super::api_error::GroupResource {
            group: self.group,
            resource: self.plural,
        }
    }

    /// Whether it has a `status` subresource.
    pub fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }

    /// Create-only virtual resources (access reviews): nothing is stored.
    pub fn is_review(&self) -> bool {
        self.group == "authorization.k8s.io"
    }
}

const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const CREATE_ONLY: &[&str] = &["create"];

#[allow(clippy::too_many_arguments)]
const fn def(
    key: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> ResourceDef {
    ResourceDef {
        key,
        group,
        version,
        kind,
        plural,
        singular,
        namespaced,
        verbs: ALL,
        short_names,
        subresources: &[],
        name_rule: NameRule::Subdomain,
        generation: false,
    }
}

/// What a tenant apiserver serves.
pub static TENANT: &[ResourceDef] = &[
    ResourceDef {
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        subresources: &["status"],
        name_rule: NameRule::Label,
        ..def(
            "namespaces",
            "",
            "v1",
            "Namespace",
            "namespaces",
            "namespace",
            false,
            &["ns"],
        )
    },
    ResourceDef {
        subresources: &["status", "log", "exec", "attach", "portforward"],
        ..def("pods", "", "v1", "Pod", "pods", "pod", true, &["po"])
    },
    def(
        "secrets",
        "",
        "v1",
        "Secret",
        "secrets",
        "secret",
        true,
        &[],
    ),
    def(
        "configmaps",
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        "configmap",
        true,
        &["cm"],
    ),
    ResourceDef {
        verbs: &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
        subresources: &["status"],
        name_rule: NameRule::Label,
        ..def(
            "services",
            "",
            "v1",
            "Service",
            "services",
            "service",
            true,
            &["svc"],
        )
    },
    def(
        "serviceaccounts",
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        true,
        &["sa"],
    ),
    def(
        "events",
        "",
        "v1",
        "Event",
        "events",
        "event",
        true,
        &["ev"],
    ),
    ResourceDef {
        subresources: &["status"],
        ..def(
            "persistentvolumeclaims",
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            true,
            &["pvc"],
        )
    },
    ResourceDef {
        subresources: &["status"],
        ..def("nodes", "", "v1", "Node", "nodes", "node", false, &["no"])
    },
    ResourceDef {
        subresources: &["status"],
        generation: true,
        ..def(
            "deployments.apps",
            "apps",
            "v1",
            "Deployment",
            "deployments",
            "deployment",
            true,
            &["deploy"],
        )
    },
    ResourceDef {
        generation: true,
        ..def(
            "priorityclasses.scheduling.k8s.io",
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            "priorityclass",
            false,
            &["pc"],
        )
    },
    ResourceDef {
        subresources: &["status"],
        generation: true,
        ..def(
            "poddisruptionbudgets.policy",
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            true,
            &["pdb"],
        )
    },
    ResourceDef {
        generation: true,
        ..def(
            "networkpolicies.networking.k8s.io",
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            "networkpolicy",
            true,
            &["netpol"],
        )
    },
    ResourceDef {
        name_rule: NameRule::PathSegment,
        ..def(
            "roles.rbac.authorization.k8s.io",
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            "role",
            true,
            &[],
        )
    },
    ResourceDef {
        name_rule: NameRule::PathSegment,
        ..def(
            "clusterroles.rbac.authorization.k8s.io",
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            false,
            &[],
        )
    },
    ResourceDef {
        name_rule: NameRule::PathSegment,
        ..def(
            "rolebindings.rbac.authorization.k8s.io",
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            true,
            &[],
        )
    },
    ResourceDef {
        name_rule: NameRule::PathSegment,
        ..def(
            "clusterrolebindings.rbac.authorization.k8s.io",
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            false,
            &[],
        )
    },
    def(
        "leases.coordination.k8s.io",
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        "lease",
        true,
        &[],
    ),
    // SPIRE's registration entries (spire-controller-manager): the dispatcher writes one per
    // executor Pod, the simulator's SPIRE stand-in (`crate::spire`) issues SVIDs for them.
    ResourceDef {
        subresources: &["status"],
        generation: true,
        ..def(
            CLUSTER_STATIC_ENTRIES,
            SPIRE_GROUP,
            "v1alpha1",
            "ClusterStaticEntry",
            "clusterstaticentries",
            "clusterstaticentry",
            false,
            &[],
        )
    },
    ResourceDef {
        verbs: CREATE_ONLY,
        ..def(
            "subjectaccessreviews.authorization.k8s.io",
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            "subjectaccessreview",
            false,
            &[],
        )
    },
    ResourceDef {
        verbs: CREATE_ONLY,
        ..def(
            "selfsubjectaccessreviews.authorization.k8s.io",
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            false,
            &[],
        )
    },
];

/// What a tenant apiserver serves: [`TENANT`], or (`spire_crd` false) all of it but SPIRE's
/// `ClusterStaticEntry`, as a cluster where spire-controller-manager's CRDs are not installed
/// (`tenantci sim --without-spire-crd`; `dispatch init` must refuse executor identity there).
pub fn tenant(spire_crd: bool) -> &'static [ResourceDef] {
    static WITHOUT_SPIRE: std::sync::LazyLock<Vec<ResourceDef>> = std::sync::LazyLock::new(|| {
        TENANT
            .iter()
            .filter(|d| d.group != SPIRE_GROUP)
            .cloned()
            .collect()
    });
    match spire_crd {
        true => TENANT,
        false => &WITHOUT_SPIRE,
    }
}

/// Group of SPIRE's custom resources (spire-controller-manager).
pub const SPIRE_GROUP: &str = "spire.spiffe.io";
/// Store key of SPIRE's `ClusterStaticEntry` objects.
pub const CLUSTER_STATIC_ENTRIES: &str = "clusterstaticentries.spire.spiffe.io";

/// Group of the gateway's `Cluster` objects (contract in docs/state-dir.md).
pub const TENANCY_GROUP: &str = "tenancy.socialweb.computer";

/// What the gateway admin apiserver serves.
pub static ADMIN: &[ResourceDef] = &[ResourceDef {
    subresources: &["status"],
    name_rule: NameRule::Label,
    generation: true,
    ..def(
        "clusters.tenancy.socialweb.computer",
        TENANCY_GROUP,
        "v1alpha1",
        "Cluster",
        "clusters",
        "cluster",
        false,
        &[],
    )
}];

/// Resolves `(group, version, plural)` within a registry.
pub fn find(
    registry: &'static [ResourceDef],
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'static ResourceDef> {
    registry
        .iter()
        .find(|d| d.group == group && d.version == version && d.plural == plural)
}

/// The resource of `registry` with store key `key`.
pub fn by_key(registry: &'static [ResourceDef], key: &str) -> Option<&'static ResourceDef> {
    registry.iter().find(|d| d.key == key)
}

/// The groups of a registry in first-seen order, each with its one version.
pub fn groups(registry: &'static [ResourceDef]) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for d in registry {
        if !out.iter().any(|(g, v)| *g == d.group && *v == d.version) {
            out.push((d.group, d.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_spire_crd_only_spire_s_group_is_gone() {
        assert!(by_key(tenant(true), CLUSTER_STATIC_ENTRIES).is_some());
        let without = tenant(false);
        assert!(by_key(without, CLUSTER_STATIC_ENTRIES).is_none());
        assert!(!groups(without).iter().any(|(g, _)| *g == SPIRE_GROUP));
        assert_eq!(without.len(), TENANT.len() - 1);
        assert_eq!(tenant(false).as_ptr(), without.as_ptr(), "built once");
    }
}
