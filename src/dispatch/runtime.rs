//! `tenantci dispatch run`: composes the leader election, scheduler, pod backend worker,
//! facade, lifecycle reconciler and status API, runs until SIGTERM and drains.

use crate::Result;
use crate::dispatch::config::Config;

/// Runs the dispatcher described by `config` until SIGTERM / SIGINT.
pub async fn run(config: Config) -> Result<()> {
    let _ = config;
    Err(crate::Error::bad_input(
        "`tenantci dispatch run` is not implemented yet",
    ))
}
