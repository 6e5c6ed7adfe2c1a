//! `tenantci bootstrap runner`: the runbook's GitLab-runner steps in one idempotent command:
//! resolve the tenant cluster, keep or mint the runner's credential, apply and verify its RBAC,
//! pre-warm rented nodes, size job pods, obtain the runner token, write `config.toml`, check
//! the result (`runner`). `textfile` writes a run's outcome and the credential's expiry for
//! node_exporter's textfile collector.
pub mod runner;
pub mod textfile;
