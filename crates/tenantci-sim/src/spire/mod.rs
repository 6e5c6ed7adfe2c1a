//! The SPIRE stand-in (`tenantci sim --spire TRUST_DOMAIN`): a trust-domain CA that issues an
//! X509-SVID for each `ClusterStaticEntry` that exists in a tenant cluster, served over a
//! Workload API double (docs/simulator.md, "SPIRE stand-in").
//!
//! Attestation, honestly simplified: a SPIRE agent identifies the calling process (its Pod UID
//! and unix uid) and matches the entries' selectors. The simulator runs no Pods, so the
//! socket is the attestation: the entry `NAME` of cluster `C` is served on
//! `<state>/spire/C/NAME.sock` (created when the entry appears, removed when it goes), and
//! whoever connects there gets that entry's SVID. Selectors and the parent ID are stored and
//! shown, not evaluated.
//!
//! The stand-in follows each tenant store's changes (the same events a watch gets), so an SVID
//! is there as soon as the entry is created (real SPIRE takes seconds: tests must not rely on
//! the stand-in's speed for anything but their own progress). An entry whose SPIFFE ID is not
//! in the trust domain gets a socket that answers "no identity issued", as SPIRE refuses to
//! render it. `POST <admin>/rotate` issues every entry a new SVID (new key), pushed to open
//! streams: the rotation hook for tests.
//!
//! The SPIRE Server API double (`server_api`) mints SVIDs for admin workloads (entries with
//! `spec.admin: true`), as the dispatcher has VM tasks' SVIDs minted.

pub mod admin;
pub mod ca;
pub mod proto;
pub mod server_api;
pub mod workload_api;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::api::ApiServer;
use crate::api::registry::CLUSTER_STATIC_ENTRIES;
use crate::served::Served;
use ca::{IssuedSvid, TrustDomainCa};
use proto::{X509Svid, X509SvidResponse};
use server_api::{MintRecord, ServerApiDouble};
use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::{Error, Result};
use workload_api::Endpoint;

/// SPIRE's default X509-SVID lifetime, used when an entry sets no `x509SVIDTTL`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// Checks `--spire`'s value before anything is written.
pub fn validate_trust_domain(value: &str) -> Result<spiffe::TrustDomain> {
    tenantci_core::spiffe::id::trust_domain("--spire", value)
}

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
    pub cluster: String,
    pub name: String,
    pub spiffe_id: String,
    pub socket: PathBuf,
    /// The serial of the SVID served now (none: the ID is outside the trust domain).
    pub serial: Option<u64>,
}

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

    fn record_mint(&self, record: MintRecord) {
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

    fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// `<state>/spire.json`: what tests and the quickstart need to use the stand-in.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpireJson {
    pub trust_domain: String,
    /// The trust domain's bundle (PEM), for verifying SVIDs outside the Workload API.
    pub bundle_file: PathBuf,
    /// Entry `NAME` of cluster `C` is served at `<socketDir>/C/NAME.sock`.
    pub socket_dir: PathBuf,
    /// `POST <adminUrl>/rotate`; `GET <adminUrl>/entries`; `GET <adminUrl>/minted`.
    pub admin_url: String,
    /// The Server API double (`SVID/MintX509SVID`, SPIFFE mTLS): `127.0.0.1:PORT`.
    pub server_address: String,
    /// The SPIFFE ID the Server API double presents.
    pub server_id: String,
}

/// A running stand-in; drop or [`SpireHandle::shutdown`] stops it and removes its sockets.
pub struct SpireHandle {
    pub stand_in: Arc<StandIn>,
    pub json: SpireJson,
    watchers: Vec<JoinHandle<()>>,
    admin: Option<Served>,
    server: Option<ServerApiDouble>,
}

impl SpireHandle {
    pub async fn shutdown(mut self) {
        if let Some(a) = self.admin.take() {
            a.shutdown().await;
        }
        self.stop();
    }

    fn stop(&mut self) {
        self.server = None;
        for w in self.watchers.drain(..) {
            w.abort();
        }
        self.stand_in.clear();
    }
}

impl Drop for SpireHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the stand-in for `trust_domain` over the tenant apiservers `tenants`, its files
/// under `<state_dir>/spire/`, and writes `<state_dir>/spire.json` (0600).
pub async fn start(
    state_dir: &Path,
    trust_domain: &str,
    tenants: &[(String, Arc<ApiServer>)],
) -> Result<SpireHandle> {
    let td = validate_trust_domain(trust_domain)?;
    let dir = state_dir.join("spire");
    for (cluster, _) in tenants {
        let d = dir.join(cluster);
        fsutil::create_dir_all(&d, MODE_PRIVATE_DIR)
            .map_err(|e| Error::unwritable("the SPIRE stand-in's socket directory", &d, e))?;
    }
    let ca = TrustDomainCa::new(td.as_ref()).map_err(Error::external)?;
    let bundle_file = dir.join("bundle.pem");
    fsutil::write_atomic(&bundle_file, ca.bundle_pem().as_bytes(), 0o644)
        .map_err(|e| Error::unwritable("the SPIRE stand-in's bundle", &bundle_file, e))?;
    let stand_in = Arc::new(StandIn::new(ca, dir.clone()));
    // Entries that exist now (kept across a restart) are served before the ready line.
    for (cluster, api) in tenants {
        let (objects, _) = api.store.list(CLUSTER_STATIC_ENTRIES, None);
        stand_in.reconcile(cluster, &objects);
    }
    let watchers = tenants
        .iter()
        .map(|(cluster, api)| tokio::spawn(follow(stand_in.clone(), cluster.clone(), api.clone())))
        .collect();
    let (admin, admin_url) = admin::start(stand_in.clone()).await?;
    let server = server_api::start(stand_in.clone()).await?;
    let json = SpireJson {
        trust_domain: td.to_string(),
        bundle_file,
        socket_dir: dir,
        admin_url,
        server_address: server.address.clone(),
        server_id: server.server_id.clone(),
    };
    let path = state_dir.join("spire.json");
    let mut bytes = serde_json::to_vec_pretty(&json).expect("spire.json serializes");
    bytes.push(b'\n');
    fsutil::write_atomic(&path, &bytes, MODE_SECRET)
        .map_err(|e| Error::unwritable("the SPIRE stand-in's address file", &path, e))?;
    Ok(SpireHandle {
        stand_in,
        json,
        watchers,
        admin: Some(admin),
        server: Some(server),
    })
}

/// Reconciles `cluster` on every change of its ClusterStaticEntry objects.
async fn follow(stand_in: Arc<StandIn>, cluster: String, api: Arc<ApiServer>) {
    loop {
        let (objects, _, mut events) = api.store.snapshot_and_watch(CLUSTER_STATIC_ENTRIES, None);
        stand_in.reconcile(&cluster, &objects);
        loop {
            match events.recv().await {
                Ok(ev) if ev.resource == CLUSTER_STATIC_ENTRIES => {
                    let (objects, _) = api.store.list(CLUSTER_STATIC_ENTRIES, None);
                    stand_in.reconcile(&cluster, &objects);
                }
                Ok(_) => {}
                // Missed events: list again from the top.
                Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => return,
            }
        }
    }
}
