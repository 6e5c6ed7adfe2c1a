//! `tenantci dispatch ...`: the Gitea dynamic runner.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::dispatch::config::Config;

#[derive(Debug, Subcommand)]
pub enum DispatchCommand {
    /// Run the dispatcher until SIGTERM (then drain: stop claiming, finish starts, hand the
    /// lease over).
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The config `tenantci dispatch init --out` wrote.
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: PathBuf,
}

pub async fn run(cmd: DispatchCommand) -> crate::Result<i32> {
    match cmd {
        DispatchCommand::Run(a) => {
            crate::dispatch::runtime::run(Config::load(&a.config)?).await?;
            Ok(0)
        }
    }
}
