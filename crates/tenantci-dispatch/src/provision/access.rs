//! The dispatcher's RBAC in the tenant cluster: applied with the tenant-admin client
//! (`tenant::apply`), then verified with the dispatcher's OWN credential through
//! SelfSubjectAccessReviews (`tenant::access`), so the check covers the certificate, the
//! binding and the rules at once. This file holds the data (`must_allow` in the executors'
//! namespace, `must_allow_leader` in the dispatcher's, `must_deny`, and with executor identity
//! `must_allow_identity`, cluster-scoped) and the wording of a failure; the objects are
//! `init::manifests`'. Each access is reviewed in the namespace it belongs to ([`Namespaces`]).

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

/// The dispatcher's two namespaces: the same one on a gateway host (by default), apart in the
/// cluster (`tenantci-system` and `dynamic-runner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces<'a> {
    /// The executors' (`cluster.namespace`): their Pods, Secrets and warm pools.
    pub executors: &'a str,
    /// The dispatcher's own (`cluster.dispatcher_namespace`): the leader Lease.
    pub dispatcher: &'a str,
}

impl<'a> Namespaces<'a> {
    /// The namespaces of a config's `[cluster]`.
    pub fn of(cluster: &'a crate::config::Cluster) -> Namespaces<'a> {
        Namespaces {
            executors: &cluster.namespace,
            dispatcher: cluster.dispatcher_namespace(),
        }
    }

    /// The dispatcher has a namespace of its own.
    pub fn apart(&self) -> bool {
        self.executors != self.dispatcher
    }
}

/// What `dispatch run` calls in its own namespace: every verb of the leader Role.
pub fn must_allow_leader() -> Vec<Access> {
    ["get", "create", "update"]
        .into_iter()
        .map(|verb| Access::new(verb, "coordination.k8s.io", "leases"))
        .collect()
}

/// What `dispatch run` calls in the executors' namespace: every verb of the Role.
pub fn must_allow() -> Vec<Access> {
    let mut v = Vec::new();
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
/// Each access names the namespace it is reviewed in ([`Side`]).
pub fn must_allow_admin(needs: AdminNeeds) -> Vec<(Access, Purpose, Side)> {
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
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "rolebindings"),
        ] {
            need(Access::new(verb, group, resource), Purpose::Rbac);
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
    let executors = v.into_iter().map(|(a, p)| (a, p, Side::Executors));
    let mut own: Vec<(Access, Purpose)> = Vec::new();
    dispatcher_side(needs, &mut |a, p| own.push((a, p)));
    executors
        .chain(own.into_iter().map(|(a, p)| (a, p, Side::Dispatcher)))
        .collect()
}

/// What the admin applies in the dispatcher's namespace: the ServiceAccount, the leader Role
/// and binding (holding the Lease access it grants), and with `--apply-secret` the ConfigMap
/// and the Secret the Deployment mounts.
fn dispatcher_side(needs: AdminNeeds, need: &mut dyn FnMut(Access, Purpose)) {
    for verb in ["get", "create", "patch"] {
        for (group, resource) in [
            ("", "serviceaccounts"),
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "rolebindings"),
        ] {
            need(Access::new(verb, group, resource), Purpose::Rbac);
        }
        if needs.in_cluster_objects {
            for resource in ["configmaps", "secrets"] {
                need(Access::new(verb, "", resource), Purpose::InClusterObjects);
            }
        }
    }
    for a in must_allow_leader() {
        need(a, Purpose::Rbac);
    }
}

/// Which of the dispatcher's namespaces an access is reviewed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The executors' namespace.
    Executors,
    /// The dispatcher's own.
    Dispatcher,
}

impl Side {
    /// This side's namespace.
    pub fn of<'a>(self, ns: Namespaces<'a>) -> &'a str {
        match self {
            Side::Executors => ns.executors,
            Side::Dispatcher => ns.dispatcher,
        }
    }
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
    ns: Namespaces<'_>,
    needs: AdminNeeds,
) -> Result<()> {
    let needed = must_allow_admin(needs);
    let mut results = Vec::new();
    for side in [Side::Executors, Side::Dispatcher] {
        let checks = needed
            .iter()
            .filter(|(_, _, s)| *s == side)
            .map(|(a, _, _)| (*a, true))
            .collect();
        let answers = access::review(&Reviewer::Own(admin), checks, side.of(ns))
            .await
            .map_err(|e| admin_review_error(e, file, url))?;
        results.extend(answers);
    }
    let Some(bad) = access::first_mismatch(&results) else {
        return Ok(());
    };
    let purpose = needed
        .iter()
        .find(|(a, _, _)| *a == bad.access)
        .map_or(Purpose::Rbac, |(_, p, _)| *p);
    Err(Error::bad_input(format!(
        "the kubeconfig `{}` may not {}, which `dispatch init` needs {}",
        file.display(),
        bad.describe(),
        purpose.needed_for()
    ))
    .hint(purpose.hint(ns.executors)))
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

/// What the dispatcher must never be allowed in its own namespace when it has one: no Pod, no
/// Secret (its own Secret is mounted, never read through the API), so whoever may write there
/// gains nothing from its binding.
pub fn must_deny_in_own_namespace() -> Vec<Access> {
    vec![
        Access::new("get", "", "secrets"),
        Access::new("list", "", "pods"),
        Access::new("create", "", "pods"),
    ]
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
    } else if bad.expected && bad.access.resource == "leases" {
        Error::check_failed(format!(
            "the dispatcher's credential may not {}, which `dispatch run` needs for the leader Lease",
            bad.describe()
        ))
        .hint("the RoleBinding `tenantci-dispatcher-leader` in the dispatcher's namespace must name the User and the ServiceAccount `tenantci-dispatcher`; re-run init, or compare with manifests/dispatch/rbac.yaml")
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

/// The accesses to review, by the namespace each is asked in: the executors' (the Role, with
/// executor identity the cluster-scoped ones, the denials; the Lease too while the namespaces
/// are one), and when apart the dispatcher's (the Lease; no Pod, no Secret) and no Lease in
/// the executors'.
pub fn checks(ns: Namespaces<'_>, identity: bool) -> Vec<(Side, Vec<(Access, bool)>)> {
    let identity = identity.then(must_allow_identity).unwrap_or_default();
    let leader = must_allow_leader();
    if !ns.apart() {
        let allow = leader.into_iter().chain(must_allow()).chain(identity);
        return vec![(Side::Executors, access::checks(allow, must_deny()))];
    }
    let no_lease = Access::new("create", "coordination.k8s.io", "leases");
    let executors = access::checks(
        must_allow().into_iter().chain(identity),
        must_deny().into_iter().chain([no_lease]),
    );
    let own = access::checks(leader, must_deny_in_own_namespace());
    vec![(Side::Executors, executors), (Side::Dispatcher, own)]
}

/// Reviews every access as the dispatcher: `who` is its own client credential
/// (SelfSubjectAccessReview) or, on the in-cluster path, its ServiceAccount asked about with
/// the admin client (SubjectAccessReview); returns how many reviews ran.
pub async fn verify(who: &Reviewer<'_>, ns: Namespaces<'_>, identity: bool) -> Result<usize> {
    let mut n = 0;
    for (side, checks) in checks(ns, identity) {
        let results = access::review(who, checks, side.of(ns))
            .await
            .map_err(review_error)?;
        if let Some(bad) = access::first_mismatch(&results) {
            return Err(mismatch_error(bad, ns.executors));
        }
        n += results.len();
    }
    Ok(n)
}

/// Every access of [`checks`] the dispatcher must have and does not, each as the error
/// [`verify`] would stop at; empty when it has them all.
pub async fn missing(who: &Reviewer<'_>, ns: Namespaces<'_>, identity: bool) -> Result<Vec<Error>> {
    let mut out = Vec::new();
    for (side, checks) in checks(ns, identity) {
        let results = access::review(who, checks, side.of(ns))
            .await
            .map_err(review_error)?;
        out.extend(
            results
                .iter()
                .filter(|r| r.expected && !r.allowed)
                .map(|bad| mismatch_error(bad, ns.executors)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_cover_the_role_and_deny_other_namespaces() {
        let allow = must_allow();
        assert!(allow.contains(&Access::new("create", "", "pods")));
        assert!(allow.contains(&Access::new("create", "", "secrets")));
        assert!(must_allow_leader().contains(&Access::new(
            "create",
            "coordination.k8s.io",
            "leases"
        )));
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

    /// One namespace (a gateway host): one set of reviews, the Lease among the allowed. Two:
    /// the Lease allowed in the dispatcher's namespace only, and nothing else there.
    #[test]
    fn the_lease_is_reviewed_in_the_dispatcher_s_namespace() {
        let lease = Access::new("create", "coordination.k8s.io", "leases");
        let one = Namespaces {
            executors: "dynamic-runner",
            dispatcher: "dynamic-runner",
        };
        let got = checks(one, false);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, Side::Executors);
        assert!(got[0].1.contains(&(lease, true)));
        let two = Namespaces {
            dispatcher: "tenantci-system",
            ..one
        };
        let got = checks(two, false);
        let of = |side: Side| &got.iter().find(|(s, _)| *s == side).unwrap().1;
        assert!(of(Side::Executors).contains(&(lease, false)));
        assert!(of(Side::Executors).contains(&(Access::new("create", "", "pods"), true)));
        let own = of(Side::Dispatcher);
        assert!(own.contains(&(lease, true)));
        assert!(own.contains(&(Access::new("get", "", "secrets"), false)));
        assert!(own.contains(&(Access::new("create", "", "pods"), false)));
        assert_eq!(Side::Dispatcher.of(two), "tenantci-system");
    }

    fn flat(ns: Namespaces<'_>, identity: bool) -> Vec<(Access, bool)> {
        checks(ns, identity)
            .into_iter()
            .flat_map(|(_, c)| c)
            .collect()
    }

    #[test]
    fn identity_adds_the_cluster_scoped_checks_only_when_on() {
        let ns = Namespaces {
            executors: "dynamic-runner",
            dispatcher: "tenantci-system",
        };
        let off = flat(ns, false);
        assert!(off.iter().all(|(a, _)| a.scope != Scope::Cluster));
        let on = flat(ns, true);
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
                .filter(|(a, _, _)| {
                    a.resource.starts_with("cluster") || a.resource == "priorityclasses"
                })
                .map(|(a, p, side)| {
                    assert_eq!(side, Side::Executors, "cluster-scoped: reviewed once");
                    (a, p)
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
        for (i, (a, _, side)) in both.iter().enumerate() {
            assert!(
                !both[..i].iter().any(|(b, _, s)| b == a && s == side),
                "{a:?} twice"
            );
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
