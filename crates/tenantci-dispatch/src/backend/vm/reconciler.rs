//! The VM backend's lifecycle reconciler (leader only), beside the pod backend's: lists this
//! dispatcher's sandboxes, asks `vm::lifecycle::decide` about each and carries the decision
//! out; at the start of a leadership term it rebuilds the VM slots from the sandboxes the API
//! lists for this dispatcher (recovery), after reading the claim ledger, whose VM entries
//! without a sandbox are started again or failed as `recovery::decide` says.
//!
//! A sandbox is deleted only after its terminal marker, or after FAILURE was reported for it;
//! a registered task whose sandbox is gone (deleted by someone, expired) gets FAILURE.
//!
//! Start deadline, as for Pods (`lifecycle::start`): a sandbox whose executor has not fetched
//! its task `claim.start_deadline` after the sandbox was created (never boots, image missing,
//! runner crashing) is deleted and replaced by the next attempt, re-sealed from the claim
//! ledger's assignment, keeping its slot, while Gitea has the task open; after
//! `claim.max_attempts` the task is reported as FAILURE.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::watch;

use crate::backend::lifecycle::{Decision, Start};
use crate::backend::reconciler::{RESYNC, Restarts};
use crate::backend::recovery::{self, Recovery};
use crate::backend::registry::Registry;
use crate::backend::report;
use crate::backend::vm::lifecycle;
use crate::backend::vm::sandbox;
use crate::backend::vm::sandboxes::Sandboxes;
use crate::backend::worker::Executors as _;
use crate::metrics::Metrics;
use crate::queue::Backend;
use crate::queue::assignment::Assignment;
use crate::queue::consumer::Slot;
use crate::queue::ledger::{Entry, Ledger, LedgerError, Phase};
use tenantci_core::forge::gitea::client::RunnerClient;
use tenantci_core::opensandbox::{ApiError, Sandbox};

pub struct VmReconciler {
    pub sandboxes: Sandboxes,
    pub gitea: RunnerClient,
    pub registry: Arc<Registry>,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    pub restarts: Restarts,
    /// Tasks already logged as kept-unknown.
    pub logged: BTreeSet<i64>,
    /// Ledger entries whose sandbox recovery found gone, until carried out.
    pub lost: BTreeMap<i64, (Entry, Recovery)>,
    /// A VM slot for a sandbox recovery found or starts again (None when all are taken).
    pub reserve: Box<dyn Fn() -> Option<Slot> + Send + Sync>,
}

#[derive(Debug, thiserror::Error)]
pub enum VmRecoverError {
    #[error("cannot list the sandboxes: {0}")]
    Api(#[from] ApiError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl VmReconciler {
    /// Recovery: the ledger's VM entries, then every sandbox of this dispatcher takes a slot.
    pub async fn recover(&mut self) -> Result<(), VmRecoverError> {
        let entries = self.ledger.entries().await?;
        let found = self.sandboxes.owned().await?;
        self.lost.clear();
        for e in entries.into_iter().filter(|e| e.backend == Backend::Vm) {
            let has = found.contains_key(&e.task);
            if recovery::waits_in_the_queue(&e, has) {
                self.registry.queued(e.task, Backend::Vm);
            }
            match recovery::decide(&e, has) {
                Recovery::Leave => {}
                action => {
                    self.lost.insert(e.task, (e, action));
                }
            }
        }
        for task in found.keys() {
            self.registry.running(*task, Backend::Vm, &self.reserve);
        }
        tracing::info!(
            sandboxes = found.len(),
            lost = self.lost.len(),
            "recovered VM sandboxes from the claim ledger and the Lifecycle API"
        );
        Ok(())
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "reconcile: cannot list the VM sandboxes");
            }
            tokio::select! {
                _ = tokio::time::sleep(RESYNC) => {}
                _ = self.registry.changed() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One pass over every sandbox of this dispatcher.
    pub async fn pass(&mut self) -> Result<(), ApiError> {
        self.recover_lost().await;
        // Taken before the list: a sandbox registered by then must be in the list.
        let registered: BTreeSet<i64> = self
            .registry
            .running_tasks_of(Backend::Vm)
            .into_iter()
            .collect();
        let found = self.sandboxes.owned().await?;
        for (task, s) in &found {
            let decision = lifecycle::decide(s);
            // Not registered: being started right now (created, not yet registered); the
            // worker owns it, unless Gitea has its final state already.
            if !registered.contains(task) && decision != Decision::Delete {
                continue;
            }
            match decision {
                Decision::Keep => self.check_start(*task, s).await,
                Decision::Delete => {
                    if self.delete(*task).await {
                        self.metrics.completed(Backend::Vm);
                        tracing::info!(task, sandbox = %s.id, "task done; VM sandbox deleted");
                    }
                }
                Decision::FailAndDelete { reason } => {
                    self.fail(*task, &reason).await;
                }
                Decision::KeepUnknown { reason } => {
                    if self.logged.insert(*task) {
                        tracing::warn!(task, "{reason}");
                    }
                }
            }
        }
        for task in registered {
            if !found.contains_key(&task) && self.registry.is_running(task) {
                self.fail(task, "the VM sandbox vanished (deleted or expired) before the task reported a final state").await;
            }
        }
        self.metrics
            .in_use(Backend::Vm, self.registry.running_count(Backend::Vm));
        Ok(())
    }

    /// The start deadline of `task`'s live sandbox `s` (see the module header).
    async fn check_start(&mut self, task: i64, s: &Sandbox) {
        let Some((_, attempt)) = sandbox::task_of(s) else {
            return;
        };
        let claim = &self.restarts.claim;
        let deadline = claim.start_deadline.get();
        let age = age(s);
        // Young sandboxes are the common case: the ledger is read only past the deadline.
        if age < deadline {
            return;
        }
        let entry = match self.ledger.get(task).await {
            Ok(Some(e)) if e.attempt == attempt => e,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot read the claim ledger; the start deadline is checked next pass");
                return;
            }
        };
        let fetched = entry.phase >= Phase::Fetched;
        match crate::backend::lifecycle::start(fetched, age, attempt, deadline, claim.max_attempts)
        {
            Start::Wait => {}
            Start::GiveUp => {
                let why = format!(
                    "the VM executor did not fetch its task within {} in {attempt} attempt(s) (the sandbox never booted, or its runner never started); giving up",
                    claim.start_deadline.as_str()
                );
                self.fail(task, &why).await;
            }
            Start::Replace { attempt: next } => self.replace(&entry, s, next).await,
        }
    }

    /// Deletes `old` and starts attempt `next` of its task from the ledger's assignment, if
    /// Gitea still has the task open. Anything unreachable: left for the next pass.
    async fn replace(&mut self, entry: &Entry, old: &Sandbox, next: u32) {
        let task = entry.task;
        match report::still_open(&self.gitea, &self.ledger, task).await {
            Some(true) => {}
            Some(false) => {
                self.delete(task).await;
                return;
            }
            None => return,
        }
        let Some(sealed) = entry.assignment.as_ref().map(Assignment::to_json) else {
            return;
        };
        let (assignment, spec) = match self.restarts.next_attempt(task, &sealed, next) {
            Ok(x) => x,
            Err(why) => {
                self.fail(task, &why).await;
                return;
            }
        };
        if let Err(e) = self.sandboxes.delete(&old.id).await {
            tracing::warn!(task, error = %e, "cannot delete the stuck sandbox; retrying next pass");
            return;
        }
        let r = &self.restarts;
        match self.sandboxes.start(&spec, &[], false).await {
            Ok(_) => {
                let step = Entry::step(task, next, Backend::Vm, Phase::Started);
                self.ledger.note(step.with_assignment(&assignment)).await;
                self.metrics.restarted();
                tracing::warn!(
                    task,
                    attempt = next,
                    "the VM executor did not fetch its task within {}; its sandbox was replaced by attempt {next}",
                    r.claim.start_deadline.as_str()
                );
            }
            // The next pass finds the task registered without a sandbox and reports FAILURE.
            Err(e) => {
                tracing::error!(task, attempt = next, error = %e, "cannot create the replacement sandbox")
            }
        }
    }

    async fn recover_lost(&mut self) {
        let lost = std::mem::take(&mut self.lost);
        for (task, (entry, action)) in lost {
            let done = match &action {
                Recovery::Leave => true,
                Recovery::Delete => self.delete(task).await,
                Recovery::Fail { reason } => self.fail(task, reason).await,
                Recovery::Restart => self.restart_lost(&entry).await,
            };
            if !done {
                self.lost.insert(task, (entry, action));
            }
        }
    }

    /// Starts the next attempt of a task whose sandbox vanished before its executor fetched
    /// the task, from the ledger's sealed assignment, if Gitea still has it open.
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
            Ok(x) => x,
            Err(why) => return self.fail(task, &why).await,
        };
        // A VM slot first: recovery never starts more sandboxes than the capacity.
        let Some(slot) = (self.reserve)() else {
            return false;
        };
        if let Err(e) = self.sandboxes.start(&spec, &[], false).await {
            tracing::warn!(task, attempt, error = %e, "cannot start the lost VM task again; retrying next pass");
            return false;
        }
        let step = Entry::step(task, attempt, Backend::Vm, Phase::Started);
        self.ledger.note(step.with_assignment(&assignment)).await;
        self.registry.running(task, Backend::Vm, || Some(slot));
        self.metrics.restarted();
        tracing::warn!(
            task,
            attempt,
            "the sandbox of attempt {} was lost before it fetched its task; started again as attempt {attempt}",
            entry.attempt
        );
        true
    }

    async fn fail(&mut self, task: i64, reason: &str) -> bool {
        if !report::executor_failed(
            &self.gitea,
            &self.ledger,
            &self.metrics,
            Backend::Vm,
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
        match self.sandboxes.delete_task(task).await {
            Ok(()) => {
                self.registry.finished(task);
                self.logged.remove(&task);
                true
            }
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot delete the VM sandbox; retrying next pass");
                false
            }
        }
    }
}

/// Since the sandbox was created, by its `createdAt`; unknown counts as new (never replaced
/// on a guess).
fn age(s: &Sandbox) -> std::time::Duration {
    s.created_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                .to_std()
                .ok()
        })
        .unwrap_or_default()
}
