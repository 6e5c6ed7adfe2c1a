//! The stand-in's state: the trust-domain CA, the entries served (each with its socket and
//! current SVID), the admin entries that may mint, and the mints recorded. [`StandIn::reconcile`]
//! makes one cluster's sockets match its `ClusterStaticEntry` objects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::ca::{IssuedSvid, TrustDomainCa};
use super::proto::{X509Svid, X509SvidResponse};
use super::workload_api::{self, Endpoint};

/// SPIRE's default X509-SVID lifetime, used when an entry sets no `x509SVIDTTL`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// The socket of entry `name` in `cluster` under the stand-in's directory.
pub fn socket_path(dir: &Path, cluster: &str, name: &str) -> PathBuf {
    dir.join(cluster).join(format!("{name}.sock"))
}

/// One entry as served: what its SVID was issued for, and its socket.
struct ServedEntry {
    spiffe_id: String,
    ttl: Duration,
    issued: Option<IssuedSvid>,
    endpoint: Endpoint,
}

/// What the admin API and tests see of an entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// The tenant cluster holding the entry.
    pub cluster: String,
    /// The entry's (`ClusterStaticEntry`'s) name.
    pub name: String,
    /// The SPIFFE ID it asks for.
    pub spiffe_id: String,
    /// Its socket.
    pub socket: PathBuf,
    /// The serial of the SVID served now (none: the ID is outside the trust domain).
    pub serial: Option<u64>,
}

/// The SPIRE stand-in's state: its CA, the entries it serves, the admin entries, the mints.
pub struct StandIn {
    ca: TrustDomainCa,
    dir: PathBuf,
    entries: Mutex<BTreeMap<(String, String), ServedEntry>>,
    /// The SPIFFE IDs of admin entries (`spec.admin: true`) by (cluster, name): who may mint.
    admins: Mutex<BTreeMap<(String, String), String>>,
    minted: Mutex<Vec<MintRecord>>,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("trust_domain", &self.ca.trust_domain())
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn response(ca: &TrustDomainCa, svid: &IssuedSvid) -> X509SvidResponse {
    X509SvidResponse {
        svids: vec![X509Svid {
            spiffe_id: svid.spiffe_id.clone(),
            x509_svid: svid.cert_der.clone(),
            x509_svid_key: svid.key_pkcs8_der.clone(),
            bundle: ca.bundle_der().to_vec(),
            hint: String::new(),
        }],
        ..Default::default()
    }
}

/// The entry's SPIFFE ID and lifetime, from the object's spec.
fn wanted(obj: &Value) -> (String, Duration) {
    let spec = &obj["spec"];
    let id = spec["spiffeID"].as_str().unwrap_or("").to_string();
    let ttl = spec["x509SVIDTTL"]
        .as_str()
        .and_then(|t| tenantci_core::duration::parse(t).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_TTL);
    (id, ttl)
}

impl StandIn {
    /// A stand-in with no entries yet, its sockets under `dir`.
    pub fn new(ca: TrustDomainCa, dir: PathBuf) -> Self {
        StandIn {
            ca,
            dir,
            entries: Mutex::new(BTreeMap::new()),
            admins: Mutex::new(BTreeMap::new()),
            minted: Mutex::new(Vec::new()),
        }
    }

    /// The trust domain's CA.
    pub fn ca(&self) -> &TrustDomainCa {
        &self.ca
    }

    /// Issues for `id` when SPIRE would (an ID of this trust domain), else nothing.
    fn issue(&self, id: &str, ttl: Duration) -> Option<IssuedSvid> {
        let td = spiffe::TrustDomain::new(self.ca.trust_domain()).ok()?;
        match spiffe::SpiffeId::new(id) {
            Ok(parsed) if parsed.is_member_of(&td) => match self.ca.issue(id, ttl) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(spiffe_id = id, error = %e, "SPIRE stand-in: cannot issue");
                    None
                }
            },
            _ => {
                tracing::warn!(
                    spiffe_id = id,
                    trust_domain = self.ca.trust_domain(),
                    "SPIRE stand-in: entry's SPIFFE ID is not of the trust domain; no SVID"
                );
                None
            }
        }
    }

    fn current(&self, issued: &Option<IssuedSvid>) -> workload_api::Current {
        issued.as_ref().map(|s| Arc::new(response(&self.ca, s)))
    }

    /// Makes the sockets of `cluster` match its entries: new ones bound and issued, changed
    /// ones (ID or TTL) issued again, removed ones closed.
    pub fn reconcile(&self, cluster: &str, objects: &[Arc<Value>]) {
        self.reconcile_admins(cluster, objects);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = Vec::new();
        for obj in objects {
            let Some(name) = obj["metadata"]["name"].as_str() else {
                continue;
            };
            let key = (cluster.to_string(), name.to_string());
            seen.push(key.clone());
            let (id, ttl) = wanted(obj);
            if let Some(e) = entries.get_mut(&key) {
                if e.spiffe_id != id || e.ttl != ttl {
                    e.issued = self.issue(&id, ttl);
                    e.spiffe_id = id;
                    e.ttl = ttl;
                    e.endpoint.set(self.current(&e.issued));
                }
                continue;
            }
            let path = socket_path(&self.dir, cluster, name);
            let issued = self.issue(&id, ttl);
            match Endpoint::bind(&path, self.current(&issued)) {
                Ok(endpoint) => {
                    tracing::info!(cluster, entry = name, spiffe_id = %id, socket = %path.display(), "SPIRE stand-in: entry served");
                    entries.insert(
                        key,
                        ServedEntry {
                            spiffe_id: id,
                            ttl,
                            issued,
                            endpoint,
                        },
                    );
                }
                Err(e) => {
                    // A unix socket path is at most 107 bytes: a long state dir and Pod name
                    // can exceed it.
                    tracing::warn!(socket = %path.display(), error = %e, "SPIRE stand-in: cannot listen for the entry");
                }
            }
        }
        entries.retain(|key, _| key.0 != cluster || seen.contains(key));
    }

    /// Records which entries of `cluster` are admin: SPIRE lets their workloads call the
    /// Server API (here: mint).
    fn reconcile_admins(&self, cluster: &str, objects: &[Arc<Value>]) {
        let mut admins = self.admins.lock().unwrap_or_else(|p| p.into_inner());
        admins.retain(|key, _| key.0 != cluster);
        for obj in objects {
            let (Some(name), Some(id), Some(true)) = (
                obj["metadata"]["name"].as_str(),
                obj["spec"]["spiffeID"].as_str(),
                obj["spec"]["admin"].as_bool(),
            ) else {
                continue;
            };
            admins.insert((cluster.to_string(), name.to_string()), id.to_string());
        }
    }

    /// Whether `spiffe_id` is the ID of an admin entry in a followed cluster.
    pub fn is_admin(&self, spiffe_id: &str) -> bool {
        let admins = self.admins.lock().unwrap_or_else(|p| p.into_inner());
        admins.values().any(|id| id == spiffe_id)
    }

    pub(super) fn record_mint(&self, record: MintRecord) {
        self.minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }

    /// Every SVID minted through the Server API double, in mint order.
    pub fn minted(&self) -> Vec<MintRecord> {
        self.minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Issues every served entry a new SVID and pushes it; returns the entries after.
    pub fn rotate(&self) -> Vec<EntryView> {
        {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            for e in entries.values_mut() {
                if e.issued.is_some() {
                    e.issued = self.issue(&e.spiffe_id, e.ttl);
                    e.endpoint.set(self.current(&e.issued));
                }
            }
        }
        self.entries()
    }

    /// Every entry served, by (cluster, name).
    pub fn entries(&self) -> Vec<EntryView> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .map(|((cluster, name), e)| EntryView {
                cluster: cluster.clone(),
                name: name.clone(),
                spiffe_id: e.spiffe_id.clone(),
                socket: e.endpoint.path().to_path_buf(),
                serial: e.issued.as_ref().map(|s| s.serial),
            })
            .collect()
    }

    pub(super) fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// One mint, as `GET <admin>/minted` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MintRecord {
    /// The SPIFFE ID minted.
    pub spiffe_id: String,
    /// The SVID's serial number.
    pub serial: u64,
    /// The SPIFFE ID of the admin workload that asked.
    pub caller_id: String,
}
