//! The dispatcher's RBAC in the tenant cluster: applied with the tenant-admin client
//! (`tenant::apply`), then verified with the dispatcher's OWN credential through
//! SelfSubjectAccessReviews (`tenant::access`), so the check covers the certificate, the
//! binding and the rules at once. This file holds the data (`must_allow`, `must_deny`, and
//! with executor identity `must_allow_identity`, cluster-scoped) and the wording of a failure;
//! the objects are `init::manifests`'.

use crate::identity::entries;
use tenantci_core::{Error, Result};
use tenantci_runner::tenant::access::{self, Access, ReviewResult, Reviewer, Scope};
use tenantci_runner::tenant::apply::{Applied, Object, apply_all};

/// How to get a client that may apply the dispatcher's RBAC.
const ADMIN_HINT: &str =
    "the cluster's tenant-admin.kubeconfig must be cluster admin; check the state dir";

/// The ServiceAccount, Role, RoleBinding and client-certificate user name.
pub const NAME: &str = "tenantci-dispatcher";

/// The name of the ClusterRole and ClusterRoleBinding of the dispatcher in `namespace`:
/// cluster-scoped objects carry the namespace in their name, so two dispatchers (two
/// namespaces) never share, and never remove, each other's binding.
pub fn identity_rbac_name(namespace: &str) -> String {
    format!("{NAME}:{namespace}")
}

pub use crate::backend::pod::pause::read_rbac_name as pause_rbac_name;

/// What `dispatch run` calls in its namespace: every verb of the Role.
pub fn must_allow() -> Vec<Access> {
    let mut v = Vec::new();
    for verb in ["get", "create", "update"] {
        v.push(Access::new(verb, "coordination.k8s.io", "leases"));
    }
    for resource in ["pods", "secrets"] {
        for verb in ["get", "list", "watch", "create", "delete", "patch"] {
            v.push(Access::new(verb, "", resource));
        }
    }
    for verb in ["get", "create", "patch"] {
        v.push(Access::new(verb, "apps", "deployments"));
    }
    v
}

/// What `dispatch run` calls with executor identity on, cluster-scoped: every verb of the
/// ClusterRole of `manifests/dispatch/identity/rbac.yaml` (one ClusterStaticEntry per executor
/// Pod; the Pod's Node for its UID).
pub fn must_allow_identity() -> Vec<Access> {
    let mut v: Vec<Access> = ["get", "list", "watch", "create", "update", "delete"]
        .into_iter()
        .map(|verb| Access::new(verb, entries::GROUP, entries::PLURAL))
        .collect();
    v.push(Access::new("get", "", "nodes"));
    v.into_iter().map(|a| a.scope(Scope::Cluster)).collect()
}

/// What the admin kubeconfig of `--kubeconfig` must be allowed before anything is written, and
/// why: applying every object of the RBAC (GET, then a server-side apply PATCH that may create),
/// holding every access the Role grants (the apiserver refuses to grant more than the granter
/// holds), and asking SubjectAccessReviews (the ServiceAccount's access is verified with them).
/// With executor identity or a warm pool the cluster-scoped objects and the accesses they
/// grant too; with `--apply-secret` the ConfigMap and the Secret the Deployment mounts.
pub fn must_allow_admin(needs: AdminNeeds) -> Vec<(Access, Purpose)> {
    let mut v = Vec::new();
    let mut need = |access: Access, purpose: Purpose| {
        if !v.iter().any(|(a, _)| *a == access) {
            v.push((access, purpose));
        }
    };
    let cluster_rbac = [
        (needs.warm_pools, Purpose::WarmPools),
        (needs.identity, Purpose::Identity),
    ];
    for verb in ["get", "create", "patch"] {
        need(
            Access::new(verb, "", "namespaces").scope(Scope::Cluster),
            Purpose::Rbac,
        );
        for (group, resource) in [
            ("", "serviceaccounts"),
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "rolebindings"),
        ] {
            need(Access::new(verb, group, resource), Purpose::Rbac);
        }
        if needs.in_cluster_objects {
            need(
                Access::new(verb, "", "configmaps"),
                Purpose::InClusterObjects,
            );
        }
        for (_, purpose) in cluster_rbac.iter().filter(|(on, _)| *on) {
            for resource in ["clusterroles", "clusterrolebindings"] {
                let a = Access::new(verb, "rbac.authorization.k8s.io", resource);
                need(a.scope(Scope::Cluster), *purpose);
            }
        }
    }
    need(
        Access::new("create", "authorization.k8s.io", "subjectaccessreviews").scope(Scope::Cluster),
        Purpose::Rbac,
    );
    for a in must_allow() {
        need(a, Purpose::Rbac);
    }
    if needs.warm_pools {
        // What the pause ClusterRole grants (the granter must hold it).
        let a = Access::new("get", "scheduling.k8s.io", "priorityclasses");
        need(a.scope(Scope::Cluster), Purpose::WarmPools);
    }
    if needs.identity {
        for a in must_allow_identity() {
            need(a, Purpose::Identity);
        }
    }
    v
}

/// What init applies besides the namespaced RBAC.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdminNeeds {
    /// Executor identity: the cluster-scoped RBAC.
    pub identity: bool,
    /// A class with `[executor.class.warm]`: the read of the pause PriorityClass.
    pub warm_pools: bool,
    /// `--apply-secret`: the ConfigMap and Secret of `in_cluster`.
    pub in_cluster_objects: bool,
}

/// Why `dispatch init` needs an access of the admin kubeconfig (its refusal says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The namespace, ServiceAccount, Role and binding, and the reviews that verify them.
    Rbac,
    /// `--apply-secret`: the ConfigMap and Secret the Deployment mounts.
    InClusterObjects,
    /// Executor identity's cluster-scoped RBAC.
    Identity,
    /// The read of the warm pools' PriorityClass.
    WarmPools,
}

impl Purpose {
    /// The end of the refusal's sentence: what init needs the access for.
    fn needed_for(self) -> &'static str {
        match self {
            Purpose::Rbac => "to set up the dispatcher's RBAC",
            Purpose::InClusterObjects => {
                "to apply the dispatcher's ConfigMap and Secret (--apply-secret)"
            }
            Purpose::Identity => "to set up executor identity's cluster-scoped RBAC ([identity])",
            Purpose::WarmPools => {
                "to let the dispatcher read the warm pools' PriorityClass `tenantci-pause` (the config has an [executor.class.warm])"
            }
        }
    }

    fn hint(self, namespace: &str) -> String {
        match self {
            Purpose::WarmPools => format!(
                "pass --kubeconfig with a cluster administrator's kubeconfig, which may grant that read (the ClusterRole and binding `{}`, manifests/dispatch/pause/rbac.yaml); nothing was written",
                pause_rbac_name(namespace)
            ),
            _ => "pass --kubeconfig with a cluster administrator's kubeconfig (it only applies the RBAC and checks access; the dispatcher runs as its own ServiceAccount); nothing was written".into(),
        }
    }
}

/// Phase one of `--kubeconfig`: the admin kubeconfig may do everything init will do, so a
/// kubeconfig without access is refused (exit 2) before anything is written or applied.
pub async fn check_admin(
    admin: &kube::Client,
    file: &std::path::Path,
    url: &str,
    namespace: &str,
    needs: AdminNeeds,
) -> Result<()> {
    let needed = must_allow_admin(needs);
    let checks = needed.iter().map(|(a, _)| (*a, true)).collect();
    let results = access::review(&Reviewer::Own(admin), checks, namespace)
        .await
        .map_err(|e| admin_review_error(e, file, url))?;
    let Some(bad) = access::first_mismatch(&results) else {
        return Ok(());
    };
    let purpose = needed
        .iter()
        .find(|(a, _)| *a == bad.access)
        .map_or(Purpose::Rbac, |(_, p)| *p);
    Err(Error::bad_input(format!(
        "the kubeconfig `{}` may not {}, which `dispatch init` needs {}",
        file.display(),
        bad.describe(),
        purpose.needed_for()
    ))
    .hint(purpose.hint(namespace)))
}

fn admin_review_error(e: kube::Error, file: &std::path::Path, url: &str) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => Error::bad_input(format!(
            "the apiserver at {url} did not accept the kubeconfig `{}` ({}) for a SelfSubjectAccessReview",
            file.display(),
            s.code
        ))
        .hint("pass --kubeconfig with a cluster administrator's kubeconfig for this cluster; nothing was written"),
        _ => Error::external(format!(
            "cannot reach the apiserver at {url} named by the kubeconfig `{}`",
            file.display()
        ))
        .caused_by(e)
        .hint("check the kubeconfig's server and that the cluster is up (`kubectl --kubeconfig FILE get --raw /version`); nothing was written"),
    }
}

/// What the dispatcher must never be allowed.
pub fn must_deny() -> Vec<Access> {
    vec![
        Access::new("get", "", "secrets").scope(Scope::Namespace("kube-system")),
        Access::new("list", "", "secrets").scope(Scope::AllNamespaces),
        Access::new("create", "", "pods").scope(Scope::Namespace("kube-system")),
        Access::new("create", "rbac.authorization.k8s.io", "rolebindings")
            .scope(Scope::AllNamespaces),
    ]
}

/// Applies `objects` (a manifest's, in apply order: `RbacObjects::objects`,
/// `ClusterRbacObjects::objects`) with the tenant-admin client.
pub async fn apply(
    admin: &kube::Client,
    objects: &[Object],
    dry_run: bool,
) -> Result<Vec<Applied>> {
    apply_all(admin, objects, dry_run, ADMIN_HINT).await
}

fn review_error(e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 => Error::check_failed(
            "the tenant apiserver rejected the dispatcher's credential (401)",
        )
        .hint("the credential in <out dir>/kube is not from this cluster's ClientCA: delete that directory and re-run `tenantci dispatch init`"),
        _ => Error::external("the tenant apiserver failed a SelfSubjectAccessReview").caused_by(e),
    }
}

fn mismatch_error(bad: &ReviewResult, namespace: &str) -> Error {
    if bad.expected && bad.access.scope == Scope::Cluster {
        let name = identity_rbac_name(namespace);
        Error::check_failed(format!(
            "the dispatcher's credential may not {}, which `dispatch run` needs with executor identity",
            bad.describe()
        ))
        .hint(format!("the ClusterRoleBinding `{name}` must bind the ClusterRole `{name}` to the User `tenantci-dispatcher`; re-run init, or compare with manifests/dispatch/identity/rbac.yaml"))
    } else if bad.expected {
        Error::check_failed(format!(
            "the dispatcher's credential may not {}, which `dispatch run` needs",
            bad.describe()
        ))
        .hint("the RoleBinding `tenantci-dispatcher` must name the User and the ServiceAccount `tenantci-dispatcher`; re-run init, or compare with manifests/dispatch/rbac.yaml")
    } else {
        Error::check_failed(format!(
            "the dispatcher's credential may {}, which it must never be allowed",
            bad.describe()
        ))
        .hint("remove the broader binding that grants it to user `tenantci-dispatcher` or group `tenantci:gitea-dispatchers`")
    }
}

/// The accesses to review: the namespaced ones, and with executor identity (`identity`) the
/// cluster-scoped ones too.
pub fn checks(identity: bool) -> Vec<(Access, bool)> {
    let identity = identity.then(must_allow_identity).unwrap_or_default();
    access::checks(must_allow().into_iter().chain(identity), must_deny())
}

/// Reviews every access as the dispatcher: `who` is its own client credential
/// (SelfSubjectAccessReview) or, on the in-cluster path, its ServiceAccount asked about with
/// the admin client (SubjectAccessReview); returns how many reviews ran.
pub async fn verify(who: &Reviewer<'_>, namespace: &str, identity: bool) -> Result<usize> {
    let results = access::review(who, checks(identity), namespace)
        .await
        .map_err(review_error)?;
    match access::first_mismatch(&results) {
        Some(bad) => Err(mismatch_error(bad, namespace)),
        None => Ok(results.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_cover_the_role_and_deny_other_namespaces() {
        let allow = must_allow();
        assert!(allow.contains(&Access::new("create", "", "pods")));
        assert!(allow.contains(&Access::new("create", "", "secrets")));
        assert!(allow.contains(&Access::new("create", "coordination.k8s.io", "leases")));
        assert!(allow.iter().all(|a| a.scope == Scope::Reviewed));
        let deny = must_deny();
        assert!(
            deny.contains(
                &Access::new("get", "", "secrets").scope(Scope::Namespace("kube-system"))
            )
        );
        assert!(deny.iter().all(|a| a.scope != Scope::Reviewed));
        let refused = ReviewResult {
            access: deny[1],
            namespace: String::new(),
            allowed: true,
            expected: false,
        };
        assert!(
            mismatch_error(&refused, "ns")
                .message()
                .contains("may list secrets in all namespaces")
        );
    }

    #[test]
    fn identity_adds_the_cluster_scoped_checks_only_when_on() {
        let off = checks(false);
        assert!(off.iter().all(|(a, _)| a.scope != Scope::Cluster));
        let on = checks(true);
        let added: Vec<(&str, &str, &str)> = on
            .iter()
            .filter(|(a, _)| a.scope == Scope::Cluster)
            .map(|(a, expected)| {
                assert!(*expected, "{a:?} must be allowed");
                (a.verb, a.group, a.resource)
            })
            .collect();
        let entries = "clusterstaticentries";
        let spire = "spire.spiffe.io";
        assert_eq!(
            added,
            [
                ("get", spire, entries),
                ("list", spire, entries),
                ("watch", spire, entries),
                ("create", spire, entries),
                ("update", spire, entries),
                ("delete", spire, entries),
                ("get", "", "nodes"),
            ]
        );
        assert_eq!(on.len(), off.len() + added.len());
    }

    /// The admin kubeconfig needs cluster-scoped RBAC only for identity or a warm pool: a
    /// kubeconfig that may set up the namespaced RBAC passes init without them.
    #[test]
    fn the_admin_needs_cluster_rbac_only_with_identity_or_a_warm_pool() {
        let cluster_rbac = |needs: AdminNeeds| -> Vec<(Access, Purpose)> {
            must_allow_admin(needs)
                .into_iter()
                .filter(|(a, _)| {
                    a.resource.starts_with("cluster") || a.resource == "priorityclasses"
                })
                .collect()
        };
        assert_eq!(cluster_rbac(AdminNeeds::default()), []);
        let warm = AdminNeeds {
            warm_pools: true,
            ..AdminNeeds::default()
        };
        let got = cluster_rbac(warm);
        assert_eq!(got.len(), 7, "{got:?}");
        assert!(got.iter().all(|(_, p)| *p == Purpose::WarmPools));
        assert!(got.contains(&(
            Access::new("get", "scheduling.k8s.io", "priorityclasses").scope(Scope::Cluster),
            Purpose::WarmPools
        )));
        // Both: each access once, the ClusterRole's writes for either reason.
        let both = must_allow_admin(AdminNeeds {
            identity: true,
            ..warm
        });
        for (i, (a, _)) in both.iter().enumerate() {
            assert!(!both[..i].iter().any(|(b, _)| b == a), "{a:?} twice");
        }
    }

    #[test]
    fn a_missing_cluster_access_names_the_verb_resource_and_binding() {
        let missing = ReviewResult {
            access: must_allow_identity()[3],
            namespace: String::new(),
            allowed: false,
            expected: true,
        };
        let e = mismatch_error(&missing, "ci-dispatch");
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.message().contains(
                "may not create clusterstaticentries.spire.spiffe.io in the cluster scope"
            ),
            "{}",
            e.message()
        );
        assert!(
            e.hint_text()
                .unwrap()
                .contains("ClusterRoleBinding `tenantci-dispatcher:ci-dispatch`")
        );
    }
}
