//! The simulator's SPIRE stand-in (`tenantci sim --spire TRUST_DOMAIN`) as tests use it:
//! where it is (`<state>/spire.json`), each entry's Workload API socket, its admin API
//! (entries served, rotation, SVIDs minted), its Server API double's address and SPIFFE ID,
//! and ClusterStaticEntry manifests for kubectl.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::wait::eventually;

/// The stand-in, as `spire.json` describes it.
#[derive(Debug, Clone)]
pub struct Spire {
    /// The trust domain the stand-in serves (`--spire TRUST_DOMAIN`).
    pub trust_domain: String,
    /// The trust domain's CA bundle, PEM.
    pub bundle_file: PathBuf,
    /// The directory of the entries' Workload API sockets, `<cluster>/<name>.sock`
    /// ([`Spire::endpoint`]).
    pub socket_dir: PathBuf,
    /// The stand-in's admin API base URL (entries, rotation, minted SVIDs).
    pub admin_url: String,
    /// The Server API double, `127.0.0.1:PORT` (SPIFFE mTLS, MintX509SVID).
    pub server_address: String,
    /// The SPIFFE ID the Server API double presents.
    pub server_id: String,
}

impl Spire {
    /// Reads `<state_dir>/spire.json`.
    pub fn from_state_dir(state_dir: &Path) -> Self {
        let path = state_dir.join("spire.json");
        let doc: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let field = |k: &str| doc[k].as_str().unwrap().to_string();
        Spire {
            trust_domain: field("trustDomain"),
            bundle_file: PathBuf::from(field("bundleFile")),
            socket_dir: PathBuf::from(field("socketDir")),
            admin_url: field("adminUrl"),
            server_address: field("serverAddress"),
            server_id: field("serverId"),
        }
    }

    /// The Workload API endpoint of entry `name` in `cluster`, as `SPIFFE_ENDPOINT_SOCKET` names it.
    pub fn endpoint(&self, cluster: &str, name: &str) -> String {
        format!(
            "unix://{}",
            self.socket_dir
                .join(cluster)
                .join(format!("{name}.sock"))
                .display()
        )
    }

    /// The entries served now (`cluster`, `name`, `spiffeId`, `socket`, `serial`).
    pub async fn entries(&self, http: &reqwest::Client) -> Vec<Value> {
        let resp = http
            .get(format!("{}/entries", self.admin_url))
            .send()
            .await
            .expect("the SPIRE stand-in's admin API");
        assert!(resp.status().is_success(), "entries: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// The entry `name` of `cluster` once the stand-in serves an SVID for it.
    pub async fn served(&self, http: &reqwest::Client, cluster: &str, name: &str) -> Value {
        eventually(
            &format!("the SPIRE stand-in to serve {cluster}/{name}"),
            || async {
                self.entries(http)
                    .await
                    .into_iter()
                    .find(|e| e["cluster"] == cluster && e["name"] == name && e["serial"].is_u64())
            },
        )
        .await
    }

    /// The SVIDs the Server API double minted, in order (`spiffeId`, `serial`, `callerId`).
    pub async fn minted(&self, http: &reqwest::Client) -> Vec<Value> {
        let resp = http
            .get(format!("{}/minted", self.admin_url))
            .send()
            .await
            .expect("the SPIRE stand-in's admin API");
        assert!(resp.status().is_success(), "minted: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// Issues every entry a new SVID; the entries after.
    pub async fn rotate(&self, http: &reqwest::Client) -> Vec<Value> {
        let resp = http
            .post(format!("{}/rotate", self.admin_url))
            .send()
            .await
            .expect("the SPIRE stand-in's admin API");
        assert!(resp.status().is_success(), "rotate: {}", resp.status());
        resp.json().await.unwrap()
    }
}

/// A ClusterStaticEntry as the dispatcher will write it: the Pod's name, the task's SPIFFE ID,
/// the node's agent as parent, the Pod UID and uid 2000 as selectors.
pub fn entry_yaml(name: &str, spiffe_id: &str, parent_id: &str, pod_uid: &str) -> String {
    format!(
        "apiVersion: spire.spiffe.io/v1alpha1
kind: ClusterStaticEntry
metadata:
  name: {name}
spec:
  spiffeID: {spiffe_id}
  parentID: {parent_id}
  selectors:
    - k8s:pod-uid:{pod_uid}
    - unix:uid:2000
  x509SVIDTTL: 1h
"
    )
}

/// [`entry_yaml`] for an admin workload (`admin: true`): one the SPIRE server lets call its
/// Server API, as the dispatcher that mints VM tasks' SVIDs.
pub fn admin_entry_yaml(name: &str, spiffe_id: &str, parent_id: &str, pod_uid: &str) -> String {
    format!(
        "{}  admin: true\n",
        entry_yaml(name, spiffe_id, parent_id, pod_uid)
    )
}
