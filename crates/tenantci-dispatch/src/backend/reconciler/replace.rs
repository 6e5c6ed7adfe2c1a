//! Replacing an executor past its start deadline: the old one deleted, the next attempt
//! started, and while the backend does not take it (an outage), tried once per pass.

use super::{Deleting, ReconcileError, Reconciler, Replacement, Retry};
use crate::backend::{Observed, StartError};
use crate::task::ledger::{Entry, Phase};
use crate::task::report;
use crate::task_id::TaskId;

impl Reconciler {
    /// Deletes the executor of `o` and starts `attempt` of the same task, if Gitea still has
    /// it open. Anything unreachable: an error, retried at the next pass.
    pub(super) async fn replace(
        &mut self,
        o: &Observed,
        attempt: u32,
    ) -> Result<(), ReconcileError> {
        let task = o.task;
        match report::still_open(
            &*self.ctx.gitea,
            &*self.ctx.ledger,
            task,
            self.executors.backend(),
        )
        .await
        {
            Some(true) => {}
            Some(false) => return self.delete(task, Deleting::Executor).await,
            None => return Err(ReconcileError::ForgeAway),
        }
        let sealed = self
            .executors
            .sealed_assignment(task)
            .await
            .map_err(ReconcileError::SealedAssignment)?;
        // Consumed meanwhile: the executor reported after all.
        let Some(sealed) = sealed else {
            return Ok(());
        };
        let (assignment, spec) = match self.restarts.next_attempt(&sealed, attempt) {
            Ok(r) => r,
            Err(why) => return self.fail(task, &why).await,
        };
        self.executors
            .delete(task)
            .await
            .map_err(|e| ReconcileError::Delete(Deleting::Stuck, e))?;
        let r = Replacement {
            assignment,
            spec,
            previous: o.attempt,
        };
        self.retries.insert(task, Retry::Replacing(Box::new(r)));
        self.start_replacement(task).await
    }

    /// Replacements the backend did not take at their last try: one more try each, while
    /// Gitea has the task open (which also keeps it alive there).
    pub(super) async fn retry_replacements(&mut self) {
        let tasks: Vec<TaskId> = self
            .retries
            .iter()
            .filter(|(_, r)| matches!(r, Retry::Replacing(_)))
            .map(|(t, _)| *t)
            .collect();
        for task in tasks {
            let tried = match report::still_open(
                &*self.ctx.gitea,
                &*self.ctx.ledger,
                task,
                self.executors.backend(),
            )
            .await
            {
                Some(true) => self.start_replacement(task).await,
                Some(false) => {
                    self.retries.remove(&task);
                    self.ctx.registry.finished(task);
                    Ok(())
                }
                None => Err(ReconcileError::ForgeAway),
            };
            if let Err(e) = tried {
                self.error_policy(task, &e);
            }
        }
    }

    /// One try at creating `task`'s replacement executor.
    async fn start_replacement(&mut self, task: TaskId) -> Result<(), ReconcileError> {
        let Some(Retry::Replacing(r)) = self.retries.get(&task) else {
            return Ok(());
        };
        let (attempt, previous) = (r.spec.attempt, r.previous);
        let executor = self.executors.nouns().executor;
        let tried = self
            .executors
            .start(&r.spec, &r.assignment.to_json(), false)
            .await;
        match tried {
            Ok(_) => {
                let Some(Retry::Replacing(r)) = self.retries.remove(&task) else {
                    unreachable!("looked up above");
                };
                let step = Entry::step(task, attempt, self.executors.backend(), Phase::Started);
                self.ctx
                    .ledger
                    .note(step.with_assignment(&r.assignment))
                    .await;
                self.ctx.metrics.restarted();
                tracing::warn!(
                    task = task.get(),
                    attempt,
                    previous,
                    "the executor did not fetch its task within {}; its {executor} was replaced by attempt {attempt}",
                    self.restarts.claim.start_deadline.as_str()
                );
                Ok(())
            }
            Err(StartError::Unavailable(cause)) => {
                Err(ReconcileError::ReplacementNotTaken { attempt, cause })
            }
            Err(StartError::Refused(why)) => {
                self.retries.remove(&task);
                let line = format!("the executor could not be created: {why}");
                self.fail(task, &line).await
            }
        }
    }
}
