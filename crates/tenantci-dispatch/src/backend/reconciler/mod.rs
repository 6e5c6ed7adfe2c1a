//! The lifecycle reconciler of one backend (leader only), the same code for every backend:
//! observes the backend's executors, carries out the decision its table gives for each, and
//! rebuilds the claim registry at the start of a leadership term (recovery).
//!
//! Recovery reads the claim ledger first, then every complete executor found takes a backend
//! slot, so no more executors start than capacity allows, and none is started twice. Ledger
//! entries whose executor is gone, or only partly there after its start was done (a Secret
//! without its Pod: nothing would redeliver it), are carried out by the passes as
//! `recovery::decide` says (started again, or FAILURE), retried each pass until Gitea and the
//! backend took them.
//!
//! Start deadline: an executor that has not called FetchTask `claim.start_deadline` after it
//! was created (image pull stuck, crash loop, sandbox never boots) is deleted and replaced by
//! the next attempt of the same task (re-sealed for it, with a fresh capability, keeping its
//! slot), as long as Gitea still has the task open; after `claim.max_attempts` the task is
//! reported as FAILURE with a log line saying so. The reconciler is the one actor that
//! deletes executors, so a replacement never races its own pass.
//!
//! One policy for every backend:
//! - a slot is reserved before any executor is created, so recovery never runs past capacity.
//!   Recovery takes the slots of what it starts again before the worker pulls anything; one
//!   that finds none waits for one in the background (`CappedConsumer::acquire_slot`, in turn
//!   with the worker's pulls, whose idle lanes hold every free slot while they wait), kept
//!   alive at Gitea as a queued task meanwhile;
//! - every create goes through the backend's own classification (`ExecutorLifecycle::start`): a
//!   refusal fails the task with its reason, an outage is tried again;
//! - the pass never waits for a backend: each create is one try, and a replacement the
//!   backend did not take yet is kept and tried again at the next pass, so an outage of one
//!   backend's API delays no other executor's reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

mod lost;
mod replace;
pub mod slots;

use tokio::sync::watch;

use crate::backend::Context;
use crate::backend::lifecycle::{self, Decision, Start};
use crate::backend::{Backend, BackendError, Observed};
use crate::queue::assignment::Assignment;
use crate::task::Claim;
use crate::task::Progress;
use crate::task::ledger::{Entry, LedgerError};
use crate::task::recovery::Recovery;
use crate::task::report;
use crate::task::spec::{ExecutorSpec, ExecutorTemplate};
use slots::{Slots, SpareSlots};

/// The pass interval of a backend that polls, and the retry of a pass that left something
/// undone (an API away, a replacement not taken yet), whatever the backend's resync; the
/// facade's terminal marker, freed slots and a watching backend's changes wake it at once.
pub const RESYNC: Duration = Duration::from_secs(2);

/// Why recovery could not read what it needs.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("cannot list the executors: {0}")]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What replacing an executor needs.
pub struct Restarts {
    pub claim: Claim,
    pub template: ExecutorTemplate,
}

impl Restarts {
    /// The next attempt, `attempt`, of a task from its stored sealed assignment: sealed again for it, and
    /// its executor's spec (with a fresh capability, bound to the task's SPIFFE ID when
    /// identity is on). An error is why it cannot be started: the caller reports FAILURE.
    pub fn next_attempt(
        &self,
        sealed: &[u8],
        attempt: u32,
    ) -> Result<(Assignment, ExecutorSpec), String> {
        let (assignment, opened) = self.template.next_attempt(sealed, attempt)?;
        let spec = self.template.spec(&opened)?;
        Ok((assignment, spec))
    }
}

/// A replacement whose old executor is deleted and whose new one the backend did not take
/// yet: tried once per pass until it is created, refused, or the task ends at Gitea.
struct Replacement {
    assignment: Assignment,
    spec: ExecutorSpec,
    previous: u32,
}

pub struct Reconciler {
    executors: Arc<dyn Backend>,
    ctx: Context,
    restarts: Restarts,
    /// The slots of the executors recovery finds or starts again.
    slots: SpareSlots,
    /// Tasks already logged as kept-unknown (logged once, not every resync).
    logged: BTreeSet<i64>,
    /// Ledger entries whose executor recovery found gone, until carried out.
    lost: BTreeMap<i64, (Entry, Recovery)>,
    /// Replacements the backend did not take yet, by task.
    replacing: BTreeMap<i64, Replacement>,
    /// When the next pass is due without a wake-up (set by each pass, [`next_pass`]).
    due: Duration,
}

impl Reconciler {
    pub fn new(
        executors: Arc<dyn Backend>,
        ctx: Context,
        restarts: Restarts,
        slots: Arc<dyn Slots>,
    ) -> Self {
        Reconciler {
            executors,
            ctx,
            restarts,
            slots: SpareSlots::new(slots),
            logged: BTreeSet::new(),
            lost: BTreeMap::new(),
            replacing: BTreeMap::new(),
            due: RESYNC,
        }
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let executors = self.executors.clone();
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                self.due = RESYNC;
                tracing::warn!(backend = %executors.backend(), error = %e, "reconcile: cannot observe the executors at the backend's API (the tenant apiserver or OpenSandbox); trying again in {}s", RESYNC.as_secs());
            }
            tokio::select! {
                _ = tokio::time::sleep(self.due) => {}
                _ = executors.changed() => {}
                _ = self.ctx.registry.changed() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One pass over every executor of the backend.
    pub async fn pass(&mut self) -> Result<(), BackendError> {
        let backend = self.executors.backend();
        self.recover_lost().await;
        self.retry_replacements().await;
        // Taken before the list: an executor registered by then must be in the list.
        let registered: BTreeSet<i64> = self
            .ctx
            .registry
            .running_tasks_of(backend)
            .into_iter()
            .collect();
        let found = self.executors.observe().await?;
        self.executors.reconciled(&found).await;
        let mut unsettled = false;
        for o in found.values() {
            if !registered.contains(&o.task) && o.decision != Decision::Delete {
                // Being started right now (created, not registered yet), or a start cut short
                // whose assignment will be redelivered: the worker owns it, unless Gitea has
                // its final state already.
                continue;
            }
            self.one(o).await;
        }
        // Registered executors that are gone, though we did not delete them.
        for task in registered {
            // Re-checked: a task withdrawn meanwhile is no longer registered, and its
            // executor was deleted on purpose; a replacement is not created yet.
            if !found.contains_key(&task)
                && !self.replacing.contains_key(&task)
                && self.ctx.registry.is_running(task)
                && self.confirmed_gone(task).await
            {
                let why = format!(
                    "{} before the task reported a final state",
                    self.executors.nouns().gone
                );
                self.fail(task, &why).await;
            }
            unsettled |= !found.contains_key(&task);
        }
        unsettled |= !self.lost.is_empty() || !self.replacing.is_empty();
        self.due = next_pass(
            &found,
            unsettled,
            self.restarts.claim.start_deadline.get(),
            self.executors.resync(),
        );
        self.ctx
            .metrics
            .in_use(backend, self.ctx.registry.running_count(backend));
        Ok(())
    }

    async fn one(&mut self, o: &Observed) {
        match &o.decision {
            Decision::Keep => self.check_start(o).await,
            Decision::Delete => {
                if self.delete(o.task).await {
                    self.ctx.metrics.completed(self.executors.backend());
                    tracing::info!(
                        task = o.task,
                        "task done; {} deleted",
                        self.executors.nouns().executor
                    );
                }
            }
            Decision::FailAndDelete { reason } => {
                self.fail(o.task, reason).await;
            }
            Decision::KeepUnknown { reason } => {
                if self.logged.insert(o.task) {
                    tracing::warn!(task = o.task, "{reason}");
                }
            }
        }
    }

    /// Whether `task`'s executor, missing from the observation, is gone at the backend: the
    /// observation may lag (a watch's store) behind an executor created a moment ago. An API
    /// away answers no: the next pass asks again.
    async fn confirmed_gone(&self, task: i64) -> bool {
        match self.executors.exists(task).await {
            Ok(exists) => !exists,
            Err(e) => {
                tracing::warn!(task, error = %e, "the {} is not observed and {} cannot say whether it exists; asked again next pass", self.executors.nouns().executor, self.executors.nouns().source);
                false
            }
        }
    }

    /// How far `o`'s executor got: from the backend, or from the claim ledger when the backend
    /// cannot tell (None: the ledger has another attempt, or cannot be read now).
    async fn progress(&self, o: &Observed) -> Option<Progress> {
        o.progress_in(&*self.ctx.ledger).await.unwrap_or_else(|e| {
            tracing::warn!(task = o.task, error = %e, "cannot read the claim ledger; the start deadline is checked next pass");
            None
        })
    }

    /// The start deadline of a live executor (see the module header).
    async fn check_start(&mut self, o: &Observed) {
        let (Some(age), false) = (o.age, o.terminal) else {
            return;
        };
        let deadline = self.restarts.claim.start_deadline.get();
        // Young executors are the common case: the ledger is read only past the deadline.
        if age < deadline {
            return;
        }
        let fetched = match self.progress(o).await {
            None | Some(Progress::Reported) => return,
            Some(p) => p == Progress::Fetched,
        };
        let max_attempts = self.restarts.claim.max_attempts;
        match lifecycle::start(fetched, age, o.attempt, deadline, max_attempts) {
            Start::Wait => {}
            Start::GiveUp => {
                let why = format!(
                    "the executor did not fetch its task within {} in {} attempt(s) (image pull stuck, crash loop, the sandbox never booted, or its runner never started); giving up",
                    self.restarts.claim.start_deadline.as_str(),
                    o.attempt
                );
                self.fail(o.task, &why).await;
            }
            Start::Replace { attempt } => self.replace(o, attempt).await,
        }
    }

    /// Reports FAILURE, then deletes; while Gitea is unreachable the executor stays (next
    /// pass). True once Gitea has been told (or refused to hear it).
    async fn fail(&mut self, task: i64, reason: &str) -> bool {
        let backend = self.executors.backend();
        if !report::executor_failed(
            &*self.ctx.gitea,
            &*self.ctx.ledger,
            &self.ctx.metrics,
            backend,
            task,
            reason,
        )
        .await
        {
            return false;
        }
        self.delete(task).await;
        true
    }

    async fn delete(&mut self, task: i64) -> bool {
        match self.executors.delete(task).await {
            Ok(()) => {
                self.ctx.registry.finished(task);
                self.logged.remove(&task);
                self.replacing.remove(&task);
                true
            }
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot delete the {}; retrying next pass", self.executors.nouns().executor);
                false
            }
        }
    }
}

/// When the next pass is due if nothing wakes the reconciler (pure): soon while something is
/// left to do (a decision to carry out, a lost task, a replacement, an executor not observed),
/// else at the first start deadline still ahead, at the latest after `resync`.
fn next_pass(
    found: &BTreeMap<i64, Observed>,
    unsettled: bool,
    start_deadline: Duration,
    resync: Duration,
) -> Duration {
    let acting = found.values().any(|o| {
        matches!(
            o.decision,
            Decision::Delete | Decision::FailAndDelete { .. }
        )
    });
    if unsettled || acting {
        return RESYNC.min(resync);
    }
    let deadlines = found
        .values()
        .filter(|o| !o.terminal && o.progress.is_none_or(|p| p < Progress::Fetched))
        .filter_map(|o| start_deadline.checked_sub(o.age?));
    deadlines
        .chain(found.values().filter_map(|o| o.recheck))
        // Just past the moment, so the pass sees it passed.
        .map(|left| left + Duration::from_millis(100))
        .fold(resync, Duration::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor(task: i64, decision: Decision, age: u64, progress: Progress) -> Observed {
        Observed {
            task,
            attempt: 1,
            decision,
            terminal: false,
            complete: true,
            age: Some(Duration::from_secs(age)),
            progress: Some(progress),
            placement: None,
            class: None,
            recheck: None,
        }
    }

    #[test]
    fn the_next_pass_waits_for_a_change_a_start_deadline_or_the_resync() {
        let (s, deadline, resync) = (
            Duration::from_secs,
            Duration::from_secs(180),
            Duration::from_secs(300),
        );
        let running: BTreeMap<i64, Observed> = (1..=3)
            .map(|t| (t, executor(t, Decision::Keep, 60, Progress::Reported)))
            .collect();
        assert_eq!(
            next_pass(&running, false, deadline, resync),
            resync,
            "steady state"
        );
        let mut starting = running.clone();
        starting.insert(4, executor(4, Decision::Keep, 170, Progress::Unfetched));
        assert_eq!(
            next_pass(&starting, false, deadline, resync),
            s(10) + Duration::from_millis(100),
            "the unfetched one's start deadline"
        );
        let mut vanishing = running.clone();
        vanishing.insert(
            6,
            Observed {
                recheck: Some(s(4)),
                ..executor(6, Decision::Keep, 6, Progress::Fetched)
            },
        );
        assert_eq!(
            next_pass(&vanishing, false, deadline, resync),
            s(4) + Duration::from_millis(100),
            "a grace running out"
        );
        assert_eq!(
            next_pass(&running, true, deadline, resync),
            RESYNC,
            "something left to do"
        );
        let mut ended = running.clone();
        ended.insert(5, executor(5, Decision::Delete, 60, Progress::Reported));
        assert_eq!(
            next_pass(&ended, false, deadline, resync),
            RESYNC,
            "a delete to confirm"
        );
        assert_eq!(
            next_pass(&running, false, deadline, s(1)),
            s(1),
            "a polling backend"
        );
    }
}
