//! Which cluster `dispatch init` sets the dispatcher up in, and how it gets there.
//!
//! Two paths. The gateway path (`--state-dir`, `--cluster`) resolves a tenant cluster through
//! `gateway.json`; the dispatcher gets its own client certificate, minted from the cluster's
//! ClientCA. The kubeconfig path (`--kubeconfig`) works on any cluster: the admin kubeconfig
//! only applies the RBAC and checks access, and the dispatcher runs in the cluster as the
//! `tenantci-dispatcher` ServiceAccount (in-cluster config): no credential is minted, so none
//! has to be renewed.

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;

use tenantci_core::gateway::resolve::ResolvedCluster;
use tenantci_core::{Error, Result};

/// How init reaches the cluster (the operator's choice of flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAccess {
    /// `--state-dir`: the gateway's state directory resolves `--cluster`.
    Gateway {
        /// The gateway's state directory.
        state_dir: PathBuf,
    },
    /// `--kubeconfig`: an administrator's kubeconfig of any cluster.
    Kubeconfig(PathBuf),
}

/// The cluster phase one found.
#[derive(Debug, Clone)]
pub enum Target {
    /// Resolved through the gateway: its URL, ClientCA and tenant-admin kubeconfig.
    Gateway(ResolvedCluster),
    /// Reached with `--kubeconfig`.
    Kubeconfig {
        /// `--cluster`, as the cluster is called in the output.
        name: String,
        /// The apiserver's URL, from the kubeconfig's current context.
        url: String,
        /// The administrator's kubeconfig.
        file: PathBuf,
    },
}

impl Target {
    /// The cluster's name.
    pub fn name(&self) -> &str {
        match self {
            Target::Gateway(r) => &r.name,
            Target::Kubeconfig { name, .. } => name,
        }
    }

    /// Its apiserver's URL.
    pub fn url(&self) -> &str {
        match self {
            Target::Gateway(r) => &r.url,
            Target::Kubeconfig { url, .. } => url,
        }
    }

    /// The kubeconfig that applies the RBAC.
    pub fn admin_kubeconfig(&self) -> &Path {
        match self {
            Target::Gateway(r) => &r.tenant_admin_kubeconfig,
            Target::Kubeconfig { file, .. } => file,
        }
    }

    /// The dispatcher runs as its ServiceAccount (no minted credential).
    pub fn in_cluster(&self) -> bool {
        matches!(self, Target::Kubeconfig { .. })
    }
}

/// The user name the apiserver gives the dispatcher's ServiceAccount in `namespace`.
pub fn service_account_user(namespace: &str) -> String {
    format!(
        "system:serviceaccount:{namespace}:{}",
        crate::provision::access::NAME
    )
}

/// The groups every ServiceAccount token in `namespace` carries.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]
}

/// The current context's cluster entry of the kubeconfig at `file`: its name (the cluster
/// name init uses when `--cluster` is not given) and server URL.
pub fn current_cluster(file: &Path) -> Result<(String, String)> {
    tenantci_core::input::read_bytes("the kubeconfig", file, tenantci_core::input::MAX_CONFIG)?;
    let kc = Kubeconfig::read_from(file).map_err(|e| {
        Error::bad_input(format!("cannot read the kubeconfig `{}`", file.display()))
            .caused_by(e)
            .hint("pass --kubeconfig naming the kubeconfig of a cluster administrator")
    })?;
    current_of(&kc).ok_or_else(|| {
        Error::bad_input(format!(
            "the kubeconfig `{}` has no current context naming a cluster with a server",
            file.display()
        ))
        .hint("set one with `kubectl config use-context NAME --kubeconfig FILE`")
    })
}

fn current_of(kc: &Kubeconfig) -> Option<(String, String)> {
    let current = kc.current_context.as_deref()?;
    let ctx = kc.contexts.iter().find(|c| c.name == current)?;
    let cluster_name = ctx.context.as_ref()?.cluster.clone();
    let cluster = kc.clusters.iter().find(|c| c.name == cluster_name)?;
    let server = cluster.cluster.as_ref()?.server.clone()?;
    Some((cluster_name, server))
}

/// The cluster name init uses: `--cluster`, else the kubeconfig's cluster entry's name,
/// which must then be a DNS label (it names the runner and SPIRE's cluster).
pub fn cluster_name(flag: Option<&str>, access: &ClusterAccess) -> Result<String> {
    match (flag, access) {
        (Some(name), _) => Ok(name.to_string()),
        (None, ClusterAccess::Gateway { .. }) => Err(Error::bad_input(
            "--state-dir is given without --cluster",
        )
        .hint("pass --cluster NAME, the tenant cluster's name in the gateway's state directory")),
        (None, ClusterAccess::Kubeconfig(file)) => {
            let (name, _) = current_cluster(file)?;
            tenantci_core::gateway::layout::validate_cluster_name(&name).map_err(|_| {
                Error::bad_input(format!(
                    "the kubeconfig `{}` names its cluster `{}`, which is not a DNS label",
                    file.display(),
                    tenantci_core::input::shown(&name)
                ))
                .hint("pass --cluster NAME (1-63 lower-case letters, digits and `-`): it names the runner at Gitea")
            })?;
            Ok(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KC: &str = r#"
apiVersion: v1
kind: Config
current-context: admin@ci
contexts:
- name: admin@ci
  context: {cluster: ci, user: admin}
- name: other
  context: {cluster: Bad_Name, user: admin}
clusters:
- name: ci
  cluster: {server: "https://10.0.0.1:6443"}
- name: Bad_Name
  cluster: {server: "https://10.0.0.2:6443"}
users:
- name: admin
  user: {token: x}
"#;

    #[test]
    fn the_cluster_name_comes_from_the_flag_or_the_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kc");
        std::fs::write(&file, KC).unwrap();
        let access = ClusterAccess::Kubeconfig(file.clone());
        assert_eq!(cluster_name(None, &access).unwrap(), "ci");
        assert_eq!(cluster_name(Some("prod"), &access).unwrap(), "prod");
        assert_eq!(
            current_cluster(&file).unwrap(),
            ("ci".into(), "https://10.0.0.1:6443".into())
        );
        std::fs::write(
            &file,
            KC.replace("current-context: admin@ci", "current-context: other"),
        )
        .unwrap();
        let e = cluster_name(None, &access).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("`Bad_Name`"), "{}", e.message());
        assert!(e.hint_text().unwrap().contains("--cluster"));
        let gateway = ClusterAccess::Gateway {
            state_dir: "/var/lib/x".into(),
        };
        assert!(
            cluster_name(None, &gateway)
                .unwrap_err()
                .message()
                .contains("--cluster")
        );
    }

    #[test]
    fn the_service_account_identity() {
        assert_eq!(
            service_account_user("ci"),
            "system:serviceaccount:ci:tenantci-dispatcher"
        );
        assert!(service_account_groups("ci").contains(&"system:serviceaccounts:ci".to_string()));
    }
}
