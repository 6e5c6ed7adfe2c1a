//! tenantci-runner: the runner-facing layer, over `tenantci-core`: what a runner needs to reach a
//! tenant cluster, and the GitLab side. Each module is one capability:
//!
//! - [`credential`]: mint, inspect and hand back scoped runner credentials from a ClientCA.
//! - [`tenant`]: the runner's RBAC (apply and verify), pre-warmed pause pods, job-pod sizing.
//! - [`gitlab`]: gitlab-runner's `config.toml`, GitLab's runner API and tokens, the pending-runner
//!   record, config.toml's lock, `runner gitlab-config` and `runner check`.
//! - [`act_runner`]: act_runner's `config.yaml` and `.runner` files (Gitea and Forgejo).
//! - [`bootstrap`]: `bootstrap runner`, every step above in one idempotent command.
//! - [`check_host`]: the gateway host's checks.
//! - [`checklist`]: the named checks with their fixes that `check-host` and `runner check` print.
//! - [`steps`]: the step report that orchestrations print.
//!
//! No CLI: commands parse their flags in the binary and call in here.

pub mod act_runner;
pub mod bootstrap;
pub mod check_host;
pub mod checklist;
pub mod credential;
pub mod gitlab;
mod secret_file;
pub mod steps;
pub mod tenant;
