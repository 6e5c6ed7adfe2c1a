//! The lifecycle reconciler of the pod backend (leader only; `vm::reconciler` is the VM
//! backend's): lists the executor objects, asks
//! `lifecycle::decide` about each, and carries the decision out. It also rebuilds the claim
//! registry at the start of a leadership term (recovery): it reads the claim ledger first,
//! then every executor found takes a backend slot, so no more executors start than capacity
//! allows, and none is started twice. Ledger entries whose executor is gone are carried out
//! by the passes as `recovery::decide` says (started again, or FAILURE), retried each pass
//! until Gitea and the apiserver took them.
//!
//! Start deadline: an executor that has not called FetchTask `claim.start_deadline` after its
//! objects were created (image pull stuck, crash loop, sandbox never boots) is deleted and
//! replaced by the next attempt of the same task (re-sealed for it, with a fresh capability,
//! keeping its slot), as long as Gitea still has the task open; after `claim.max_attempts` the
//! task is reported as FAILURE with a log line saying so. The reconciler is the one actor
//! that deletes executors, so a replacement never races its own pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::lifecycle::{self, Decision, Start};
use crate::backend::pod::executor::ExecutorSpec;
use crate::backend::pod::objects::{ExecutorObjects, Observed};
use crate::backend::recovery::{self, Recovery};
use crate::backend::registry::Registry;
use crate::backend::report;
use crate::backend::worker::ExecutorTemplate;
use crate::config::Claim;
use crate::facade::capability::CapabilityKey;
use crate::identity::registrar::Registrar;
use crate::metrics::Metrics;
use crate::queue::Backend;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::queue::consumer::Slot;
use crate::queue::ledger::{Entry, Ledger, LedgerError, Phase};
use tenantci_core::forge::gitea::client::RunnerClient;

/// Full resync interval; the facade's terminal marker and freed slots also wake it at once.
pub const RESYNC: Duration = Duration::from_secs(2);

pub struct Reconciler {
    pub objects: ExecutorObjects,
    pub gitea: RunnerClient,
    pub registry: Arc<Registry>,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    /// Tasks already logged as kept-unknown (logged once, not every resync).
    pub logged: BTreeSet<i64>,
    /// For replacing an executor that never fetched its task.
    pub restarts: Restarts,
    /// Ledger entries whose executor recovery found gone, until carried out.
    pub lost: BTreeMap<i64, (Entry, Recovery)>,
    /// A backend slot for an executor recovery starts again (None when all are taken).
    pub reserve: Box<dyn Fn() -> Option<Slot> + Send + Sync>,
    /// Identity on: each executor Pod's SPIRE entry, written once it is scheduled and
    /// deleted with it.
    pub entries: Option<Registrar>,
}

/// Why recovery could not read what it needs.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("cannot list executor objects: {0}")]
    Apiserver(#[from] kube::Error),
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

impl Reconciler {
    /// Recovery: the claim ledger first, then every executor found is registered as running
    /// with a reserved slot; entries without executor are queued in `lost` for the passes.
    pub async fn recover(&mut self) -> Result<BTreeMap<i64, Observed>, RecoverError> {
        let entries = self.ledger.entries().await?;
        let found = self.objects.list().await?;
        self.lost.clear();
        for e in entries.into_iter().filter(|e| e.backend == Backend::Pod) {
            if recovery::waits_in_the_queue(&e, found.contains_key(&e.task)) {
                // Queued by an earlier term: kept alive at Gitea until its executor starts.
                self.registry.queued(e.task, Backend::Pod);
            }
            match recovery::decide(&e, found.contains_key(&e.task)) {
                Recovery::Leave => {}
                action => {
                    self.lost.insert(e.task, (e, action));
                }
            }
        }
        let reserve = &self.reserve;
        // A Secret still holding its assignment without a Pod is a start cut short: its
        // assignment was not acked, so it comes back and the worker finishes the start.
        for o in found.values().filter(|o| o.pod_exists || !o.unfetched) {
            self.registry.running(o.task_id, Backend::Pod, reserve);
        }
        tracing::info!(
            executors = found.len(),
            lost = self.lost.len(),
            "recovered executors from the claim ledger and the apiserver"
        );
        Ok(found)
    }

    /// Carries out what recovery decided for entries whose executor is gone; what cannot be
    /// done now (Gitea or the apiserver away) stays for the next pass.
    async fn recover_lost(&mut self) {
        let lost = std::mem::take(&mut self.lost);
        for (task, (entry, action)) in lost {
            let done = match &action {
                Recovery::Leave => true,
                Recovery::Delete => {
                    tracing::info!(
                        task,
                        "the claim ledger has the task as over; deleting its executor objects"
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
    }

    /// Starts the next attempt of a task whose executor vanished before it fetched the task,
    /// from the ledger's sealed assignment, if Gitea still has it open. True when settled.
    async fn restart_lost(&mut self, entry: &Entry) -> bool {
        let task = entry.task;
        match report::still_open(&self.gitea, &self.ledger, task).await {
            Some(true) => {}
            Some(false) => return true,
            None => return false,
        }
        let Some(sealed) = entry.assignment.as_ref().map(Assignment::to_json) else {
            return true;
        };
        let attempt = entry.attempt + 1;
        let (assignment, spec) = match self.restarts.next_attempt(task, &sealed, attempt) {
            Ok(r) => r,
            Err(why) => return self.fail(task, &why).await,
        };
        if let Err(e) = self.objects.create(&spec, &assignment.to_json()).await {
            tracing::warn!(task, attempt, error = %e, "cannot start the lost task again; retrying next pass");
            return false;
        }
        let step = Entry::step(task, attempt, entry.backend, Phase::Started);
        self.ledger.note(step.with_assignment(&assignment)).await;
        self.registry.running(task, entry.backend, &self.reserve);
        self.metrics.restarted();
        tracing::warn!(
            task,
            attempt,
            "the executor of attempt {} was lost before it fetched its task (its Pod and Secret are gone); started again as attempt {attempt}",
            entry.attempt
        );
        true
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
        self.recover_lost().await;
        // Taken before the list: an executor registered by then must be in the list.
        let registered: BTreeSet<i64> = self
            .registry
            .running_tasks_of(Backend::Pod)
            .into_iter()
            .collect();
        let found = self.objects.list().await?;
        if let Some(entries) = &mut self.entries {
            entries.reconcile(&found).await;
        }
        for o in found.values() {
            if !o.pod_exists && o.unfetched && !registered.contains(&o.task_id) {
                // Being started right now (Secret first, then Pod), or a start cut short
                // whose assignment will be redelivered: the worker owns it.
                continue;
            }
            if registered.contains(&o.task_id) && self.start_overdue(o).await {
                continue;
            }
            self.one(o).await;
        }
        // Registered executors whose objects are gone, though we did not delete them.
        for task in registered {
            // Re-checked: a task withdrawn meanwhile is no longer registered, and its
            // objects were deleted on purpose.
            if !found.contains_key(&task) && self.registry.is_running(task) {
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
                    self.metrics.completed(Backend::Pod);
                    tracing::info!(
                        task = o.task_id,
                        "task done; executor Pod and Secret deleted"
                    );
                }
            }
            Decision::FailAndDelete { reason } => {
                self.fail(o.task_id, &reason).await;
            }
            Decision::KeepUnknown { reason } => {
                if self.logged.insert(o.task_id) {
                    tracing::warn!(task = o.task_id, "{reason}");
                }
            }
        }
    }

    /// Handles an executor past its start deadline; false when it is not (or fetched).
    async fn start_overdue(&mut self, o: &Observed) -> bool {
        let (Some(age), true, false) = (o.age, o.unfetched, o.terminal) else {
            return false;
        };
        let c = &self.restarts.claim;
        let deadline = c.start_deadline.get();
        match lifecycle::start(o.fetched, age, o.attempt, deadline, c.max_attempts) {
            Start::Wait => false,
            Start::GiveUp => {
                let why = format!(
                    "the executor did not fetch its task within {} in {} attempt(s) (image pull stuck, crash loop, or the sandbox never booted); giving up",
                    c.start_deadline.as_str(),
                    o.attempt
                );
                self.fail(o.task_id, &why).await;
                true
            }
            Start::Replace { attempt } => {
                self.replace(o, attempt).await;
                true
            }
        }
    }

    /// Deletes the executor of `o` and starts `attempt` of the same task, if Gitea still has
    /// it open. Anything unreachable: left for the next pass.
    async fn replace(&mut self, o: &Observed, attempt: u32) {
        let task = o.task_id;
        match report::still_open(&self.gitea, &self.ledger, task).await {
            Some(true) => {}
            Some(false) => {
                self.registry.finished(task);
                let _ = self.objects.delete(task).await;
                return;
            }
            None => return,
        }
        let next = match self.objects.sealed_assignment(task).await {
            Ok(Some(sealed)) => self.restarts.next_attempt(task, &sealed, attempt),
            Ok(None) => return, // Consumed meanwhile: the executor reported after all.
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot read the executor Secret");
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
        if let Err(e) = self.objects.delete(task).await {
            tracing::warn!(task, error = %e, "cannot delete the stuck executor; retrying next pass");
            return;
        }
        let r = &self.restarts;
        match self.objects.create(&spec, &assignment.to_json()).await {
            Ok(_) => {
                let step = Entry::step(task, attempt, Backend::Pod, Phase::Started);
                self.ledger.note(step.with_assignment(&assignment)).await;
                self.metrics.restarted();
                tracing::warn!(
                    task,
                    attempt,
                    previous = o.attempt,
                    "the executor did not fetch its task within {}; replaced by attempt {attempt}",
                    r.claim.start_deadline.as_str()
                );
            }
            // The next pass finds the task registered without objects and reports FAILURE.
            Err(e) => {
                tracing::error!(task, attempt, error = %e, "cannot create the replacement executor")
            }
        }
    }

    /// Reports FAILURE, then deletes; while Gitea is unreachable the objects stay (next
    /// pass). True once Gitea has been told (or refused to hear it).
    async fn fail(&mut self, task: i64, reason: &str) -> bool {
        if !report::executor_failed(
            &self.gitea,
            &self.ledger,
            &self.metrics,
            Backend::Pod,
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
        match self.objects.delete(task).await {
            Ok(()) => {
                self.registry.finished(task);
                self.logged.remove(&task);
                if let Some(entries) = &mut self.entries {
                    // Not done: the next pass finds the entry without its Pod.
                    entries.forget(task).await;
                }
                true
            }
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot delete the executor objects; retrying next pass");
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
