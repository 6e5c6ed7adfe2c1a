//! `tenantci sim`: a local gateway for tests and the quickstart. One admin apiserver serving
//! the `Cluster` objects, and one tenant apiserver per cluster with real HTTPS, client-cert
//! authentication and RBAC, over an in-memory object store.
//!
//! A test double: production code paths never use it. The state directory (CAs, kubeconfigs,
//! ports) survives restarts, and so do the tenant clusters' objects unless `persist` is off
//! (`persist`). See docs/simulator.md.
//!
//! One module per concern, on floors: a module imports only modules on a lower floor
//! (`layers.txt` beside this crate's manifest, checked by `scripts/check-layering.sh`;
//! docs/architecture.md draws them). Lowest first:
//!
//! 1. Leaves: [`ids`] (uids, generated names, timestamps), [`quantity`] (resource
//!    quantities), [`selector`] (label and field selectors), [`served`] (a double's HTTP
//!    server), [`statedir`] (the state directory: PKI, kubeconfigs, `gateway.json`),
//!    [`api_error`] (kube-apiserver's Status bodies, the handlers' error), [`store`] (the
//!    in-memory object store), [`tls`] (the handshake), [`validate`] (object names),
//!    [`portforward`] (`pods/portforward`'s WebSocket channels, relayed to a Pod's stand-in).
//! 2. Pure rules over them: [`authz`] (RBAC, impersonation, escalation, access reviews),
//!    [`events`] (the Events of a Pod that waits for a node), [`scheduler`] (the scheduler's
//!    and autoscaler's plan).
//! 3. [`api`]: one apiserver's request handling, the transport aside.
//! 4. Around an apiserver: [`authn`] (a client certificate to a user), [`nodes`] (the
//!    rented-node controller), [`persist`] (the objects on disk), [`seed`] (what a fresh
//!    cluster holds).
//! 5. The servers: [`server`] (every apiserver's HTTPS transport) and the other doubles,
//!    [`gitea`], [`opensandbox`], [`spire`]; none imports another.
//!
//! The crate root ([`start`]) stands above them all.

#![warn(missing_docs)]

pub mod api;
pub mod api_error;
pub mod authn;
pub mod authz;
pub mod events;
pub mod gitea;
pub mod ids;
pub mod nodes;
pub mod opensandbox;
pub mod persist;
pub mod portforward;
pub mod quantity;
pub mod scheduler;
pub mod seed;
pub mod selector;
pub mod served;
pub mod server;
pub mod spire;
pub mod statedir;
pub mod store;
pub mod tls;
pub mod validate;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use api::{ApiServer, Mode, registry};
use statedir::{ClusterEntry, GatewayJson};
use tenantci_core::gateway::StateDir;
use tenantci_core::pki::CertificateAuthority;
use tenantci_core::{Error, Result};

/// What to start.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The state directory: CAs, kubeconfigs, `gateway.json` (docs/state-dir.md).
    pub state_dir: PathBuf,
    /// The tenant clusters to simulate (`--cluster`); empty: every cluster already in the state
    /// directory.
    pub clusters: Vec<String>,
    /// Rented nodes: the node image and the autoscaler's timing and limit.
    pub nodes: nodes::NodeConfig,
    /// Keep each tenant cluster's objects in `clusters/<name>/objects.json` across restarts
    /// (`tenantci sim`'s default); false: in memory only (`--in-memory`, in-process tests).
    pub persist: bool,
    /// Serve SPIRE's `ClusterStaticEntry` CRD (true: as with spire-controller-manager
    /// installed); false: discovery lacks `spire.spiffe.io` (`--without-spire-crd`).
    pub spire_crd: bool,
}

impl SimConfig {
    /// Checks every value that needs no disk, before anything is created or written.
    pub fn validate(&self) -> Result<()> {
        for name in &self.clusters {
            tenantci_core::gateway::layout::validate_cluster_name(name)
                .map_err(|e| e.hint("pass --cluster as a DNS label such as `ci` (1-63 lower-case letters, digits and `-`)"))?;
        }
        if self.state_dir.exists() && !self.state_dir.is_dir() {
            return Err(Error::bad_input(format!(
                "the state directory `{}` is not a directory",
                self.state_dir.display()
            ))
            .hint("pass --state-dir naming a directory (created when missing)"));
        }
        Ok(())
    }
}

/// The machine-readable line `tenantci sim` prints once every server listens.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyInfo {
    /// Always `ready`: the line's type, for a reader of the JSON line.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The state directory in use.
    pub state_dir: PathBuf,
    /// The gateway-admin kubeconfig, which reaches the admin apiserver.
    pub admin_kubeconfig: PathBuf,
    /// The admin apiserver's URL (`https://127.0.0.1:PORT`).
    pub admin_url: String,
    /// The admin apiserver's port.
    pub admin_port: u16,
    /// Each tenant cluster served: its name, URL, port and tenant-admin kubeconfig.
    pub clusters: Vec<ClusterEntry>,
}

/// A running simulator; drop or [`SimHandle::shutdown`] stops it.
pub struct SimHandle {
    /// What `tenantci sim` printed as its ready line.
    pub info: ReadyInfo,
    /// The admin apiserver (the `Cluster` objects), for in-process inspection.
    pub admin: Arc<ApiServer>,
    /// Tenant apiservers by cluster name, for in-process inspection.
    pub tenants: Vec<(String, Arc<ApiServer>)>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// The tenant apiserver of cluster `name`, if it is simulated.
    pub fn tenant(&self, name: &str) -> Option<&Arc<ApiServer>> {
        self.tenants.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Stops every server and waits for their tasks to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn bind(preferred: Option<u16>) -> Result<TcpListener> {
    if let Some(port) = preferred
        && let Ok(l) = TcpListener::bind(("127.0.0.1", port)).await
    {
        return Ok(l);
    }
    TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| Error::external(format!("cannot listen on 127.0.0.1: {e}")))
}

fn url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// `<cluster>/node-image.json`, which tenantci reads for sizing (docs/state-dir.md).
fn write_node_image(
    path: &std::path::Path,
    image: &tenantci_core::node_image::NodeImage,
) -> Result<()> {
    let mut text = serde_json::to_string_pretty(image).expect("a node image serializes");
    text.push('\n');
    tenantci_core::fsutil::write_if_changed(
        path,
        text.as_bytes(),
        tenantci_core::fsutil::MODE_SECRET,
    )
    .map(|_| ())
    .map_err(|e| Error::unwritable("the node image manifest", path, e))
}

/// Prepares the state directory, binds every server and starts serving.
pub async fn start(config: SimConfig) -> Result<SimHandle> {
    tenantci_core::tls::ensure_crypto_provider();
    config.validate()?;
    let state = statedir::open(&config.state_dir)?;
    let names = cluster_names(&config, &state)?;
    // Read back before anything is written: a damaged file stops the start with nothing changed.
    let mut stores = Vec::new();
    for name in &names {
        stores.push(match config.persist {
            true => persist::load(
                &persist::path(&state, name),
                registry::tenant(config.spire_crd),
            )?,
            false => None,
        });
    }
    let ports = statedir::previous_ports(&state);
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();

    let admin_ca = statedir::admin_ca(&state)?;
    let admin_listener = bind(ports.get("").copied()).await?;
    let admin_port = port_of(&admin_listener)?;
    let admin_api = Arc::new(ApiServer::new(
        registry::ADMIN,
        Mode::VerifiedOnly,
        format!("127.0.0.1:{admin_port}"),
    ));

    let mut entries = Vec::new();
    let mut tenants = Vec::new();
    for (name, saved) in names.iter().zip(stores) {
        let listener = bind(ports.get(name).copied()).await?;
        let store = Stored {
            saved,
            persist: config.persist,
        };
        let tenant = start_tenant(&state, name, listener, (&config, store), &stop_rx)?;
        admin_api.seed(seed::cluster_object(name, &tenant.entry.url));
        tasks.extend(tenant.tasks);
        tenants.push((name.clone(), tenant.api));
        entries.push(tenant.entry);
    }
    tasks.push(restart_on_sigusr1(
        tenants.iter().map(|(_, api)| api.clone()).collect(),
        stop_rx.clone(),
    )?);
    tasks.push(serve_admin(
        &state,
        &admin_ca,
        admin_listener,
        admin_api.clone(),
        stop_rx,
    )?);

    let gateway = GatewayJson {
        admin_kubeconfig: state.admin_kubeconfig(),
        state_dir: state.root().to_path_buf(),
        admin_url: url(admin_port),
        admin_port,
        clusters: entries.clone(),
    };
    statedir::write_gateway_json(&state, &gateway)?;
    Ok(SimHandle {
        info: ReadyInfo {
            kind: "ready",
            state_dir: gateway.state_dir,
            admin_kubeconfig: gateway.admin_kubeconfig,
            admin_url: gateway.admin_url,
            admin_port,
            clusters: entries,
        },
        admin: admin_api,
        tenants,
        stop,
        tasks,
    })
}

/// SIGUSR1 restarts every tenant apiserver as far as its clients can tell (`ApiServer::restart`:
/// open watches end, older versions answer 410 Gone), for tests of what a watcher does then.
fn restart_on_sigusr1(
    tenants: Vec<Arc<ApiServer>>,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = signal(SignalKind::user_defined1())
        .map_err(|e| Error::external("cannot install the SIGUSR1 handler").caused_by(e))?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = usr1.recv() => tenants.iter().for_each(|api| api.restart()),
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }))
}

/// The clusters to simulate: the flags, else every cluster already in the state directory.
fn cluster_names(config: &SimConfig, state: &StateDir) -> Result<Vec<String>> {
    let mut names = config.clusters.clone();
    names.dedup();
    if names.is_empty() {
        names = state
            .cluster_names()
            .map_err(|e| Error::unreadable("the state directory", state.root(), e))?;
    }
    if names.is_empty() {
        return Err(Error::bad_input("no cluster to simulate")
            .hint("pass --cluster NAME (repeatable), e.g. --cluster ci"));
    }
    Ok(names)
}

fn port_of(listener: &TcpListener) -> Result<u16> {
    Ok(listener
        .local_addr()
        .map_err(|e| Error::external(e.to_string()))?
        .port())
}

/// One tenant cluster, serving.
struct Tenant {
    entry: ClusterEntry,
    api: Arc<ApiServer>,
    tasks: Vec<JoinHandle<()>>,
}

/// A tenant cluster's objects: read back from its file (None: a first start), and whether
/// to keep saving them there.
struct Stored {
    saved: Option<store::Store>,
    persist: bool,
}

/// A tenant apiserver on `listener`: its CAs and tenant-admin kubeconfig in the state
/// directory, the seeded (or saved) objects, its rented-node controller, the persister and
/// its HTTPS server.
fn start_tenant(
    state: &StateDir,
    name: &str,
    listener: TcpListener,
    (config, stored): (&SimConfig, Stored),
    stop_rx: &watch::Receiver<bool>,
) -> Result<Tenant> {
    let (serving_ca, client_ca) = statedir::cluster_cas(state, name)?;
    let port = port_of(&listener)?;
    let paths = state.cluster(name);
    statedir::ensure_kubeconfig(
        &paths.tenant_admin_kubeconfig,
        name,
        &url(port),
        serving_ca.cert_pem(),
        &client_ca,
        "tenant-admin",
    )?;
    let cert = statedir::serving_cert(&serving_ca, &format!("{name}-apiserver"))?;
    let tls = tls::server_config(&cert.cert_pem, &cert.key_pem)?;
    let authn = Arc::new(authn::Authenticator::new(client_ca.cert_pem())?);
    let nodes = &config.nodes;
    let registry = registry::tenant(config.spire_crd);
    let mut api = ApiServer::new(registry, Mode::Rbac, format!("127.0.0.1:{port}"));
    if let Some(saved) = stored.saved {
        api.store = saved;
    }
    let api = Arc::new(api);
    seed::tenant(&api);
    write_node_image(&paths.node_image, &nodes.image)?;
    let mut tasks = vec![
        tokio::spawn(nodes::run(api.clone(), nodes.clone(), stop_rx.clone())),
        tokio::spawn(server::serve(
            listener,
            tls,
            authn,
            api.clone(),
            stop_rx.clone(),
        )),
    ];
    if stored.persist {
        tasks.push(tokio::spawn(persist::run(
            api.clone(),
            persist::path(state, name),
            stop_rx.clone(),
        )));
    }
    Ok(Tenant {
        entry: ClusterEntry {
            name: name.to_string(),
            url: url(port),
            port,
            tenant_admin_kubeconfig: paths.tenant_admin_kubeconfig,
        },
        api,
        tasks,
    })
}

/// The admin apiserver (the `Cluster` objects) and its gateway-admin kubeconfig.
fn serve_admin(
    state: &StateDir,
    admin_ca: &CertificateAuthority,
    listener: TcpListener,
    api: Arc<ApiServer>,
    stop_rx: watch::Receiver<bool>,
) -> Result<JoinHandle<()>> {
    statedir::ensure_kubeconfig(
        &state.admin_kubeconfig(),
        "gateway-admin",
        &url(port_of(&listener)?),
        admin_ca.cert_pem(),
        admin_ca,
        "gateway-admin",
    )?;
    let cert = statedir::serving_cert(admin_ca, "tenantci-sim-gateway")?;
    let tls = tls::server_config(&cert.cert_pem, &cert.key_pem)?;
    let authn = Arc::new(authn::Authenticator::new(admin_ca.cert_pem())?);
    Ok(tokio::spawn(server::serve(
        listener, tls, authn, api, stop_rx,
    )))
}
