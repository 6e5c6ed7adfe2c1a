//! tenantci-runner: the runner-facing layer, over `tenantci-core`: what a runner needs to reach a
//! tenant cluster, the GitLab side, and act_runner's files. Each module is one capability:
//!
//! - [`credential`]: mint, inspect and hand back scoped runner credentials from a ClientCA.
//! - [`tenant`]: the runner's RBAC (apply and verify), access reviews, server-side apply,
//!   pre-warmed pause pods, job-pod sizing.
//! - [`gitlab`]: gitlab-runner's `config.toml` and GitLab's CA for it, GitLab's runner API and
//!   tokens, the pending-runner record, config.toml's lock, `runner gitlab-config`, `runner
//!   check`, and the operator's view: `runner status` and `runner explain`.
//! - [`act_runner`]: act_runner's `config.yaml` and `.runner` files (Gitea and Forgejo).
//! - [`bootstrap`]: `bootstrap runner`, every GitLab step above in one idempotent command, and
//!   its result as node_exporter metrics.
//! - [`check_host`]: `check-host`, the checks of a gateway or runner host.
//! - [`checklist`]: the named checks with their fixes that `check-host` and `runner check` print.
//! - [`steps`]: the step report that orchestrations print.
//!
//! No CLI: commands parse their flags in the binary and call in here.

#![warn(missing_docs)]

pub mod act_runner;
pub mod bootstrap;
pub mod check_host;
pub mod checklist;
pub mod credential;
pub mod gitlab;
mod secret_file;
pub mod steps;
pub mod tenant;
