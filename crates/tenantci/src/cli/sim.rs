//! `tenantci sim`: run the local gateway simulator in the foreground until SIGTERM/SIGINT.

use std::path::PathBuf;

use clap::Args;

use tenantci_core::{Error, Result};
use tenantci_sim::{self as sim, SimConfig};

/// Run a local gateway: an admin apiserver listing `Cluster` objects and one HTTPS tenant
/// apiserver per cluster (client-cert auth, RBAC, objects kept in the state dir across
/// restarts). Prints one JSON line `{"type":"ready",...}` on stdout when every server listens;
/// stops on SIGTERM or SIGINT. Every flag is checked before anything is written.
#[derive(Debug, Args)]
#[command(next_help_heading = "Simulator options")]
pub struct SimArgs {
    /// State directory (created if missing; CAs, kubeconfigs and ports are reused).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: PathBuf,
    /// A tenant cluster to serve (repeatable). Default: the clusters already in the state dir.
    #[arg(long = "cluster", value_name = "NAME")]
    pub clusters: Vec<String>,
    #[command(flatten)]
    pub nodes: NodeArgs,
    /// Also serve a Gitea double (RunnerService over plain HTTP, plus an admin API to enqueue
    /// jobs); its address and registration token go to <state>/gitea.json (0600) before the
    /// ready line.
    #[arg(long)]
    pub gitea: bool,
    /// Where the Gitea double listens (port 0: any free port).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:0",
        requires = "gitea"
    )]
    pub gitea_listen: std::net::SocketAddr,
    /// The Gitea double answers as Forgejo does: a `+gitea-` version, several tasks per
    /// FetchTask up to `task_capacity`, request-key recovery (docs/forgejo-protocol.md).
    #[arg(long, requires = "gitea")]
    pub forgejo: bool,
    /// Keep the tenant clusters' objects in memory only: a restart starts from the seeded
    /// state. Default: each cluster's objects are saved to clusters/<name>/objects.json (0600)
    /// and come back on the next start, as etcd keeps them for kube-apiserver.
    #[arg(long)]
    pub in_memory: bool,
    #[command(flatten)]
    pub opensandbox: OpenSandboxArgs,
    #[command(flatten)]
    pub spire: SpireArgs,
}

/// The SPIRE stand-in: SVIDs for ClusterStaticEntry objects over a Workload API double.
#[derive(Debug, Args)]
#[command(next_help_heading = "SPIRE stand-in")]
pub struct SpireArgs {
    /// Also run a SPIRE stand-in for this trust domain (e.g. `example.org`): it issues an
    /// X509-SVID for each ClusterStaticEntry of a tenant cluster on a Workload API double at
    /// <state>/spire/<cluster>/<entry>.sock, serves a SPIRE Server API double (MintX509SVID
    /// for entries with admin: true, over mTLS) on a loopback port, and writes
    /// <state>/spire.json (0600: bundle, socket directory, server address and ID, admin API
    /// for rotation and the mints) before the ready line.
    #[arg(long, value_name = "TRUST_DOMAIN")]
    pub spire: Option<String>,
    /// Serve the tenant clusters without SPIRE's ClusterStaticEntry CRD (no spire.spiffe.io in
    /// API discovery), as a cluster where spire-controller-manager is not installed.
    #[arg(long, conflicts_with = "spire")]
    pub without_spire_crd: bool,
}

/// The OpenSandbox double: the Lifecycle API a VM backend creates sandboxes through.
#[derive(Debug, Args)]
#[command(next_help_heading = "OpenSandbox double")]
pub struct OpenSandboxArgs {
    /// Also serve an OpenSandbox Lifecycle API double (plain HTTP, API-key auth, plus an admin
    /// API for tests); its API key goes to <state>/opensandbox-api-key and its address to
    /// <state>/opensandbox.json (both 0600) before the ready line.
    #[arg(long)]
    pub opensandbox: bool,
    /// Where the OpenSandbox double listens (port 0: any free port).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:0",
        requires = "opensandbox"
    )]
    pub opensandbox_listen: std::net::SocketAddr,
    /// How long a new sandbox stays Pending before it is Running.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        requires = "opensandbox"
    )]
    pub opensandbox_boot: String,
}

impl OpenSandboxArgs {
    /// The boot delay, checked before anything starts.
    fn boot(&self) -> Result<std::time::Duration> {
        tenantci_core::duration::parse(&self.opensandbox_boot).map_err(|e| {
            Error::bad_input(format!(
                "--opensandbox-boot `{}` {e}",
                self.opensandbox_boot
            ))
            .hint("pass --opensandbox-boot as a Go duration such as `500ms`")
        })
    }

    /// Starts the double when asked and writes its files into `state_dir`.
    async fn start(
        &self,
        state_dir: &std::path::Path,
        boot: std::time::Duration,
    ) -> Result<Option<sim::opensandbox::OpenSandboxHandle>> {
        if !self.opensandbox {
            return Ok(None);
        }
        let o = sim::opensandbox::OpenSandboxDouble::start(self.opensandbox_listen, boot).await?;
        let path = sim::opensandbox::write_opensandbox_json(state_dir, &o)?;
        eprintln!("opensandbox double at {} ({})", o.base_url, path.display());
        Ok(Some(o))
    }
}

/// Rented nodes: a cluster starts with none; a Pod that fits no Ready node rents one.
#[derive(Debug, Args)]
#[command(next_help_heading = "Rented nodes")]
pub struct NodeArgs {
    /// How long a rented node boots before it is Ready.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub node_boot: String,
    /// vCPUs of the node image (written to clusters/<name>/node-image.json).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub node_vcpu: u32,
    /// Memory of the node image, MiB.
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub node_mem_mib: u64,
    /// Root filesystem of the node image, MiB (unset: not modelled).
    #[arg(long, value_name = "N")]
    pub node_rootfs_mib: Option<u64>,
    /// A node with no pods for this long is released.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub node_idle: String,
    /// At most this many nodes per cluster.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_nodes: usize,
}

impl NodeArgs {
    pub fn config(&self) -> Result<sim::nodes::NodeConfig> {
        let dur = |flag: &str, v: &str| {
            tenantci_core::duration::parse(v).map_err(|e| {
                Error::bad_input(format!("{flag} `{v}` {e}"))
                    .hint(format!("pass {flag} as a Go duration such as `3s`"))
            })
        };
        if self.node_vcpu == 0 || self.node_mem_mib == 0 {
            return Err(
                Error::bad_input("--node-vcpu and --node-mem-mib must be positive")
                    .hint("the runbook's node is --node-vcpu 2 --node-mem-mib 2048"),
            );
        }
        Ok(sim::nodes::NodeConfig {
            image: tenantci_core::node_image::NodeImage {
                vcpu: self.node_vcpu,
                mem_mib: self.node_mem_mib,
                rootfs_mib: self.node_rootfs_mib,
            },
            boot: dur("--node-boot", &self.node_boot)?,
            idle: dur("--node-idle", &self.node_idle)?,
            max_nodes: self.max_nodes,
        })
    }
}

/// The forge double (`--gitea`, as Forgejo with `--forgejo`), its `gitea.json` written.
async fn start_forge(
    listen: std::net::SocketAddr,
    forgejo: bool,
    state_dir: &std::path::Path,
) -> Result<sim::gitea::GiteaHandle> {
    let forge = match forgejo {
        true => tenantci_core::forge::Forge::Forgejo,
        false => tenantci_core::forge::Forge::Gitea,
    };
    let g = sim::gitea::GiteaDouble::start_as(listen, forge).await?;
    let path = sim::gitea::write_gitea_json(state_dir, &g)?;
    eprintln!("{forge} double at {} ({})", g.base_url, path.display());
    Ok(g)
}

/// The SPIRE stand-in for trust domain `td` (`--spire`).
async fn start_spire(
    state_dir: &std::path::Path,
    td: &str,
    handle: &sim::SimHandle,
) -> Result<sim::spire::SpireHandle> {
    let s = sim::spire::start(state_dir, td, &handle.tenants).await?;
    eprintln!(
        "SPIRE stand-in for {} (sockets under {}, Server API {}, admin {})",
        s.json.trust_domain,
        s.json.socket_dir.display(),
        s.json.server_address,
        s.json.admin_url
    );
    Ok(s)
}

pub async fn run(args: SimArgs) -> Result<i32> {
    // Before the ready line: a supervisor may send SIGTERM as soon as it reads it.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::external("cannot watch SIGTERM").caused_by(e))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Error::external("cannot watch SIGINT").caused_by(e))?;
    let nodes = args.nodes.config()?;
    let boot = args.opensandbox.boot()?;
    if let Some(td) = &args.spire.spire {
        sim::spire::validate_trust_domain(td)?;
    }
    let state_dir = args.state_dir.clone();
    let config = SimConfig {
        state_dir: args.state_dir,
        clusters: args.clusters,
        nodes,
        persist: !args.in_memory,
        spire_crd: !args.spire.without_spire_crd,
    };
    config.validate()?;
    let handle = sim::start(config).await?;
    let gitea = match args.gitea {
        true => Some(start_forge(args.gitea_listen, args.forgejo, &state_dir).await?),
        false => None,
    };
    let opensandbox = args.opensandbox.start(&state_dir, boot).await?;
    let spire = match &args.spire.spire {
        Some(td) => Some(start_spire(&state_dir, td, &handle).await?),
        None => None,
    };
    println!(
        "{}",
        serde_json::to_string(&handle.info).expect("the ready line serializes")
    );
    for c in &handle.info.clusters {
        eprintln!(
            "cluster {} at {} (kubeconfig {})",
            c.name,
            c.url,
            c.tenant_admin_kubeconfig.display()
        );
    }
    eprintln!(
        "gateway admin at {} (kubeconfig {})",
        handle.info.admin_url,
        handle.info.admin_kubeconfig.display()
    );
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    if let Some(g) = gitea {
        g.shutdown().await;
    }
    if let Some(o) = opensandbox {
        o.shutdown().await;
    }
    if let Some(s) = spire {
        s.shutdown().await;
    }
    handle.shutdown().await;
    Ok(0)
}
