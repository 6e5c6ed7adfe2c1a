//! Phase one of `dispatch init` for executor identity: the tenant cluster serves SPIRE's
//! `ClusterStaticEntry` (spire.spiffe.io/v1alpha1, from spire-controller-manager's CRDs), the
//! resource `dispatch run` creates one of per executor Pod. Without it every entry create
//! would fail at run time, one task after another; init refuses instead, before anything is
//! written, applied or registered.
//!
//! [`served`] judges a discovery document (pure); [`check`] fetches it with the tenant-admin
//! client. Does not apply RBAC (`provision::access`) and does not look at SPIRE itself (its
//! server and agents are not reachable through the apiserver).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;

use crate::identity::entries;
use tenantci_core::{Error, Result};

/// The group/version `dispatch run` writes entries to.
pub const GROUP_VERSION: &str = entries::API_VERSION;
/// The plural of `ClusterStaticEntry`.
pub const RESOURCE: &str = entries::PLURAL;

/// Whether the discovery document of [`GROUP_VERSION`] (None: the group is not served at
/// all) lists [`RESOURCE`], cluster-scoped as spire-controller-manager defines it.
pub fn served(list: Option<&APIResourceList>) -> bool {
    list.is_some_and(|l| {
        l.resources
            .iter()
            .any(|r| r.name == RESOURCE && !r.namespaced)
    })
}

/// The refusal when it is not served: what is missing and what to install.
pub fn not_served(url: &str) -> Error {
    Error::bad_input(format!(
        "--spiffe-trust-domain turns executor identity on, but the tenant cluster at {url} does not serve {RESOURCE}.{GROUP_VERSION} (SPIRE's ClusterStaticEntry), so no executor could get its SVID"
    ))
    .hint("install SPIRE's spire-controller-manager with its CRDs in the tenant cluster (docs/runbooks/gitea-dispatcher.md, executor identity), or leave the --spiffe-* flags out")
}

/// Asks the apiserver's discovery; Ok when [`served`].
pub async fn check(admin: &kube::Client, url: &str) -> Result<()> {
    let list = match admin.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Some(list),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => {
            return Err(Error::external(format!(
                "cannot read the API discovery of {GROUP_VERSION} at {url}"
            ))
            .caused_by(e)
            .hint("is the tenant apiserver up? (`tenantci check-host`)"));
        }
    };
    match served(list.as_ref()) {
        true => Ok(()),
        false => Err(not_served(url)),
    }
}

/// The phase-one line.
pub fn detail(url: &str) -> String {
    format!("{url} serves {RESOURCE}.{GROUP_VERSION} (cluster-scoped)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn list(resources: &[(&str, bool)]) -> APIResourceList {
        APIResourceList {
            group_version: GROUP_VERSION.into(),
            resources: resources
                .iter()
                .map(|(name, namespaced)| APIResource {
                    name: name.to_string(),
                    namespaced: *namespaced,
                    kind: "ClusterStaticEntry".into(),
                    verbs: vec!["get".into(), "create".into()],
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn only_a_cluster_scoped_clusterstaticentries_counts() {
        assert!(served(Some(&list(&[
            ("clusterspiffeids", false),
            ("clusterstaticentries", false),
            ("clusterstaticentries/status", false),
        ]))));
        assert!(!served(None), "the group is not served");
        assert!(!served(Some(&list(&[("clusterspiffeids", false)]))));
        assert!(!served(Some(&list(&[("clusterstaticentries", true)]))));
        assert!(!served(Some(&list(&[(
            "clusterstaticentries/status",
            false
        )]))));
    }

    #[test]
    fn the_refusal_names_what_is_missing_and_what_to_install() {
        let e = not_served("https://127.0.0.1:6443");
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message()
                .contains("clusterstaticentries.spire.spiffe.io/v1alpha1")
        );
        assert!(e.message().contains("https://127.0.0.1:6443"));
        let hint = e.hint_text().unwrap();
        assert!(hint.contains("spire-controller-manager") && hint.contains("CRDs"));
        assert!(hint.contains("docs/runbooks/gitea-dispatcher.md"));
    }
}
