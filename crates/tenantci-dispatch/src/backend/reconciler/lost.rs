//! What recovery does at the start of a term and the passes carry out: the claim ledger read
//! first, every complete executor found registered with its slot, and the entries whose
//! executor is gone started again (with a slot taken first) or failed, as `recovery::decide`
//! says.

use super::{Deleting, ReconcileError, Reconciler, RecoverError, Retry, settled};
use crate::backend::{Observed, StartError};
use crate::queue::assignment::Assignment;
use crate::queue::consumer::Slot;
use crate::task::Progress;
use crate::task::ledger::{Entry, Phase};
use crate::task::recovery::{self, Objects, Recovery};
use crate::task::report;
use crate::task_id::TaskId;

impl Reconciler {
    /// Recovery: the claim ledger first, then every complete executor found is registered as
    /// running with a reserved slot; entries without executor are kept as retries
    /// (`Retry::Lost`) for the passes.
    pub async fn recover(&mut self) -> Result<(), RecoverError> {
        let backend = self.executors.backend();
        let entries = self.ctx.ledger.entries().await?;
        let found = self.executors.observe().await?;
        self.retries.clear();
        for e in entries.into_iter().filter(|e| e.backend == backend) {
            let objects = objects_of(found.get(&e.task));
            if recovery::waits_in_the_queue(&e, objects) {
                // Queued by an earlier term: kept alive at Gitea until its executor starts.
                self.ctx.registry.queued(e.task, backend);
            }
            match recovery::decide(&e, objects, &self.executors.nouns()) {
                Recovery::Leave => {}
                action => {
                    if action.is_restart() {
                        // Kept alive at Gitea (and withdrawn if cancelled there) while it
                        // waits for its slot, as a queued assignment is.
                        self.ctx.registry.queued(e.task, backend);
                    }
                    self.retries
                        .insert(e.task, Retry::Lost(Box::new(e), action));
                }
            }
        }
        // An incomplete executor is a start cut short (its assignment was not acked, so it
        // comes back and the worker finishes the start) or, once the ledger has the start as
        // done, a lost one that its retry restarts or fails.
        for o in found.values().filter(|o| o.complete) {
            self.ctx
                .registry
                .running(o.task, backend, || self.slots.for_found());
            if let Some(class) = &o.class {
                self.ctx.registry.hold_class(o.task, class);
            }
        }
        // Slots for the executors to start again, taken before the worker pulls anything
        // (recovery runs first): what was running before the crash runs before what waits.
        self.slots.reserve(self.lost_restarts());
        tracing::info!(
            executors = found.len(),
            lost = self.retries.len(),
            "recovered {} from the claim ledger and {}",
            self.executors.nouns().executors,
            self.executors.nouns().source
        );
        Ok(())
    }

    /// How many lost tasks wait to be started again.
    fn lost_restarts(&self) -> usize {
        self.retries
            .values()
            .filter(|r| matches!(r, Retry::Lost(_, a) if a.is_restart()))
            .count()
    }

    /// Carries out what recovery decided for entries whose executor is gone; what cannot be
    /// done now (Gitea or the backend away, no free slot) stays for the next pass.
    pub(super) async fn recover_lost(&mut self) {
        let lost: Vec<TaskId> = self
            .retries
            .iter()
            .filter(|(_, r)| matches!(r, Retry::Lost(..)))
            .map(|(t, _)| *t)
            .collect();
        for task in lost {
            let Some(Retry::Lost(entry, action)) = self.retries.remove(&task) else {
                continue;
            };
            let done = match &action {
                Recovery::Leave => Ok(()),
                Recovery::Delete => {
                    tracing::info!(
                        task = task.get(),
                        "the claim ledger has the task as over; deleting its executor"
                    );
                    self.delete(task, Deleting::Executor).await
                }
                Recovery::Fail { reason } => self.fail(task, reason).await,
                Recovery::Restart { leftover } => self.restart_lost(&entry, *leftover).await,
            };
            if let Err(e) = &done {
                self.error_policy(task, e);
            }
            if !settled(&done) {
                self.retries.insert(task, Retry::Lost(entry, action));
            }
        }
        if self.lost_restarts() == 0 {
            self.slots.release();
        }
    }

    /// Starts the next attempt of a task whose executor vanished before it fetched the task,
    /// from the ledger's sealed assignment, if Gitea still has it open. Ok when settled.
    /// A slot first: recovery never starts more executors than the capacity, and a task that
    /// waits for one costs Gitea nothing but the keep-alive.
    async fn restart_lost(
        &mut self,
        entry: &Entry,
        leftover: Option<u32>,
    ) -> Result<(), ReconcileError> {
        if self.ctx.registry.is_running(entry.task) {
            // The worker started it from a redelivered assignment meanwhile.
            return Ok(());
        }
        let Some(slot) = self.slots.take() else {
            return Err(ReconcileError::NoSlot);
        };
        let (done, unused) = self.start_again(entry, leftover, slot).await;
        if let Some(slot) = unused {
            self.slots.give_back(slot);
            if settled(&done) {
                // Over without a new executor: nothing to keep alive any more.
                self.ctx.registry.finished(entry.task);
            }
        }
        done
    }

    /// `restart_lost` with its slot: whether the entry is settled (Ok, or a FAILURE
    /// reported), and the slot unless the new executor holds it. Partial objects go first, whatever Gitea says: they hold the
    /// task's object names, and nothing else would delete them.
    async fn start_again(
        &mut self,
        entry: &Entry,
        leftover: Option<u32>,
        slot: Slot,
    ) -> (Result<(), ReconcileError>, Option<Slot>) {
        let task = entry.task;
        if leftover.is_some()
            && let Err(e) = self.executors.delete(task).await
        {
            return (
                Err(ReconcileError::Delete(Deleting::Leftover, e)),
                Some(slot),
            );
        }
        match report::still_open(
            &*self.ctx.gitea,
            &*self.ctx.ledger,
            task,
            self.executors.backend(),
        )
        .await
        {
            Some(true) => {}
            Some(false) => return (Ok(()), Some(slot)),
            None => return (Err(ReconcileError::ForgeAway), Some(slot)),
        }
        let Some(sealed) = entry.assignment.as_ref().map(Assignment::to_json) else {
            return (Ok(()), Some(slot));
        };
        let attempt = entry.attempt.max(leftover.unwrap_or(0)) + 1;
        let (assignment, spec) = match self.restarts.next_attempt(&sealed, attempt) {
            Ok(r) => r,
            Err(why) => return (self.fail(task, &why).await, Some(slot)),
        };
        let executor = self.executors.nouns().executor;
        match self
            .executors
            .start(&spec, &assignment.to_json(), false)
            .await
        {
            Ok(_) => {}
            Err(StartError::Unavailable(cause)) => {
                return (
                    Err(ReconcileError::RestartNotTaken { attempt, cause }),
                    Some(slot),
                );
            }
            Err(StartError::Refused(why)) => {
                let line = format!("the executor could not be created: {why}");
                return (self.fail(task, &line).await, Some(slot));
            }
        }
        let backend = self.executors.backend();
        let step = Entry::step(task, attempt, backend, Phase::Started);
        self.ctx
            .ledger
            .note(step.with_assignment(&assignment))
            .await;
        self.ctx.registry.running(task, backend, || Some(slot));
        if let Some(class) = &spec.class {
            self.ctx.registry.hold_class(task, &class.name);
        }
        self.ctx.metrics.restarted();
        tracing::warn!(
            task = task.get(),
            attempt,
            "the {executor} of attempt {} was lost before it fetched its task; started again as attempt {attempt}",
            entry.attempt
        );
        (Ok(()), None)
    }
}

/// What recovery's decision needs of the objects `found` for a task.
fn objects_of(found: Option<&Observed>) -> Objects {
    match found {
        None => Objects::None,
        Some(o) if o.complete => Objects::Complete,
        Some(o) => Objects::Partial {
            attempt: o.attempt,
            fetched: o.progress == Some(Progress::Fetched),
        },
    }
}
