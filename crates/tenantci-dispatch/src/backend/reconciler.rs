//! The lifecycle reconciler of one backend (leader only), the same code for every backend:
//! observes the backend's executors, carries out the decision its table gives for each, and
//! rebuilds the claim registry at the start of a leadership term (recovery).
//!
//! Recovery reads the claim ledger first, then every complete executor found takes a backend
//! slot, so no more executors start than capacity allows, and none is started twice. Ledger
//! entries whose executor is gone are carried out by the passes as `recovery::decide` says
//! (started again, or FAILURE), retried each pass until Gitea and the backend took them.
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

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::backend::lifecycle::{self, Decision, Start};
use crate::backend::recovery::{self, Recovery};
use crate::backend::registry::Registry;
use crate::backend::report;
use crate::backend::spec::{ExecutorSpec, ExecutorTemplate};
use crate::backend::{BackendError, Executors, Observed, Progress, StartError};
use crate::config::Claim;
use crate::facade::capability::CapabilityKey;
use crate::metrics::Metrics;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::queue::consumer::{CappedConsumer, Slot};
use crate::queue::ledger::{Entry, Ledger, LedgerError, Phase};
use tenantci_core::forge::gitea::client::RunnerClient;

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
    pub sealing_key: SealingKey,
    pub capability_key: CapabilityKey,
    pub template: ExecutorTemplate,
}

impl Restarts {
    /// Attempt `attempt` of `task` from its stored sealed assignment: re-sealed for it, and
    /// its executor's spec (with a fresh capability, bound to the task's SPIFFE ID when
    /// identity is on). An error is why it cannot be started: the caller reports FAILURE.
    pub fn next_attempt(
        &self,
        task: i64,
        sealed: &[u8],
        attempt: u32,
    ) -> Result<(Assignment, ExecutorSpec), String> {
        let (assignment, labels) = reseal(&self.sealing_key, sealed, attempt)?;
        let identity = self.template.spiffe_id(&assignment)?;
        let spec = self
            .template
            .spec(&self.capability_key, task, attempt, labels, identity);
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
    gitea: RunnerClient,
    registry: Arc<Registry>,
    ledger: Ledger,
    metrics: Arc<Metrics>,
    restarts: Restarts,
    /// The backend's admission slots: an executor recovery finds or starts again takes one.
    slots: Arc<CappedConsumer>,
    /// Slots taken for executors recovery starts again, not used yet.
    spare: Vec<Slot>,
    /// Slots awaited in the background (in turn with the worker's pulls), as they arrive.
    arriving: mpsc::UnboundedReceiver<Slot>,
    arrive: mpsc::UnboundedSender<Slot>,
    /// The background waits for a slot; dropped (aborted) with the reconciler.
    awaiting: JoinSet<()>,
    /// Tasks already logged as kept-unknown (logged once, not every resync).
    logged: BTreeSet<i64>,
    /// Ledger entries whose executor recovery found gone, until carried out.
    lost: BTreeMap<i64, (Entry, Recovery)>,
    /// Replacements the backend did not take yet, by task.
    replacing: BTreeMap<i64, Replacement>,
}

/// The executor's progress from the claim ledger's phase.
fn progress_of(phase: Phase) -> Progress {
    match phase {
        Phase::Claimed | Phase::Queued | Phase::Started => Progress::Unfetched,
        Phase::Fetched => Progress::Fetched,
        Phase::Reported | Phase::Final => Progress::Reported,
    }
}

impl Reconciler {
    pub fn new(
        executors: Arc<dyn Executors>,
        gitea: RunnerClient,
        registry: Arc<Registry>,
        ledger: Ledger,
        metrics: Arc<Metrics>,
        restarts: Restarts,
        slots: Arc<CappedConsumer>,
    ) -> Self {
        let (arrive, arriving) = mpsc::unbounded_channel();
        Reconciler {
            executors,
            gitea,
            registry,
            ledger,
            metrics,
            restarts,
            slots,
            spare: Vec::new(),
            arriving,
            arrive,
            awaiting: JoinSet::new(),
            logged: BTreeSet::new(),
            lost: BTreeMap::new(),
            replacing: BTreeMap::new(),
        }
    }

    /// Recovery: the claim ledger first, then every complete executor found is registered as
    /// running with a reserved slot; entries without executor are queued in `lost` for the
    /// passes.
    pub async fn recover(&mut self) -> Result<(), RecoverError> {
        let backend = self.executors.backend();
        let entries = self.ledger.entries().await?;
        let found = self.executors.observe().await?;
        self.lost.clear();
        for e in entries.into_iter().filter(|e| e.backend == backend) {
            let has = found.contains_key(&e.task);
            if recovery::waits_in_the_queue(&e, has) {
                // Queued by an earlier term: kept alive at Gitea until its executor starts.
                self.registry.queued(e.task, backend);
            }
            match recovery::decide(&e, has) {
                Recovery::Leave => {}
                action => {
                    if action == Recovery::Restart {
                        // Kept alive at Gitea (and withdrawn if cancelled there) while it
                        // waits for its slot, as a queued assignment is.
                        self.registry.queued(e.task, backend);
                    }
                    self.lost.insert(e.task, (e, action));
                }
            }
        }
        // An incomplete executor is a start cut short: its assignment was not acked, so it
        // comes back and the worker finishes the start.
        for o in found.values().filter(|o| o.complete) {
            self.registry
                .running(o.task, backend, || self.slots.reserve_slot());
        }
        // Slots for the executors to start again, taken before the worker pulls anything
        // (recovery runs first): what was running before the crash runs before what waits.
        self.spare.clear();
        let restarts = self.lost.values().filter(|(_, a)| *a == Recovery::Restart);
        for _ in restarts {
            match self.slots.reserve_slot() {
                Some(slot) => self.spare.push(slot),
                None => break,
            }
        }
        tracing::info!(
            executors = found.len(),
            lost = self.lost.len(),
            "recovered {} from the claim ledger and {}",
            self.executors.nouns().executors,
            self.executors.nouns().source
        );
        Ok(())
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                tracing::warn!(backend = %self.executors.backend(), error = %e, "reconcile: cannot list the executors");
            }
            tokio::select! {
                _ = tokio::time::sleep(RESYNC) => {}
                _ = self.registry.changed() => {}
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
                && self.registry.is_running(task)
            {
                let why = format!(
                    "{} before the task reported a final state",
                    self.executors.nouns().gone
                );
                self.fail(task, &why).await;
            }
        }
        self.metrics
            .in_use(backend, self.registry.running_count(backend));
        Ok(())
    }

    async fn one(&mut self, o: &Observed) {
        match &o.decision {
            Decision::Keep => self.check_start(o).await,
            Decision::Delete => {
                if self.delete(o.task).await {
                    self.metrics.completed(self.executors.backend());
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
        if o.progress.is_some() {
            return o.progress;
        }
        match self.ledger.get(o.task).await {
            Ok(Some(e)) if e.attempt == o.attempt => Some(progress_of(e.phase)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(task = o.task, error = %e, "cannot read the claim ledger; the start deadline is checked next pass");
                None
            }
        }
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

    /// Deletes the executor of `o` and starts `attempt` of the same task, if Gitea still has
    /// it open. Anything unreachable: left for the next pass.
    async fn replace(&mut self, o: &Observed, attempt: u32) {
        let task = o.task;
        match report::still_open(&self.gitea, &self.ledger, task).await {
            Some(true) => {}
            Some(false) => {
                self.delete(task).await;
                return;
            }
            None => return,
        }
        let next = match self.executors.sealed_assignment(task).await {
            Ok(Some(sealed)) => self.restarts.next_attempt(task, &sealed, attempt),
            Ok(None) => return, // Consumed meanwhile: the executor reported after all.
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot read the task's sealed assignment");
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
    async fn retry_replacements(&mut self) {
        let tasks: Vec<i64> = self.replacing.keys().copied().collect();
        for task in tasks {
            match report::still_open(&self.gitea, &self.ledger, task).await {
                Some(true) => self.start_replacement(task).await,
                Some(false) => {
                    self.replacing.remove(&task);
                    self.registry.finished(task);
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
                self.ledger.note(step.with_assignment(&r.assignment)).await;
                self.metrics.restarted();
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

    /// Carries out what recovery decided for entries whose executor is gone; what cannot be
    /// done now (Gitea or the backend away, no free slot) stays for the next pass.
    async fn recover_lost(&mut self) {
        let lost = std::mem::take(&mut self.lost);
        for (task, (entry, action)) in lost {
            let done = match &action {
                Recovery::Leave => true,
                Recovery::Delete => {
                    tracing::info!(
                        task,
                        "the claim ledger has the task as over; deleting its executor"
                    );
                    self.delete(task).await
                }
                Recovery::Fail { reason } => self.fail(task, reason).await,
                Recovery::Restart => self.restart_lost(&entry).await,
            };
            if !done {
                self.lost.insert(task, (entry, action));
            }
        }
        if !self.lost.values().any(|(_, a)| *a == Recovery::Restart) {
            // Nothing left to start again: spare slots go back to the worker.
            while self.arriving.try_recv().is_ok() {}
            self.spare.clear();
        }
    }

    /// A slot for an executor recovery starts again: a spare one, or None while one is
    /// awaited in the background (the pass never waits for one).
    fn take_slot(&mut self) -> Option<Slot> {
        while let Ok(slot) = self.arriving.try_recv() {
            self.spare.push(slot);
        }
        if let Some(slot) = self.spare.pop() {
            return Some(slot);
        }
        while self.awaiting.try_join_next().is_some() {}
        if self.awaiting.is_empty() {
            let (wait, arrive) = (self.slots.acquire_slot(), self.arrive.clone());
            self.awaiting.spawn(async move {
                if let Some(slot) = wait.await {
                    let _ = arrive.send(slot);
                }
            });
        }
        None
    }

    /// Starts the next attempt of a task whose executor vanished before it fetched the task,
    /// from the ledger's sealed assignment, if Gitea still has it open. True when settled.
    /// A slot first: recovery never starts more executors than the capacity, and a task that
    /// waits for one costs Gitea nothing but the keep-alive.
    async fn restart_lost(&mut self, entry: &Entry) -> bool {
        let Some(slot) = self.take_slot() else {
            return false;
        };
        let (settled, unused) = self.start_again(entry, slot).await;
        if let Some(slot) = unused {
            self.spare.push(slot);
            if settled {
                // Over without a new executor: nothing to keep alive any more.
                self.registry.finished(entry.task);
            }
        }
        settled
    }

    /// `restart_lost` with its slot: whether the entry is settled, and the slot unless the
    /// new executor holds it.
    async fn start_again(&mut self, entry: &Entry, slot: Slot) -> (bool, Option<Slot>) {
        let task = entry.task;
        match report::still_open(&self.gitea, &self.ledger, task).await {
            Some(true) => {}
            Some(false) => return (true, Some(slot)),
            None => return (false, Some(slot)),
        }
        let Some(sealed) = entry.assignment.as_ref().map(Assignment::to_json) else {
            return (true, Some(slot));
        };
        let attempt = entry.attempt + 1;
        let (assignment, spec) = match self.restarts.next_attempt(task, &sealed, attempt) {
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
            Err(StartError::Unavailable(why)) => {
                tracing::warn!(task, attempt, error = %why, "cannot start the lost task again; retrying next pass");
                return (false, Some(slot));
            }
            Err(StartError::Refused(why)) => {
                let line = format!("the executor could not be created: {why}");
                return (self.fail(task, &line).await, Some(slot));
            }
        }
        let backend = self.executors.backend();
        let step = Entry::step(task, attempt, backend, Phase::Started);
        self.ledger.note(step.with_assignment(&assignment)).await;
        self.registry.running(task, backend, || Some(slot));
        self.metrics.restarted();
        tracing::warn!(
            task,
            attempt,
            "the {executor} of attempt {} was lost before it fetched its task; started again as attempt {attempt}",
            entry.attempt
        );
        (true, None)
    }

    /// Reports FAILURE, then deletes; while Gitea is unreachable the executor stays (next
    /// pass). True once Gitea has been told (or refused to hear it).
    async fn fail(&mut self, task: i64, reason: &str) -> bool {
        let backend = self.executors.backend();
        if !report::executor_failed(
            &self.gitea,
            &self.ledger,
            &self.metrics,
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
                self.registry.finished(task);
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

/// A stored assignment, sealed again for `attempt` (the attempt is sealed in), and its labels.
pub fn reseal(
    key: &SealingKey,
    sealed: &[u8],
    attempt: u32,
) -> Result<(Assignment, Vec<String>), String> {
    let a = Assignment::from_json(sealed)
        .map_err(|e| format!("the stored assignment does not decode ({e})"))?;
    let payload = a
        .open(key)
        .map_err(|e| format!("the stored assignment does not open ({e})"))?;
    let next = Assignment::seal(
        key,
        &a.task_id,
        attempt,
        a.backend,
        a.labels.clone(),
        &payload,
    )
    .map_err(|e| format!("the assignment cannot be sealed again ({e})"))?;
    Ok((next, a.labels))
}
