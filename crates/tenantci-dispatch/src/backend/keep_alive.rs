//! Keep-alive (leader only), over every backend: Gitea fails a task it has not heard of for
//! ten minutes, and nobody else reports a task before its executor fetched it. So every
//! `interval`, a non-final UpdateTask for each task queued by this leader, and for each
//! executor that has not reported yet (on any backend). Gitea's answer carries the task's
//! state: a task it ended meanwhile (cancelled while waiting for its executor) is withdrawn:
//! its queued assignment is dropped, its executor deleted, its slot freed, and nothing is
//! reported over Gitea's final state.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::Backend;
use crate::backend::Context;
use crate::task::Progress;
use crate::task::report;
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::proto::TaskResult;

/// The term's keep-alive over every backend.
pub struct KeepAlive {
    /// Gitea to keep tasks alive at, the registry and ledger to find them in.
    pub ctx: Context,
    /// Every backend this dispatcher runs.
    pub backends: Vec<Arc<dyn Backend>>,
    /// Between rounds (`[gitea] keepalive_interval`); well under Gitea's ten minutes.
    pub interval: Duration,
}

impl KeepAlive {
    /// A round every `interval`, the first after one interval, until `stop` changes.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = stop.changed() => return,
            }
            self.round().await;
        }
    }

    /// One round: every waiting task's UpdateTask, and the withdrawal of those Gitea ended.
    pub async fn round(&self) {
        // Each task once, with the backend it is on (for a ledger entry it may lack).
        let mut tasks = self.ctx.registry.queued_on();
        for executors in &self.backends {
            for task in self.unreported(&**executors).await {
                tasks.entry(task).or_insert(executors.backend());
            }
        }
        for (task, backend) in tasks {
            match self.ctx.gitea.keep_alive(task).await {
                Ok(result) if result.is_final() => {
                    self.withdraw(task, result).await;
                    self.ctx
                        .ledger
                        .note(report::final_step(task, backend, result))
                        .await;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(task = task.get(), error = %e, "keep-alive: UpdateTask at the forge failed; sending it again at the next keep-alive (the forge fails a task not updated for 10 minutes)")
                }
            }
        }
    }

    /// The tasks of `executors` whose executor has not reported yet (not fetched, or fetched
    /// and silent so far), by the backend's own word or the claim ledger's phase.
    async fn unreported(&self, executors: &dyn Backend) -> Vec<TaskId> {
        let found = match executors.observe().await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(backend = %executors.backend(), error = %e, "keep-alive: cannot list the executors at the backend's API; their tasks are kept alive again at the next keep-alive");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for o in found.values().filter(|o| !o.terminal) {
            let unreported = match o.progress_in(&*self.ctx.ledger).await {
                Ok(progress) => progress.is_some_and(|p| p < Progress::Reported),
                Err(e) => {
                    tracing::warn!(task = o.task.get(), error = %e, "keep-alive: cannot read the claim ledger (NATS); the task is kept alive again at the next keep-alive");
                    false
                }
            };
            if unreported {
                out.push(o.task);
            }
        }
        out
    }

    /// Gitea ended `task` (cancelled) before its executor reported: a queued assignment is
    /// dropped by the worker, its slot freed, and its executor deleted on whichever backend
    /// holds it.
    async fn withdraw(&self, task: TaskId, result: TaskResult) {
        let queued = self.ctx.registry.withdraw(task);
        // Freed before the delete, so the reconciler does not take the vanished executor for
        // a lost one and report FAILURE over Gitea's CANCELLED.
        self.ctx.registry.finished(task);
        for executors in &self.backends {
            if let Err(e) = executors.delete(task).await {
                tracing::warn!(task = task.get(), backend = %executors.backend(), error = %e, "cannot delete the withdrawn task's executor; the ledger has the task as over, so the next term's recovery deletes it");
            }
        }
        self.ctx.metrics.withdrawn();
        tracing::info!(
            task = task.get(),
            ?result,
            queued,
            "the task ended at Gitea before its executor fetched it; withdrawn (no executor runs it)"
        );
    }
}
