//! `tenantci sim`: run the local gateway simulator in the foreground until SIGTERM/SIGINT.

use std::path::PathBuf;

use clap::Args;

use crate::sim::{self, SimConfig};
use crate::{Error, Result};

/// Run a local gateway: an admin apiserver listing `Cluster` objects and one HTTPS tenant
/// apiserver per cluster (client-cert auth, RBAC, objects in memory). Prints one JSON line
/// `{"type":"ready",...}` on stdout when every server listens; stops on SIGTERM or SIGINT.
#[derive(Debug, Args)]
#[command(next_help_heading = "Simulator options")]
pub struct SimArgs {
    /// State directory (created if missing; CAs, kubeconfigs and ports are reused).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: PathBuf,
    /// A tenant cluster to serve (repeatable). Default: the clusters already in the state dir.
    #[arg(long = "cluster", value_name = "NAME")]
    pub clusters: Vec<String>,
}

pub async fn run(args: SimArgs) -> Result<i32> {
    // Before the ready line: a supervisor may send SIGTERM as soon as it reads it.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::external(format!("cannot watch SIGTERM: {e}")))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Error::external(format!("cannot watch SIGINT: {e}")))?;
    let handle = sim::start(SimConfig {
        state_dir: args.state_dir,
        clusters: args.clusters,
    })
    .await?;
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
    handle.shutdown().await;
    Ok(0)
}
