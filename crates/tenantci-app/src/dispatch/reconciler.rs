//! The lifecycle reconciler (leader only): lists the executor objects, asks
//! `lifecycle::decide` about each, and carries the decision out. It also rebuilds the claim
//! registry at the start of a leadership term (recovery): every executor found takes a
//! backend slot, so no more executors start than capacity allows, and none is started twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::lifecycle::{self, Decision};
use super::metrics::Metrics;
use super::objects::{ExecutorObjects, Observed};
use super::registry::Registry;
use super::report;
use crate::queue::Backend;
use crate::queue::consumer::Slot;
use tenantci_core::forge::gitea::client::RunnerClient;

/// Full resync interval; the facade's terminal marker and freed slots also wake it at once.
pub const RESYNC: Duration = Duration::from_secs(2);

pub struct Reconciler {
    pub objects: ExecutorObjects,
    pub gitea: RunnerClient,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    /// Tasks already logged as kept-unknown (logged once, not every resync).
    pub logged: BTreeSet<i64>,
}

impl Reconciler {
    /// Recovery: every executor found is registered as running with a reserved slot.
    pub async fn recover(
        &self,
        reserve: &(dyn Fn() -> Option<Slot> + Sync),
    ) -> Result<BTreeMap<i64, Observed>, kube::Error> {
        let found = self.objects.list().await?;
        // A Secret still holding its assignment without a Pod is a start cut short: its
        // assignment was not acked, so it comes back and the worker finishes the start.
        for o in found.values().filter(|o| o.pod_exists || !o.unfetched) {
            self.registry.running(o.task_id, Backend::Pod, reserve);
        }
        tracing::info!(
            executors = found.len(),
            "recovered executors from the apiserver"
        );
        Ok(found)
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "reconcile: cannot list executor objects");
            }
            tokio::select! {
                _ = tokio::time::sleep(RESYNC) => {}
                _ = self.registry.changed() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One pass over every executor.
    pub async fn pass(&mut self) -> Result<(), kube::Error> {
        // Taken before the list: an executor registered by then must be in the list.
        let registered: BTreeSet<i64> = self.registry.running_tasks().into_iter().collect();
        let found = self.objects.list().await?;
        for o in found.values() {
            if !o.pod_exists && o.unfetched && !registered.contains(&o.task_id) {
                // Being started right now (Secret first, then Pod), or a start cut short
                // whose assignment will be redelivered: the worker owns it.
                continue;
            }
            self.one(o).await;
        }
        // Registered executors whose objects are gone, though we did not delete them.
        for task in registered {
            if !found.contains_key(&task) {
                self.fail(task, "the executor's Pod and Secret were deleted before the task reported a final state").await;
            }
        }
        self.metrics
            .in_use(Backend::Pod, self.registry.running_count(Backend::Pod));
        Ok(())
    }

    async fn one(&mut self, o: &Observed) {
        match lifecycle::decide(&o.lifecycle()) {
            Decision::Keep => {}
            Decision::Delete => {
                if self.delete(o.task_id).await {
                    self.metrics.completed();
                    tracing::info!(
                        task = o.task_id,
                        "task done; executor Pod and Secret deleted"
                    );
                }
            }
            Decision::FailAndDelete { reason } => self.fail(o.task_id, &reason).await,
            Decision::KeepUnknown { reason } => {
                if self.logged.insert(o.task_id) {
                    tracing::warn!(task = o.task_id, "{reason}");
                }
            }
        }
    }

    /// Reports FAILURE, then deletes; while Gitea is unreachable the objects stay (next pass).
    async fn fail(&mut self, task: i64, reason: &str) {
        match report::fail(&self.gitea, task, reason).await {
            Ok(()) => {}
            Err(e) if e.code().is_some() => {
                // Gitea answered (e.g. the task is not ours any more): nothing more to tell it.
                tracing::warn!(task, error = %e, "Gitea refused the FAILURE report");
            }
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot report FAILURE to Gitea; keeping the executor for the next pass");
                return;
            }
        }
        tracing::warn!(task, "{reason}: reported FAILURE to Gitea");
        self.metrics.failed();
        self.delete(task).await;
    }

    async fn delete(&mut self, task: i64) -> bool {
        match self.objects.delete(task).await {
            Ok(()) => {
                self.registry.finished(task);
                self.logged.remove(&task);
                true
            }
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot delete the executor objects; retrying next pass");
                false
            }
        }
    }
}
