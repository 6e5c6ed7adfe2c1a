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
//! - every create goes through the backend's own classification (`Executors::start`): a
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
use crate::backend::{BackendError, Executors, Observed};
use crate::queue::assignment::Assignment;
use crate::task::Claim;
use crate::task::Progress;
use crate::task::ledger::{Entry, LedgerError};
use crate::task::recovery::Recovery;
use crate::task::report;
use crate::task::spec::{ExecutorSpec, ExecutorTemplate};
use slots::{Slots, SpareSlots};

/// Full resync interval; the facade's terminal marker and freed slots also wake it at once.
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
    executors: Arc<dyn Executors>,
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
}

impl Reconciler {
    pub fn new(
        executors: Arc<dyn Executors>,
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
        }
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                tracing::warn!(backend = %self.executors.backend(), error = %e, "reconcile: cannot list the executors at the backend's API (the tenant apiserver or OpenSandbox); trying again at the next pass");
            }
            tokio::select! {
                _ = tokio::time::sleep(RESYNC) => {}
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
            {
                let why = format!(
                    "{} before the task reported a final state",
                    self.executors.nouns().gone
                );
                self.fail(task, &why).await;
            }
        }
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
