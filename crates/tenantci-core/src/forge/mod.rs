//! Forge protocol adapters: the wire protocols tenantci speaks towards CI forges. Each submodule
//! is a leaf (no CLI, no Kubernetes): messages, a client, and the servers that speak the same
//! protocol towards executors. `kind` decides what differs between Gitea and Forgejo; `waiting` and `delivery` read
//! the two ways a forge announces waiting jobs (Forgejo's waiting-jobs API, the webhooks);
//! `jobs` reads one job's state from either forge's REST API (for `dispatch explain`).

pub mod delivery;
pub mod gitea;
pub mod jobs;
pub mod kind;
pub mod waiting;

pub use kind::Forge;

/// Whether a runner registered with `labels` may take a job that `runs_on`: every runs-on
/// label among them (the rule Gitea and Forgejo pick runners by). Both ways a forge announces
/// a waiting job (the API, the webhook) are judged by it.
pub fn runnable_with(runs_on: &[String], labels: &[String]) -> bool {
    runs_on.iter().all(|l| labels.contains(l))
}
