//! The dispatcher's RBAC in the tenant cluster: server-side applied with the tenant-admin
//! client (namespace first, each object skipped when the live one already matches), then
//! verified with the dispatcher's OWN credential through SelfSubjectAccessReviews, so the
//! check covers the certificate, the binding and the rules at once.
//! The checks are data (`must_allow`, `must_deny`); the reviews are the I/O.

use crate::steps::Outcome;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde::Serialize;

use crate::dispatch::manifests::RbacObjects;
use crate::tenant::apply::{Applied, apply as ssa};
use tenantci_core::{Error, Result};

/// One access to review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// Empty: cluster scope (all namespaces).
    pub namespace: String,
}

fn a(verb: &'static str, group: &'static str, resource: &'static str, ns: &str) -> Access {
    Access {
        verb,
        group,
        resource,
        namespace: ns.to_string(),
    }
}

/// What the runtime calls in its namespace: every verb of the Role.
pub fn must_allow(ns: &str) -> Vec<Access> {
    let mut v = Vec::new();
    for verb in ["get", "create", "update"] {
        v.push(a(verb, "coordination.k8s.io", "leases", ns));
    }
    for resource in ["pods", "secrets"] {
        for verb in ["get", "list", "watch", "create", "delete", "patch"] {
            v.push(a(verb, "", resource, ns));
        }
    }
    v
}

/// What the dispatcher must never be allowed.
pub fn must_deny() -> Vec<Access> {
    vec![
        a("get", "", "secrets", "kube-system"),
        a("list", "", "secrets", ""),
        a("create", "", "pods", "kube-system"),
        a("create", "rbac.authorization.k8s.io", "rolebindings", ""),
    ]
}

fn apply_error(kind: &str, name: &str, e: kube::Error) -> Error {
    tenantci_core::kube_client::api_error(
        e,
        &format!("apply {kind} `{name}`"),
        "the cluster's tenant-admin.kubeconfig must be cluster admin; check the state dir",
    )
}

fn name_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

/// Applies the namespace, then the ServiceAccount, Role and RoleBinding in it.
pub async fn apply(admin: &kube::Client, o: &RbacObjects, dry_run: bool) -> Result<Vec<Applied>> {
    let ns = name_of(&o.namespace.metadata);
    let first = ssa(&Api::<Namespace>::all(admin.clone()), &o.namespace, dry_run)
        .await
        .map_err(|e| apply_error("Namespace", &ns, e))?;
    // A dry run cannot create the namespace, and the apiserver refuses namespaced objects in
    // a namespace that does not exist: report them as what a real run would do.
    let ns_missing = dry_run && first.outcome == Outcome::Created;
    let mut out = vec![first];
    macro_rules! namespaced {
        ($t:ty, $obj:expr, $kind:literal) => {{
            let name = name_of(&$obj.metadata);
            if ns_missing {
                out.push(Applied {
                    kind: $kind.into(),
                    name,
                    outcome: Outcome::Created,
                });
            } else {
                let api = Api::<$t>::namespaced(admin.clone(), &ns);
                out.push(
                    ssa(&api, &$obj, dry_run)
                        .await
                        .map_err(|e| apply_error($kind, &name, e))?,
                );
            }
        }};
    }
    namespaced!(ServiceAccount, o.service_account, "ServiceAccount");
    namespaced!(Role, o.role, "Role");
    namespaced!(RoleBinding, o.binding, "RoleBinding");
    Ok(out)
}

fn review(access: &Access) -> SelfSubjectAccessReview {
    SelfSubjectAccessReview {
        metadata: Default::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(access.verb.into()),
                group: Some(access.group.into()),
                resource: Some(access.resource.into()),
                namespace: (!access.namespace.is_empty()).then(|| access.namespace.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        status: None,
    }
}

fn describe(x: &Access) -> String {
    format!(
        "{} {}{} in {}",
        x.verb,
        x.resource,
        if x.group.is_empty() {
            String::new()
        } else {
            format!(".{}", x.group)
        },
        if x.namespace.is_empty() {
            "all namespaces".to_string()
        } else {
            format!("namespace {}", x.namespace)
        }
    )
}

/// Reviews every access as the dispatcher itself; returns how many reviews ran.
pub async fn verify(dispatcher: &kube::Client, namespace: &str) -> Result<usize> {
    let api: Api<SelfSubjectAccessReview> = Api::all(dispatcher.clone());
    let checks: Vec<(Access, bool)> = must_allow(namespace)
        .into_iter()
        .map(|x| (x, true))
        .chain(must_deny().into_iter().map(|x| (x, false)))
        .collect();
    for (access, expected) in &checks {
        let answer = api
            .create(&PostParams::default(), &review(access))
            .await
            .map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 401 => Error::check_failed(
                    "the tenant apiserver rejected the dispatcher's credential (401)",
                )
                .hint("the credential in <out dir>/kube is not from this cluster's ClientCA: delete that directory and re-run `tenantci dispatch init`"),
                _ => Error::external("the tenant apiserver failed a SelfSubjectAccessReview").caused_by(e),
            })?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if allowed != *expected {
            return Err(if *expected {
                Error::check_failed(format!(
                    "the dispatcher's credential may not {}, which `dispatch run` needs",
                    describe(access)
                ))
                .hint("the RoleBinding `tenantci-dispatcher` must name the User `tenantci-dispatcher`; re-run init, or compare with manifests/dispatch/rbac.yaml")
            } else {
                Error::check_failed(format!(
                    "the dispatcher's credential may {}, which it must never be allowed",
                    describe(access)
                ))
                .hint("remove the broader binding that grants it to user `tenantci-dispatcher` or group `tenantci:gitea-dispatchers`")
            });
        }
    }
    Ok(checks.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_cover_the_role_and_deny_other_namespaces() {
        let allow = must_allow("dr");
        assert!(allow.contains(&a("create", "", "pods", "dr")));
        assert!(allow.contains(&a("create", "", "secrets", "dr")));
        assert!(allow.contains(&a("create", "coordination.k8s.io", "leases", "dr")));
        assert!(must_deny().contains(&a("get", "", "secrets", "kube-system")));
        assert_eq!(
            describe(&a("get", "", "secrets", "")),
            "get secrets in all namespaces"
        );
    }
}
