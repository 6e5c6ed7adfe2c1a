//! Replacing an executor past its start deadline: the old one deleted, the next attempt
//! started, and while the backend does not take it (an outage), tried once per pass.

use super::{Reconciler, Replacement};
use crate::backend::{Observed, StartError};
use crate::task::ledger::{Entry, Phase};
use crate::task::report;

impl Reconciler {
    /// Deletes the executor of `o` and starts `attempt` of the same task, if Gitea still has
    /// it open. Anything unreachable: left for the next pass.
    pub(super) async fn replace(&mut self, o: &Observed, attempt: u32) {
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
            Some(false) => {
                self.delete(task).await;
                return;
            }
            None => return,
        }
        let next = match self.executors.sealed_assignment(task).await {
            Ok(Some(sealed)) => self.restarts.next_attempt(&sealed, attempt),
            Ok(None) => return, // Consumed meanwhile: the executor reported after all.
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot read the task's sealed assignment for its replacement; trying again at the next pass");
                return;
            }
        };
        let (assignment, spec) = match next {
            Ok(r) => r,
            Err(why) => {
                self.fail(task, &why).await;
                return;
            }
        };
        let executor = self.executors.nouns().executor;
        if let Err(e) = self.executors.delete(task).await {
            tracing::warn!(task, error = %e, "cannot delete the stuck {executor}; retrying next pass");
            return;
        }
        let r = Replacement {
            assignment,
            spec,
            previous: o.attempt,
        };
        self.replacing.insert(task, r);
        self.start_replacement(task).await;
    }

    /// Replacements the backend did not take at their last try: one more try each, while
    /// Gitea has the task open (which also keeps it alive there).
    pub(super) async fn retry_replacements(&mut self) {
        let tasks: Vec<i64> = self.replacing.keys().copied().collect();
        for task in tasks {
            match report::still_open(
                &*self.ctx.gitea,
                &*self.ctx.ledger,
                task,
                self.executors.backend(),
            )
            .await
            {
                Some(true) => self.start_replacement(task).await,
                Some(false) => {
                    self.replacing.remove(&task);
                    self.ctx.registry.finished(task);
                }
                None => {}
            }
        }
    }

    /// One try at creating `task`'s replacement executor.
    async fn start_replacement(&mut self, task: i64) {
        let Some(r) = self.replacing.get(&task) else {
            return;
        };
        let (attempt, previous) = (r.spec.attempt, r.previous);
        let executor = self.executors.nouns().executor;
        let tried = self
            .executors
            .start(&r.spec, &r.assignment.to_json(), false)
            .await;
        match tried {
            Ok(_) => {
                let r = self.replacing.remove(&task).expect("looked up above");
                let step = Entry::step(task, attempt, self.executors.backend(), Phase::Started);
                self.ctx
                    .ledger
                    .note(step.with_assignment(&r.assignment))
                    .await;
                self.ctx.metrics.restarted();
                tracing::warn!(
                    task,
                    attempt,
                    previous,
                    "the executor did not fetch its task within {}; its {executor} was replaced by attempt {attempt}",
                    self.restarts.claim.start_deadline.as_str()
                );
            }
            Err(StartError::Unavailable(why)) => {
                tracing::warn!(task, attempt, error = %why, "the replacement {executor} is not created yet; trying again next pass");
            }
            Err(StartError::Refused(why)) => {
                self.replacing.remove(&task);
                let line = format!("the executor could not be created: {why}");
                self.fail(task, &line).await;
            }
        }
    }
}
