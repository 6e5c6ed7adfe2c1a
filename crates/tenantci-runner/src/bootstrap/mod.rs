//! `tenantci bootstrap runner`: the runbook's GitLab-runner steps in one idempotent command:
//! resolve the tenant cluster, keep or mint the runner's credential, apply and verify its RBAC,
//! pre-warm rented nodes, size job pods, write `config.toml`.
pub mod runner;
pub mod textfile;
