//! Runner configuration: what gitlab-runner and act_runner read on the host.
//!
//! - [`gitlab_config`]: merge a Kubernetes-executor entry into gitlab-runner's config.toml.
//! - [`gitlab_api`]: create a runner through GitLab's REST API (`POST /api/v4/user/runners`).
//! - [`gitea_files`]: act_runner's `config.yaml` and `.runner` registration file.
//!
//! Does not mint credentials (`pki`, `credential`) or apply RBAC to the tenant cluster.

pub mod gitea_files;
pub mod gitlab_api;
pub mod gitlab_config;
