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
mod stand_in;
pub mod workload_api;

pub use stand_in::{DEFAULT_TTL, EntryView, MintRecord, StandIn, socket_path};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::api::ApiServer;
use crate::api::registry::CLUSTER_STATIC_ENTRIES;
use crate::served::Served;
use ca::TrustDomainCa;
use server_api::ServerApiDouble;
use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::{Error, Result};

/// Checks `--spire`'s value before anything is written.
pub fn validate_trust_domain(value: &str) -> Result<spiffe::TrustDomain> {
    tenantci_core::spiffe::id::trust_domain("--spire", value)
}

/// `<state>/spire.json`: what tests and the quickstart need to use the stand-in.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpireJson {
    /// The trust domain's name.
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
    /// The stand-in itself, for in-process inspection.
    pub stand_in: Arc<StandIn>,
    /// What `<state>/spire.json` holds.
    pub json: SpireJson,
    watchers: Vec<JoinHandle<()>>,
    admin: Option<Served>,
    server: Option<ServerApiDouble>,
}

impl SpireHandle {
    /// Stops the admin API, the Server API double and the followers, and removes the sockets.
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
