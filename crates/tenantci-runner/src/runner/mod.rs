//! Runner configuration: what gitlab-runner and act_runner read on the host.
//!
//! - [`gitlab_config`]: merge a Kubernetes-executor entry into gitlab-runner's config.toml.
//! - [`gitlab_api`]: create a runner through GitLab's REST API (`POST /api/v4/user/runners`).
//! - [`token`]: the runner token: given, reused from config.toml, or created through the API
//!   (one implementation for `runner gitlab-config` and `bootstrap runner`).
//! - [`pending`]: the write-ahead record that makes a runner creation resumable after a crash.
//! - [`config_lock`]: one writer at a time per config.toml (two runs at once create one runner).
//! - [`gitlab_setup`]: `runner gitlab-config` (token, merge, write, report).
//! - [`gitlab_ca`]: GitLab's CA handed on to gitlab-runner as `tls-ca-file`.
//! - [`check`]: `runner check`, every check of an existing entry, read-only.
//! - [`gitea_files`]: act_runner's `config.yaml` and `.runner` registration file.
//!
//! Does not mint credentials (`pki`, `credential`) or apply RBAC to the tenant cluster.

pub mod check;
pub mod config_lock;
pub mod gitea_files;
pub mod gitlab_api;
pub mod gitlab_ca;
pub mod gitlab_config;
pub mod gitlab_setup;
pub mod pending;
pub mod token;
