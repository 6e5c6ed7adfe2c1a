//! A claimed task: TODO header

pub mod ledger;
pub mod recovery;
pub mod registry;
pub mod report;
pub mod spec;

use serde::{Deserialize, Serialize};

use tenantci_core::duration::GoDuration;

/// What happens to a claimed task whose executor never fetches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// How long an executor may take from creation to its first FetchTask before it is
    /// replaced by a new attempt (image pull stuck, crash loop, sandbox never boots).
    #[serde(default = "defaults::start_deadline")]
    pub start_deadline: GoDuration,
    /// Attempts before the task is reported as FAILURE (1: no replacement).
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
}

impl Default for Claim {
    fn default() -> Self {
        Claim {
            start_deadline: defaults::start_deadline(),
            max_attempts: defaults::max_attempts(),
        }
    }
}

/// The section's defaults (`init` uses them for keys it has no flag for).
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// 3 attempts: one retry for a bad node, a second for bad luck; a third failure is the
    /// image or the job, and more attempts would only delay the FAILURE the user must see.
    pub fn max_attempts() -> u32 {
        3
    }
    /// 3 min: a node rental plus a cold image pull take 30-90 s, so a healthy start has
    /// twice that; a stuck one is replaced well inside Gitea's 10-minute zombie limit (the
    /// keep-alive keeps the task open meanwhile, so the limit is never the one that bites).
    pub fn start_deadline() -> GoDuration {
        Duration::from_secs(180).into()
    }
}
