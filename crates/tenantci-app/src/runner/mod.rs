//! Runner configuration: what gitlab-runner and act_runner read on the host.
//!
//! - [`gitlab_config`]: merge a Kubernetes-executor entry into gitlab-runner's config.toml.
//! - [`gitlab_api`]: create a runner through GitLab's REST API (`POST /api/v4/user/runners`).
//! - [`token`]: the runner token: given, reused from config.toml, or created through the API
//!   (one implementation for `runner gitlab-config` and `bootstrap runner`).
//! - [`gitlab_setup`]: `runner gitlab-config` (token, merge, write, report).
//! - [`gitea_files`]: act_runner's `config.yaml` and `.runner` registration file.
//!
//! Does not mint credentials (`pki`, `credential`) or apply RBAC to the tenant cluster.

pub mod gitea_files;
pub mod gitlab_api;
pub mod gitlab_config;
pub mod gitlab_setup;
pub mod token;
