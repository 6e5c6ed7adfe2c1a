//! tenantci-runner: the runner-facing layer, over `tenantci-core`: what a runner needs to reach a
//! tenant cluster, and the GitLab side. Each module is one capability:
//!
//! - [`credential`]: mint, inspect and hand back scoped runner credentials from a ClientCA.
//! - [`tenant`]: the runner's RBAC (apply and verify), pre-warmed pause pods, job-pod sizing.
//! - [`runner`]: gitlab-runner's `config.toml`, GitLab's runner API, act_runner's files.
//! - [`bootstrap`]: `bootstrap runner`, every step above in one idempotent command.
//! - [`front`]: a GitLab Runner on another host: the authenticated front and its tunnel.
//! - [`check_host`]: the gateway host's checks.
//! - [`steps`]: the step report that orchestrations print.
//!
//! No CLI: commands parse their flags in the binary and call in here.

pub mod bootstrap;
pub mod check_host;
pub mod checklist;
pub mod credential;
pub mod front;
pub mod runner;
pub mod steps;
pub mod tenant;
