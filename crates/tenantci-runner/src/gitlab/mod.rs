//! The GitLab side: what gitlab-runner reads on the host, and GitLab's runner API.
//!
//! - [`config`]: merge a Kubernetes-executor entry into gitlab-runner's config.toml.
//! - [`api`]: create a runner through GitLab's REST API (`POST /api/v4/user/runners`).
//! - [`token`]: the runner token: given, reused from config.toml, or created through the API
//!   (one implementation for `runner gitlab-config` and `bootstrap runner`).
//! - [`pending`]: the write-ahead record that makes a runner creation resumable after a crash.
//! - [`config_lock`]: one writer at a time per config.toml (two runs at once create one runner).
//! - [`setup`]: `runner gitlab-config` (token, merge, write, report).
//! - [`ca`]: GitLab's CA handed on to gitlab-runner as `tls-ca-file`.
//! - [`check`]: `runner check`, every check of an existing entry, read-only.
//! - [`rest`]: GitLab's read-only REST API (a runner, its managers, a job, protected branches)
//!   with a `read_api` access token.
//! - [`status`]: `runner status`, GitLab's view of the runner, its concurrency and its job Pods.
//! - [`explain`]: `runner explain`, why a GitLab job waits, a reason per line with its fix;
//!   stands on [`status`].
//!
//! Does not mint credentials (`credential`) or apply RBAC to the tenant cluster (`tenant`).
//! act_runner's files (Gitea and Forgejo) are [`crate::act_runner`]'s.

pub mod api;
pub mod ca;
pub mod check;
pub mod config;
pub mod config_lock;
pub mod explain;
pub mod pending;
pub mod rest;
pub mod setup;
pub mod status;
pub mod token;
