//! `tenantci pki ...`

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::output::{self, OutputArgs};
use tenantci_core::gateway::StateDir;
use tenantci_core::gateway::cluster_pki;

#[derive(Debug, Subcommand)]
pub enum PkiCommand {
    /// Create a cluster's serving CA and ClientCA (ECDSA P-256) in the state-dir layout.
    ///
    /// In production the gateway owns these files; the simulator and tests use this command.
    /// Existing files are never replaced.
    InitCluster(InitClusterArgs),
}

#[derive(Debug, Args)]
pub struct InitClusterArgs {
    /// The gateway state directory.
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The tenant cluster's name (a DNS label, e.g. `ci`).
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// Lifetime of both CAs, as a Go duration. Default: 87600h (ten years).
    #[arg(long, value_name = "DURATION")]
    pub valid_for: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(cmd: PkiCommand) -> tenantci_core::Result<i32> {
    match cmd {
        PkiCommand::InitCluster(args) => init_cluster(args),
    }
}

fn init_cluster(args: InitClusterArgs) -> tenantci_core::Result<i32> {
    let valid_for = match &args.valid_for {
        Some(raw) => tenantci_core::duration::parse_positive(raw).map_err(|e| {
            tenantci_core::Error::bad_input(format!("the validity `{raw}` {e}"))
                .hint("pass --valid-for as a positive Go duration such as `87600h`")
        })?,
        None => cluster_pki::DEFAULT_CA_VALID_FOR,
    };
    let report =
        cluster_pki::init_cluster(&StateDir::new(&args.state_dir), &args.cluster, valid_for)?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        println!(
            "Created the PKI of cluster `{}` (valid until {}):",
            report.cluster, report.not_after
        );
        println!("  serving CA  {}", report.serving_ca_cert.display());
        println!("  ClientCA    {}", report.client_ca_cert.display());
        println!("  ClientCA key {} (0600)", report.client_ca_key.display());
    }
    Ok(0)
}
