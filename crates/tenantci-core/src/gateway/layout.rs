//! The state-directory layout of docs/state-dir.md, as paths. This is a contract shared with the
//! gateway, the simulator and every command that takes `--state-dir`: change nothing here
//! without changing docs/state-dir.md.
//!
//! ```text
//! <state>/gateway.json
//! <state>/admin.kubeconfig
//! <state>/clusters/<name>/pki/serving-ca.crt
//! <state>/clusters/<name>/pki/serving-ca.key     (tenantci addition: the simulator signs with it)
//! <state>/clusters/<name>/pki/client-ca.crt
//! <state>/clusters/<name>/pki/client-ca.key      0600
//! <state>/clusters/<name>/tenant-admin.kubeconfig
//! <state>/clusters/<name>/node-image.json
//! ```

use std::path::{Path, PathBuf};

/// A gateway state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The layout under `root`; nothing is read or created.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir { root: root.into() }
    }

    /// The state directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<state>/gateway.json`, the gateway's description of itself (`adminKubeconfig`, `stateDir`,
    /// ...).
    pub fn gateway_json(&self) -> PathBuf {
        self.root.join("gateway.json")
    }

    /// `<state>/admin.kubeconfig`, the gateway admin's kubeconfig (lists `Cluster` objects).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.root.join("admin.kubeconfig")
    }

    /// `<state>/clusters`, one directory per tenant cluster.
    pub fn clusters_dir(&self) -> PathBuf {
        self.root.join("clusters")
    }

    /// The paths of tenant cluster `name` (not checked: see [`validate_cluster_name`]).
    pub fn cluster(&self, name: &str) -> ClusterPaths {
        ClusterPaths::new(self.clusters_dir().join(name))
    }

    /// Names of the clusters that have a directory under `clusters/`, sorted.
    pub fn cluster_names(&self) -> std::io::Result<Vec<String>> {
        let dir = self.clusters_dir();
        if !dir.exists() {
            return Ok(Vec::new());
        }
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// The files of one tenant cluster in the state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPaths {
    /// `<state>/clusters/<name>`.
    pub dir: PathBuf,
    /// `<name>/pki`, the cluster's CA files.
    pub pki_dir: PathBuf,
    /// `pki/serving-ca.crt`: the CA that signed the tenant apiserver's serving certificate.
    pub serving_ca_cert: PathBuf,
    /// `pki/serving-ca.key`: that CA's key, 0600 (a tenantci addition; the simulator signs with
    /// it).
    pub serving_ca_key: PathBuf,
    /// `pki/client-ca.crt`: the ClientCA, which signs tenant credentials.
    pub client_ca_cert: PathBuf,
    /// `pki/client-ca.key`: the ClientCA's key (PKCS#8, SEC1 or PKCS#1 PEM), 0600.
    pub client_ca_key: PathBuf,
    /// `<name>/tenant-admin.kubeconfig`: the tenant cluster's admin, which applies RBAC.
    pub tenant_admin_kubeconfig: PathBuf,
    /// `<name>/node-image.json`: the guest image's size (`vcpu`, `memMiB`, `rootfsMiB`), a tenantci
    /// addition.
    pub node_image: PathBuf,
}

impl ClusterPaths {
    fn new(dir: PathBuf) -> Self {
        let pki_dir = dir.join("pki");
        ClusterPaths {
            serving_ca_cert: pki_dir.join("serving-ca.crt"),
            serving_ca_key: pki_dir.join("serving-ca.key"),
            client_ca_cert: pki_dir.join("client-ca.crt"),
            client_ca_key: pki_dir.join("client-ca.key"),
            tenant_admin_kubeconfig: dir.join("tenant-admin.kubeconfig"),
            node_image: dir.join("node-image.json"),
            pki_dir,
            dir,
        }
    }
}

/// Cluster names become directory names and DNS labels: refuse anything else early.
pub fn validate_cluster_name(name: &str) -> crate::Result<()> {
    let ok = crate::dns::is_label(name);
    if ok {
        Ok(())
    } else {
        Err(crate::Error::bad_input(format!(
            "cluster name `{}` is not a DNS label",
            crate::input::shown(name)
        ))
        .hint("use 1-63 lower-case letters, digits and `-`, starting and ending with a letter or digit, e.g. `ci`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_contract() {
        let s = StateDir::new("/var/lib/socialweb");
        let c = s.cluster("ci");
        assert_eq!(
            s.gateway_json(),
            Path::new("/var/lib/socialweb/gateway.json")
        );
        assert_eq!(
            s.admin_kubeconfig(),
            Path::new("/var/lib/socialweb/admin.kubeconfig")
        );
        assert_eq!(
            c.client_ca_cert,
            Path::new("/var/lib/socialweb/clusters/ci/pki/client-ca.crt")
        );
        assert_eq!(
            c.client_ca_key,
            Path::new("/var/lib/socialweb/clusters/ci/pki/client-ca.key")
        );
        assert_eq!(
            c.serving_ca_cert,
            Path::new("/var/lib/socialweb/clusters/ci/pki/serving-ca.crt")
        );
        assert_eq!(
            c.tenant_admin_kubeconfig,
            Path::new("/var/lib/socialweb/clusters/ci/tenant-admin.kubeconfig")
        );
        assert_eq!(
            c.node_image,
            Path::new("/var/lib/socialweb/clusters/ci/node-image.json")
        );
    }

    #[test]
    fn cluster_names_are_dns_labels() {
        for good in ["ci", "team-a", "c1"] {
            assert!(validate_cluster_name(good).is_ok(), "{good}");
        }
        for bad in ["", "CI", "-a", "a-", "a/b", "..", "a_b", &"a".repeat(64)] {
            assert!(validate_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
