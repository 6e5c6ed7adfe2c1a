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
//!
//! The task history (`task::history`) gets what only the reconciler sees: the marks its
//! backend reads off an executor (the pod backend's scheduled and started, from the watched
//! Pod's status: no request of their own), once per executor and term, and `gone` at the
//! delete of a task that is over.
//!
//! The shape is kube-runtime's: each executor is reconciled to an [`Action`] (requeue after a
//! while, or await a change) or a [`ReconcileError`], every error goes through one policy
//! (`Reconciler::error_policy`: logged once, in the words of what was being done, and
//! retried at the next pass), what is retried across passes is in one map
//! (`Retry`, by task), and the next pass is due at the earliest of the actions.

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
use crate::task::history::{Mark, Observation};
use crate::task::ledger::{Entry, LedgerError};
use crate::task::recovery::Recovery;
use crate::task::report;
use crate::task::spec::{ExecutorSpec, ExecutorTemplate};
use crate::task_id::TaskId;
use slots::{Slots, SpareSlots};

/// The pass interval of a backend that polls, and the retry of a pass that left something
/// undone (an API away, a replacement not taken yet), whatever the backend's resync; the
/// facade's terminal marker, freed slots and a watching backend's changes wake it at once.
pub const RESYNC: Duration = Duration::from_secs(2);

/// What a reconcile of one executor (or one retried task) asks of the next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Pass again after this long, whatever else wakes the reconciler.
    RequeueAfter(Duration),
    /// Nothing changes with time alone: the next change (a watch event, a freed slot) or the
    /// backend's resync.
    AwaitChange,
}

/// Why a reconcile left something undone; the cause stays typed. `Reconciler::error_policy`
/// logs it (in the words of what was being done) and requeues: every one is retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The backend did not delete an executor (or what a lost one left).
    #[error("cannot delete {0:?}: {1}")]
    Delete(Deleting, #[source] BackendError),
    /// The backend cannot say whether an executor missing from its observation exists.
    #[error("cannot tell whether the executor exists: {0}")]
    Exists(#[source] BackendError),
    /// The claim ledger, read for how far an executor got, did not answer.
    #[error("cannot read the claim ledger: {0}")]
    Progress(#[source] LedgerError),
    /// The backend did not give the sealed assignment a replacement starts from.
    #[error("cannot read the sealed assignment: {0}")]
    SealedAssignment(#[source] BackendError),
    /// The backend did not take a replacement's start (an outage).
    #[error("the replacement of attempt {attempt} is not created yet: {cause}")]
    ReplacementNotTaken {
        /// The replacement's attempt.
        attempt: u32,
        /// The backend's error.
        #[source]
        cause: crate::backend::Cause,
    },
    /// The backend did not take a lost task's new start (an outage).
    #[error("the lost task's attempt {attempt} is not started yet: {cause}")]
    RestartNotTaken {
        /// The new attempt.
        attempt: u32,
        /// The backend's error.
        #[source]
        cause: crate::backend::Cause,
    },
    /// The forge did not take a FAILURE report (`task::report` logged why).
    #[error("the forge did not take the FAILURE report")]
    NotReported,
    /// The forge cannot say whether the task is still open (`task::report` logged why).
    #[error("the forge cannot say whether the task is still open")]
    ForgeAway,
    /// No admission slot is free for a lost task's new start yet.
    #[error("no slot is free yet")]
    NoSlot,
}

/// Which delete a [`ReconcileError::Delete`] was, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleting {
    /// An executor whose task is over.
    Executor,
    /// The executor of a task just reported FAILURE: the report stands, the delete is
    /// retried by the executor's next pass.
    Failed,
    /// An executor past its start deadline, before its replacement.
    Stuck,
    /// What a lost executor left (a Secret without its Pod).
    Leftover,
}

/// What a task carries from one pass to the next: recovery's decision for an executor found
/// gone, or a replacement the backend did not take yet. One map, by task.
enum Retry {
    /// A ledger entry whose executor recovery found gone, and what to do about it.
    Lost(Box<Entry>, Recovery),
    /// A replacement whose old executor is deleted.
    Replacing(Box<Replacement>),
}

/// Why recovery could not read what it needs.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The backend's API did not list its executors.
    #[error("cannot list the executors: {0}")]
    Backend(#[from] BackendError),
    /// The claim ledger did not answer.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What replacing an executor needs.
pub struct Restarts {
    /// `[claim]`: the start deadline and the attempts a task gets.
    pub claim: Claim,
    /// What every executor gets; seals each next attempt.
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

/// The reconciler of one backend's executors for one leadership term: recovery at its start
/// ([`Reconciler::recover`]), then a pass per change or due time ([`Reconciler::run`]).
pub struct Reconciler {
    executors: Arc<dyn Backend>,
    ctx: Context,
    restarts: Restarts,
    /// The slots of the executors recovery finds or starts again.
    slots: SpareSlots,
    /// Tasks already logged as kept-unknown (logged once, not every resync).
    logged: BTreeSet<TaskId>,
    /// What is retried at the next pass, by task: lost executors and replacements.
    retries: BTreeMap<TaskId, Retry>,
    /// When the next pass is due without a wake-up (set by each pass, [`next_pass`]).
    due: Duration,
    /// The history marks already written for each executor this term, so a pass writes a
    /// mark once, not at every resync.
    marked: BTreeMap<TaskId, BTreeSet<Mark>>,
    /// The executors whose wait for a node was written this term (once each).
    waited: BTreeSet<TaskId>,
}

impl Reconciler {
    /// The reconciler of `executors`, reporting through `ctx`, replacing with `restarts`,
    /// taking recovery's slots from `slots` (the backend's consumer).
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
            retries: BTreeMap::new(),
            due: RESYNC,
            marked: BTreeMap::new(),
            waited: BTreeSet::new(),
        }
    }

    /// Passes until `stop`: at the due time of the last pass, or at once on a change (the
    /// backend's watch, the registry: a freed slot, the facade's terminal marker).
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

    /// One pass over every executor of the backend: each reconciled to an action, the next
    /// pass due at the earliest of them.
    pub async fn pass(&mut self) -> Result<(), BackendError> {
        let backend = self.executors.backend();
        let mut actions = self.retry().await;
        // Taken before the list: an executor registered by then must be in the list.
        let registered: BTreeSet<TaskId> = self
            .ctx
            .registry
            .running_tasks_of(backend)
            .into_iter()
            .collect();
        let found = self.executors.observe().await?;
        self.executors.reconciled(&found).await;
        for o in found.values() {
            self.mark_seen(o);
            if !registered.contains(&o.task) && o.decision != Decision::Delete {
                // Being started right now (created, not registered yet), or a start cut short
                // whose assignment will be redelivered: the worker owns it, unless Gitea has
                // its final state already.
                continue;
            }
            let action = match self.reconcile(o).await {
                Ok(action) => action,
                Err(e) => self.error_policy(o.task, &e),
            };
            actions.push(action);
        }
        // Registered executors that are gone, though we did not delete them.
        for task in registered.into_iter().filter(|t| !found.contains_key(t)) {
            let action = match self.reconcile_missing(task).await {
                Ok(action) => action,
                Err(e) => self.error_policy(task, &e),
            };
            actions.push(action);
        }
        self.marked.retain(|t, _| found.contains_key(t));
        self.waited.retain(|t| found.contains_key(t));
        let start_deadline = self.restarts.claim.start_deadline.get();
        actions.extend(found.values().map(|o| planned(o, start_deadline)));
        self.due = next_pass(actions, self.executors.resync());
        self.ctx
            .metrics
            .in_use(backend, self.ctx.registry.running_count(backend));
        Ok(())
    }

    /// Carries out the retries (lost executors first, then replacements); what is still
    /// undone asks for the next pass soon.
    async fn retry(&mut self) -> Vec<Action> {
        self.recover_lost().await;
        self.retry_replacements().await;
        if self.retries.is_empty() {
            Vec::new()
        } else {
            vec![Action::RequeueAfter(RESYNC)]
        }
    }

    /// One executor, as its backend's table decided.
    async fn reconcile(&mut self, o: &Observed) -> Result<Action, ReconcileError> {
        match &o.decision {
            Decision::Keep => self.check_start(o).await?,
            Decision::Delete => {
                self.delete(o.task, Deleting::Executor).await?;
                self.ctx.metrics.completed(self.executors.backend());
                tracing::info!(
                    task = o.task.get(),
                    "task done; {} deleted",
                    self.executors.nouns().executor
                );
            }
            Decision::FailAndDelete { reason } => self.fail(o.task, reason).await?,
            Decision::KeepUnknown { reason } => {
                if self.logged.insert(o.task) {
                    tracing::warn!(task = o.task.get(), "{reason}");
                }
            }
        }
        Ok(Action::AwaitChange)
    }

    /// A registered executor missing from the observation: FAILURE once the backend confirms
    /// it is gone (we did not delete it). Soon again: it is not settled while missing.
    async fn reconcile_missing(&mut self, task: TaskId) -> Result<Action, ReconcileError> {
        // Re-checked: a task withdrawn meanwhile is no longer registered, and its executor
        // was deleted on purpose; a replacement is not created yet.
        if !matches!(self.retries.get(&task), Some(Retry::Replacing(_)))
            && self.ctx.registry.is_running(task)
            && self.confirmed_gone(task).await?
        {
            let why = format!(
                "{} before the task reported a final state",
                self.executors.nouns().gone
            );
            self.fail(task, &why).await?;
        }
        Ok(Action::RequeueAfter(RESYNC))
    }

    /// The one error policy: logged in the words of what was being done (the forge's own
    /// refusals are logged where they happen), retried at the next pass.
    fn error_policy(&self, task: TaskId, e: &ReconcileError) -> Action {
        let executor = self.executors.nouns().executor;
        match e {
            ReconcileError::Delete(Deleting::Executor | Deleting::Failed, e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot delete the {executor}; retrying next pass");
            }
            ReconcileError::Delete(Deleting::Stuck, e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot delete the stuck {executor}; retrying next pass");
            }
            ReconcileError::Delete(Deleting::Leftover, e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot delete what the lost {executor} left; retrying next pass");
            }
            ReconcileError::Exists(e) => {
                tracing::warn!(task = task.get(), error = %e, "the {executor} is not observed and {} cannot say whether it exists; asked again next pass", self.executors.nouns().source);
            }
            ReconcileError::Progress(e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot read the claim ledger; the start deadline is checked next pass");
            }
            ReconcileError::SealedAssignment(e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot read the task's sealed assignment for its replacement; trying again at the next pass");
            }
            ReconcileError::ReplacementNotTaken { attempt, cause } => {
                tracing::warn!(task = task.get(), attempt, error = %cause, "the replacement {executor} is not created yet; trying again next pass");
            }
            ReconcileError::RestartNotTaken { attempt, cause } => {
                tracing::warn!(task = task.get(), attempt, error = %cause, "cannot start the lost task again; retrying next pass");
            }
            ReconcileError::NotReported | ReconcileError::ForgeAway | ReconcileError::NoSlot => {}
        }
        Action::RequeueAfter(RESYNC)
    }

    /// Whether `task`'s executor, missing from the observation, is gone at the backend: the
    /// observation may lag (a watch's store) behind an executor created a moment ago. An API
    /// away is an error: the next pass asks again.
    async fn confirmed_gone(&self, task: TaskId) -> Result<bool, ReconcileError> {
        let exists = self
            .executors
            .exists(task)
            .await
            .map_err(ReconcileError::Exists)?;
        Ok(!exists)
    }

    /// The start deadline of a live executor (see the module header).
    async fn check_start(&mut self, o: &Observed) -> Result<(), ReconcileError> {
        let (Some(age), false) = (o.age, o.terminal) else {
            return Ok(());
        };
        let deadline = self.restarts.claim.start_deadline.get();
        // Young executors are the common case: the ledger is read only past the deadline.
        if age < deadline {
            return Ok(());
        }
        // How far it got: from the backend, or from the claim ledger when the backend cannot
        // tell (None: the ledger has another attempt).
        let progress = o
            .progress_in(&*self.ctx.ledger)
            .await
            .map_err(ReconcileError::Progress)?;
        let fetched = match progress {
            None | Some(Progress::Reported) => return Ok(()),
            Some(p) => p == Progress::Fetched,
        };
        let max_attempts = self.restarts.claim.max_attempts;
        match lifecycle::start(fetched, age, o.attempt, deadline, max_attempts) {
            Start::Wait => Ok(()),
            Start::GiveUp => {
                let why = format!(
                    "the executor did not fetch its task within {} in {} attempt(s) (image pull stuck, crash loop, the sandbox never booted, or its runner never started); giving up",
                    self.restarts.claim.start_deadline.as_str(),
                    o.attempt
                );
                self.fail(o.task, &why).await
            }
            Start::Replace { attempt } => self.replace(o, attempt).await,
        }
    }

    /// Reports FAILURE, then deletes; while Gitea is unreachable the executor stays (next
    /// pass). Ok once Gitea has been told (or refused to hear it) and the executor is gone.
    async fn fail(&mut self, task: TaskId, reason: &str) -> Result<(), ReconcileError> {
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
            return Err(ReconcileError::NotReported);
        }
        self.delete(task, Deleting::Failed).await
    }

    /// Writes the history marks the backend saw on `o` that this term has not written yet.
    fn mark_seen(&mut self, o: &Observed) {
        let done = self.marked.entry(o.task).or_default();
        let new: Vec<_> = o
            .marks
            .iter()
            .filter(|(m, _)| done.insert(*m))
            .copied()
            .collect();
        let waited = o.waited_for_node.filter(|_| self.waited.insert(o.task));
        if !new.is_empty() || waited.is_some() {
            // One write for what one pass saw (a Pod scheduled and started at once).
            let seen = Observation {
                marks: new,
                class: o.class.clone(),
                waited_for_node: waited,
                ..Observation::default()
            };
            self.ctx.ledger.mark(o.task, seen);
        }
    }

    /// Deletes `task`'s executors and forgets the task (its slot, its retry); the last delete
    /// of a task (done, or failed) is its history's `gone`.
    async fn delete(&mut self, task: TaskId, deleting: Deleting) -> Result<(), ReconcileError> {
        self.executors
            .delete(task)
            .await
            .map_err(|e| ReconcileError::Delete(deleting, e))?;
        if matches!(deleting, Deleting::Executor | Deleting::Failed) {
            let gone = Observation::mark(Mark::Gone, chrono::Utc::now());
            self.ctx.ledger.mark(task, gone);
            self.marked.remove(&task);
            self.waited.remove(&task);
        }
        self.ctx.registry.finished(task);
        self.logged.remove(&task);
        self.retries.remove(&task);
        Ok(())
    }
}

/// Whether `r` settled what it was for: done, or a FAILURE reported whose executor's delete
/// is left to the executor's own passes (it is not reported twice).
fn settled(r: &Result<(), ReconcileError>) -> bool {
    matches!(r, Ok(()) | Err(ReconcileError::Delete(Deleting::Failed, _)))
}

/// What one observed executor asks of the next pass by itself (pure): soon while its
/// decision is to be carried out (a delete to confirm), at its start deadline while it has
/// not fetched, when its backend's decision changes with time alone; else nothing.
fn planned(o: &Observed, start_deadline: Duration) -> Action {
    if matches!(
        o.decision,
        Decision::Delete | Decision::FailAndDelete { .. }
    ) {
        return Action::RequeueAfter(RESYNC);
    }
    let deadline = (!o.terminal && o.progress.is_none_or(|p| p < Progress::Fetched))
        .then(|| start_deadline.checked_sub(o.age?))
        .flatten();
    // Just past the moment, so the pass sees it passed.
    match deadline.into_iter().chain(o.recheck).min() {
        Some(left) => Action::RequeueAfter(left + Duration::from_millis(100)),
        None => Action::AwaitChange,
    }
}

/// When the next pass is due if nothing wakes the reconciler (pure): the earliest of the
/// actions, at the latest after `resync` (what awaits a change waits for the resync).
fn next_pass(actions: impl IntoIterator<Item = Action>, resync: Duration) -> Duration {
    actions
        .into_iter()
        .filter_map(|a| match a {
            Action::RequeueAfter(d) => Some(d),
            Action::AwaitChange => None,
        })
        .fold(resync, Duration::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor(task: TaskId, decision: Decision, age: u64, progress: Progress) -> Observed {
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
            marks: Vec::new(),
            waited_for_node: None,
        }
    }

    /// The next pass over `found` (and `unsettled`: a retry or a missing executor left).
    fn due(
        found: &BTreeMap<TaskId, Observed>,
        unsettled: bool,
        start_deadline: Duration,
        resync: Duration,
    ) -> Duration {
        let actions = found.values().map(|o| planned(o, start_deadline));
        let retry = unsettled.then_some(Action::RequeueAfter(RESYNC));
        next_pass(actions.chain(retry), resync)
    }

    #[test]
    fn the_next_pass_waits_for_a_change_a_start_deadline_or_the_resync() {
        let (s, deadline, resync) = (
            Duration::from_secs,
            Duration::from_secs(180),
            Duration::from_secs(300),
        );
        let running: BTreeMap<TaskId, Observed> = (1..=3)
            .map(TaskId::new)
            .map(|t| (t, executor(t, Decision::Keep, 60, Progress::Reported)))
            .collect();
        assert_eq!(
            due(&running, false, deadline, resync),
            resync,
            "steady state"
        );
        let mut starting = running.clone();
        starting.insert(
            TaskId::new(4),
            executor(TaskId::new(4), Decision::Keep, 170, Progress::Unfetched),
        );
        assert_eq!(
            due(&starting, false, deadline, resync),
            s(10) + Duration::from_millis(100),
            "the unfetched one's start deadline"
        );
        let mut vanishing = running.clone();
        vanishing.insert(
            TaskId::new(6),
            Observed {
                recheck: Some(s(4)),
                marks: Vec::new(),
                waited_for_node: None,
                ..executor(TaskId::new(6), Decision::Keep, 6, Progress::Fetched)
            },
        );
        assert_eq!(
            due(&vanishing, false, deadline, resync),
            s(4) + Duration::from_millis(100),
            "a grace running out"
        );
        assert_eq!(
            due(&running, true, deadline, resync),
            RESYNC,
            "something left to do"
        );
        let mut ended = running.clone();
        ended.insert(
            TaskId::new(5),
            executor(TaskId::new(5), Decision::Delete, 60, Progress::Reported),
        );
        assert_eq!(
            due(&ended, false, deadline, resync),
            RESYNC,
            "a delete to confirm"
        );
        assert_eq!(
            due(&running, false, deadline, s(1)),
            s(1),
            "a polling backend"
        );
    }
}
