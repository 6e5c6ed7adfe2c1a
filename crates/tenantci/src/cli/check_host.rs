//! `tenantci check-host`

use std::path::PathBuf;

use super::values::RoleArg;
use crate::output::{self, OutputArgs};
use tenantci_runner::check_host::{self, Options};

/// One line per check (`ok` / `warn` / `FAIL`), each non-ok line with its fix; exits 1 when
/// any check fails. See docs/host-contract.md for every check.
#[derive(Debug, clap::Args)]
pub struct CheckHostArgs {
    /// What this host is for.
    #[arg(long, value_enum)]
    pub role: RoleArg,
    /// The gateway state directory (node disks, ClientCAs, gateway.json).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Minimum free space in the state directory, GiB. Default: 20.
    #[arg(long, value_name = "GIB", default_value_t = 20)]
    pub min_free_gib: u64,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: CheckHostArgs) -> tenantci_core::Result<i32> {
    let opts = Options {
        role: args.role.into(),
        state_dir: args.state_dir,
        min_free_gib: args.min_free_gib,
        tmpdir: std::env::var_os("TMPDIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp")),
        path_var: std::env::var_os("PATH"),
    };
    let report = check_host::run(&opts);
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        print!("{}", tenantci_runner::checklist::render(&report.checks));
        println!(
            "{} checks, {} failed, {} warnings",
            report.checks.len(),
            report.failed,
            report.warnings
        );
    }
    Ok(report.exit_code())
}
