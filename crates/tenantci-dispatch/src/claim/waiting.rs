//! The waiting-jobs watch (Forgejo): the leader reads the forge's list of waiting jobs every
//! `waiting_jobs.interval`, wakes the scheduler when a job it serves starts waiting, and
//! exports every waiting job by its labels (`tenantci_dispatch_forge_waiting_jobs`), so the
//! demand no registration of this dispatcher can take is visible.
//!
//! Boundary: like a webhook delivery, the list is a hint. Polling stays the source of truth (a
//! job is claimed only by FetchTask), so a failed read costs latency, never a job; the nudge
//! goes through the same `Notify` and nudge budget as the webhook's. A job that keeps waiting
//! while every slot is busy wakes the scheduler once, not on every read
//! (`Demand::has_new_since`).

use std::sync::Arc;
use std::time::Duration;

use tenantci_core::forge::gitea::client::RunnerClient;
use tenantci_core::forge::waiting::{Demand, Scope};
use tenantci_core::secret::Secret;
use tokio::sync::{Notify, watch};

use crate::metrics::Metrics;

/// The leader's reader of Forgejo's waiting jobs (`[waiting_jobs]`).
pub struct WaitingWatch {
    /// The forge's client (its base URL and CA); its runner credentials are not used here.
    pub forge: RunnerClient,
    /// Whose waiting jobs are read (`waiting_jobs.scope`).
    pub scope: Scope,
    /// The Forgejo API token that may read them.
    pub token: Secret,
    /// Between reads (`waiting_jobs.interval`).
    pub interval: Duration,
    /// The labels this dispatcher registered (every class's included).
    pub labels: Vec<String>,
    /// Where the waiting jobs and each read's outcome are exported.
    pub metrics: Arc<Metrics>,
    /// The scheduler's wake-up, shared with the webhook receiver.
    pub nudge: Arc<Notify>,
}

impl WaitingWatch {
    /// Reads until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut before = Demand::default();
        let mut failing = false;
        while !*stop.borrow() {
            match self.forge.waiting_jobs(&self.scope, &self.token).await {
                Ok(jobs) => {
                    let demand = Demand::of(&jobs, &self.labels);
                    self.metrics.forge_waiting(&demand);
                    let wake = demand.has_new_since(&before);
                    if wake {
                        self.nudge.notify_one();
                    }
                    self.metrics.waiting_read(if wake { "nudge" } else { "ok" });
                    if failing {
                        tracing::info!(scope = %self.scope, "the waiting-jobs API answers again");
                    }
                    (before, failing) = (demand, false);
                }
                Err(e) => {
                    self.metrics.waiting_read("error");
                    // Once per spell of failures: a forge away for an hour is one line.
                    if !failing {
                        tracing::warn!(
                            scope = %self.scope,
                            error = %e,
                            "cannot read Forgejo's waiting jobs; claiming goes on by polling (check waiting_jobs.scope and the token in waiting_jobs.token_file)"
                        );
                    }
                    failing = true;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = stop.changed() => {}
            }
        }
        // The term ended (lease lost, drain): a standby exports no demand it no longer reads.
        self.metrics.forge_waiting(&Demand::default());
    }
}
