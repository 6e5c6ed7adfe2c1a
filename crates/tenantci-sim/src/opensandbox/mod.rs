//! An OpenSandbox double: the Lifecycle API subset docs/simulator.md lists, over plain HTTP
//! on loopback, for the VM backend's tests and the demo. API-key auth, POST 202 Pending then
//! Running after a boot delay, GET, list with `state` and `metadata` filters and pages,
//! metadata merge patches, renew-expiration, DELETE 204 then 404, the label rules and
//! `{code, message}` errors (`sandboxes` keeps the rules, `routes` the HTTP).
//!
//! Not kept: pause/resume, endpoints, snapshots, volumes, network policy; nothing runs inside
//! a sandbox (a test plays its executor from the admin view). Never used in production paths.

pub mod routes;
pub mod sandboxes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::TcpListener;

use crate::served::Served;
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::{Error, Result};

use sandboxes::Sandboxes;

/// The double's state; [`OpenSandboxDouble::start`] serves it.
pub struct OpenSandboxDouble {
    api_key: String,
    boot: Duration,
    sandboxes: Mutex<Sandboxes>,
    /// An injected outage: every API call (of these methods; none: of every method) answers
    /// this status until the instant.
    outage: Mutex<Option<Outage>>,
    /// API calls by route (`GET /sandboxes`, `POST /sandboxes/{id}/renew-expiration`, ...;
    /// the `/v1` prefix dropped): what a benchmark reads as a client's cost.
    calls: Mutex<BTreeMap<String, u64>>,
    /// Sandboxes returned by list calls, every page counted.
    listed: AtomicU64,
    /// TCP connections accepted (by the server [`OpenSandboxDouble::start`] runs).
    connections: Arc<AtomicU64>,
}

/// A running double. Dropping it without [`OpenSandboxHandle::shutdown`] aborts the server.
pub struct OpenSandboxHandle {
    /// The double's URL (`http://ADDR`).
    pub base_url: String,
    /// The key every API call must present.
    pub api_key: String,
    /// The double itself, for in-process inspection.
    pub double: Arc<OpenSandboxDouble>,
    served: Served,
}

/// An injected outage (`POST /admin/faults`).
struct Outage {
    status: u16,
    until: Instant,
    /// Upper-case HTTP methods it hits; empty: every one.
    methods: Vec<String>,
    /// Answered instead of the API's JSON error, as `text/html` (a proxy in front: an error
    /// page, or an empty body).
    body: Option<String>,
}

/// What an outage answers: its status, and a body that is not the API's JSON when set.
pub(crate) struct Fault {
    pub status: u16,
    pub body: Option<String>,
}

impl OpenSandboxDouble {
    /// A double whose sandboxes stay Pending for `boot`, with a fresh random API key.
    pub fn new(boot: Duration) -> Self {
        OpenSandboxDouble {
            api_key: format!(
                "{:032x}{:032x}",
                rand::random::<u128>(),
                rand::random::<u128>()
            ),
            boot,
            sandboxes: Mutex::new(Sandboxes::default()),
            outage: Mutex::new(None),
            calls: Mutex::new(BTreeMap::new()),
            listed: AtomicU64::new(0),
            connections: Arc::default(),
        }
    }

    /// Serves a new double (sandboxes Pending for `boot`) on `listen` (port 0: any free port).
    pub async fn start(listen: SocketAddr, boot: Duration) -> Result<OpenSandboxHandle> {
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            Error::external(format!(
                "cannot listen on {listen} for the OpenSandbox double: {e}"
            ))
            .hint("pick a free port, or port 0 for any")
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::external(format!("cannot read the listen address: {e}")))?;
        let double = Arc::new(OpenSandboxDouble::new(boot));
        let app = routes::router(double.clone());
        let served = Served::counting(
            listener,
            app,
            "the OpenSandbox double",
            double.connections.clone(),
        );
        Ok(OpenSandboxHandle {
            base_url: format!("http://{addr}"),
            api_key: double.api_key.clone(),
            double,
            served,
        })
    }

    /// The sandboxes, locked, for a test to read or play their executor.
    pub fn sandboxes(&self) -> MutexGuard<'_, Sandboxes> {
        self.sandboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What an API call with `method` answers now, if an outage is on for it.
    fn outage(&self, method: &str) -> Option<Fault> {
        let mut o = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        match &*o {
            Some(out) if Instant::now() >= out.until => {
                *o = None;
                None
            }
            Some(out) if out.methods.is_empty() || out.methods.iter().any(|m| m == method) => {
                Some(Fault {
                    status: out.status,
                    body: out.body.clone(),
                })
            }
            _ => None,
        }
    }

    /// Every API call answers `status` for `for_` from now (zero ends an outage); with
    /// `methods`, only calls of those methods (`POST`: creates fail, the rest works).
    /// `body`: answered as `text/html` instead of the API's JSON error.
    pub fn set_outage(
        &self,
        status: u16,
        for_: Duration,
        methods: Vec<String>,
        body: Option<String>,
    ) {
        *self.outage.lock().unwrap_or_else(|p| p.into_inner()) = Some(Outage {
            status,
            until: Instant::now() + for_,
            methods,
            body,
        });
    }

    /// Counts an API call to `route` (its template, as the router matched it).
    fn count_request(&self, method: &str, route: &str) {
        let route = route.strip_prefix("/v1").unwrap_or(route);
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        *calls.entry(format!("{method} {route}")).or_default() += 1;
    }

    fn count_listed(&self, n: usize) {
        self.listed.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// API calls received (health and admin calls not counted).
    pub fn requests(&self) -> u64 {
        self.calls().values().sum()
    }

    /// API calls received, by method and route template.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sandboxes returned by list calls so far.
    pub fn listed(&self) -> u64 {
        self.listed.load(Ordering::Relaxed)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl OpenSandboxHandle {
    /// Stops serving (`Served::shutdown`).
    pub async fn shutdown(self) {
        self.served.shutdown().await;
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OpenSandboxJson<'a> {
    url: &'a str,
    admin_url: String,
    api_key_file: &'a Path,
}

/// Writes the API key to `<state_dir>/opensandbox-api-key` (what `dispatch init
/// --opensandbox-api-key-file` reads) and `<state_dir>/opensandbox.json` (`url`, `adminUrl`,
/// `apiKeyFile`), both 0600; returns the JSON file's path.
pub fn write_opensandbox_json(state_dir: &Path, handle: &OpenSandboxHandle) -> Result<PathBuf> {
    let key_file = state_dir.join("opensandbox-api-key");
    fsutil::write_atomic(
        &key_file,
        format!("{}\n", handle.api_key).as_bytes(),
        MODE_SECRET,
    )
    .map_err(|e| Error::unwritable("the OpenSandbox double's API key file", &key_file, e))?;
    let path = state_dir.join("opensandbox.json");
    let doc = OpenSandboxJson {
        url: &handle.base_url,
        admin_url: format!("{}/admin", handle.base_url),
        api_key_file: &key_file,
    };
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("opensandbox.json serializes");
    bytes.push(b'\n');
    fsutil::write_atomic(&path, &bytes, MODE_SECRET)
        .map_err(|e| Error::unwritable("the OpenSandbox double's address file", &path, e))?;
    Ok(path)
}
