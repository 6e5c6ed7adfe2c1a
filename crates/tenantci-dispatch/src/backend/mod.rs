//! Where an assignment runs: one executor per task attempt, on a backend.
//!
//! A backend implements [`Backend`], split by concern: [`ExecutorLifecycle`] (start, delete,
//! the end marker), [`ExecutorObservation`] (what exists, when it changed) and
//! [`AssignmentHandout`] (the sealed assignment to its executor), with its [`BackendFacts`]
//! (name, label, capacity, words). Backends register in [`catalog`], one line each
//! ([`provider`]: what a registration supplies); nothing outside this folder names one
//! (`scripts/check-layering.sh` refuses it). Everything else is written once over the traits:
//!
//! - [`worker`]: pulls assignments while a slot is free and starts their executors;
//! - [`reconciler`]: the lifecycle after a start (cleanup after the terminal marker, FAILURE
//!   for an executor that ended or vanished without a final state, the start deadline), and
//!   recovery at the start of a leadership term (`task::recovery` decides, pure);
//! - [`keep_alive`]: keeps tasks no executor has fetched yet alive at Gitea, and withdraws
//!   those Gitea ended meanwhile;
//! - [`lifecycle`]: the decisions a backend's observation maps to (pure);
//! - the task's state and what the dispatcher tells Gitea are the `task` module's (the claim
//!   ledger, the registry, `task::report`): this layer reaches them through [`Context`], whose
//!   ports (`task::report::{ClaimLedger, TaskReports}`) the testkit's fakes stand in for.
//!
//! A backend's folder holds only what is its own: [`pod`] the Kubernetes objects, [`vm`] the
//! OpenSandbox Lifecycle API, each with its observation -> decision table, and (feature
//! `fake-backend`, for tests) `fake`, executors as directories the test plays. A third
//! backend is one more folder and one line in [`catalog`]; one with a config section of its
//! own (as `[vm]`) also adds it to `config`, and one with an `init` step to `init`.

pub mod catalog;
#[cfg(feature = "fake-backend")]
pub mod fake;
pub mod keep_alive;
pub mod lifecycle;
pub mod pod;
pub mod provider;
pub mod reconciler;
pub mod vm;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use crate::backend_kind::{BackendFacts, BackendKind, Nouns};
use crate::metrics::Metrics;
use crate::task::Progress;
use crate::task::ledger::LedgerError;
use crate::task::registry::Registry;
use crate::task::report::{ClaimLedger, TaskReports};
use crate::task::spec::ExecutorSpec;
use crate::task_id::TaskId;
use lifecycle::Decision;

/// What the worker, the reconciler and keep-alive of every backend report to and record in:
/// Gitea, the term's claim registry, the claim ledger and the metrics. Gitea and the ledger
/// through their ports, so these decisions run against in-memory doubles in tests.
#[derive(Clone)]
pub struct Context {
    /// Gitea: keep-alives and FAILURE reports.
    pub gitea: Arc<dyn TaskReports>,
    /// The term's claim registry: tasks queued, executors running, the slots they hold.
    pub registry: Arc<Registry>,
    /// The claim ledger: each task's attempt, backend and phase, kept across terms.
    pub ledger: Arc<dyn ClaimLedger>,
    /// The dispatcher's metrics.
    pub metrics: Arc<Metrics>,
    /// The resource classes' demand, for their warm pools.
    pub warm: Arc<crate::sizing::demand::WarmDemand>,
}

/// What starting one executor found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created now.
    New,
    /// It existed with this assignment: a redelivery after a crash.
    Existing,
}

/// Whether a task's executor still exists (the facade's consume asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// It still exists.
    Present,
    /// It no longer exists: deleted, the task is over.
    Gone,
}

/// A cause kept whole: the backend's own error (a `kube::Error`, an OpenSandbox `ApiError`,
/// the claim ledger's), so whoever decides can downcast it instead of reading text.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an executor could not be started. Every create, the worker's and the reconciler's,
/// goes through a backend's own classification into one of these; the cause stays typed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Worth another try (the backend is unreachable, throttling, 5xx, busy).
    #[error(transparent)]
    Unavailable(Cause),
    /// It will never work (refused by policy, invalid, someone else's object).
    #[error(transparent)]
    Refused(Cause),
}

impl StartError {
    /// Worth another try, because of `cause`.
    pub fn unavailable(cause: impl Into<Cause>) -> Self {
        StartError::Unavailable(cause.into())
    }

    /// Never going to work, because of `cause`.
    pub fn refused(cause: impl Into<Cause>) -> Self {
        StartError::Refused(cause.into())
    }
}

/// A backend's API could not do what was asked (unreachable, or it refused).
#[derive(Debug, thiserror::Error)]
#[error("{api}: {source}")]
pub struct BackendError {
    /// The API, for the facade's answer: "the tenant apiserver".
    pub api: &'static str,
    /// What the API's client returned.
    pub source: Cause,
}

impl BackendError {
    /// `api` failed with `source`.
    pub fn new(api: &'static str, source: impl Into<Cause>) -> Self {
        BackendError {
            api,
            source: source.into(),
        }
    }
}

/// A scheduled executor that a SPIRE agent attests: what its SPIRE entry is written from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The executor Pod's name.
    pub pod_name: String,
    /// The executor Pod's UID, which the SPIRE entry's selector names.
    pub pod_uid: String,
    /// The node it was scheduled on, whose agent attests it.
    pub node_name: String,
    /// The Pod's `tenantci.io/spiffe-id` annotation (None: identity off).
    pub spiffe_id: Option<String>,
}

/// One task's executor as its backend observed it, in the terms the generic layer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The Gitea task it runs.
    pub task: TaskId,
    /// Which attempt at the task (1 first; a replacement counts up).
    pub attempt: u32,
    /// The backend's observation -> decision table applied to what it saw.
    pub decision: Decision,
    /// Gitea accepted the final state (the terminal marker is on it).
    pub terminal: bool,
    /// False while the start is cut short or under way (the pod backend's Secret without its
    /// Pod): recovery does not count it as running, the redelivered assignment finishes it.
    pub complete: bool,
    /// Since this attempt's executor was created; None: unknown (never replaced on a guess).
    pub age: Option<Duration>,
    /// None: the backend cannot tell; the claim ledger's phase says.
    pub progress: Option<Progress>,
    /// Where it runs, for backends whose executors a SPIRE agent attests.
    pub placement: Option<Placement>,
    /// Its resource class, where the backend records it (recovery holds the class's slot).
    pub class: Option<String>,
    /// The backend's decision changes with time alone after this long (a grace running out):
    /// the reconciler passes again then, whatever else wakes it.
    pub recheck: Option<Duration>,
    /// The task history's marks the backend saw on it, with their times (the pod backend's
    /// `scheduled` and `started`, from the Pod's status); empty: none it can tell.
    pub marks: Vec<(crate::task::history::Mark, chrono::DateTime<chrono::Utc>)>,
    /// When the backend saw the executor waiting for a node (the pod backend: its Pod
    /// unschedulable); None: not seen, or a backend that cannot tell.
    pub waited_for_node: Option<chrono::DateTime<chrono::Utc>>,
}

impl Observed {
    /// How far the executor got: the backend's word, or the claim ledger's phase when the
    /// backend cannot tell (None: the ledger has no entry for this attempt).
    pub async fn progress_in(
        &self,
        ledger: &dyn ClaimLedger,
    ) -> Result<Option<Progress>, LedgerError> {
        if self.progress.is_some() {
            return Ok(self.progress);
        }
        let entry = ledger.get(self.task).await?;
        Ok(entry
            .filter(|e| e.attempt == self.attempt)
            .map(|e| e.phase.progress()))
    }
}

/// A backend: its facts, and its executors' lifecycle, observation and hand-out.
/// Dyn-compatible: the generic layer holds `Arc<dyn Backend>`, the facade and keep-alive one
/// per backend.
pub trait Backend: ExecutorLifecycle + ExecutorObservation + AssignmentHandout {
    /// What it registered in [`catalog`].
    fn facts(&self) -> &'static BackendFacts;

    /// Which backend: its consumer, subject, capacity and metrics label.
    fn backend(&self) -> BackendKind {
        self.facts().kind
    }

    /// The words its messages use.
    fn nouns(&self) -> Nouns {
        self.facts().nouns
    }
}

/// Starting and ending one task's executor.
pub trait ExecutorLifecycle: Send + Sync + 'static {
    /// How long one start may wait out an outage of the backend's API inside a delivery
    /// before the assignment goes back to the queue. The reconciler never waits: it tries
    /// once per pass.
    fn patience(&self) -> Duration {
        Duration::ZERO
    }

    /// One try at starting the executor, idempotent by task and attempt. `fresh`: no
    /// executor of this task can exist yet (the assignment's first delivery, and the claim
    /// ledger names no other attempt), so a backend whose idempotence costs a lookup may skip
    /// it.
    fn start<'a>(
        &'a self,
        spec: &'a ExecutorSpec,
        sealed: &'a [u8],
        fresh: bool,
    ) -> BoxFuture<'a, Result<Created, StartError>>;

    /// Whether any executor of `task` exists.
    fn exists(&self, task: TaskId) -> BoxFuture<'_, Result<bool, BackendError>>;

    /// Deletes `task`'s executors (and whatever belongs to them); gone already is done.
    fn delete(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>>;

    /// Gitea accepted the final state: the executor may go.
    fn mark_terminal(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>>;
}

/// What exists, for the reconciler and keep-alive.
pub trait ExecutorObservation: Send + Sync + 'static {
    /// Every executor of this dispatcher on this backend, by task (the latest attempt). It may
    /// lag behind the backend (a watch's store): an executor missing from it is confirmed
    /// with [`ExecutorLifecycle::exists`] before anything is decided on its absence.
    fn observe(&self) -> BoxFuture<'_, Result<BTreeMap<TaskId, Observed>, BackendError>>;

    /// Returns when what [`ExecutorObservation::observe`] answers may have changed (a watch
    /// event): the reconciler's pass runs then. Backends that poll never return.
    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(futures::future::pending())
    }

    /// How long the reconciler waits for a pass when nothing woke it: the polling interval of
    /// a backend that polls, a slow resync for one that watches.
    fn resync(&self) -> Duration {
        reconciler::RESYNC
    }

    /// Called by the reconciler once per pass with what it observed (leader only, so one
    /// writer): brings per-executor objects beside the executors in line.
    fn reconciled<'a>(&'a self, _found: &'a BTreeMap<TaskId, Observed>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// The sealed assignment, from the dispatcher to its executor (the facade's FetchTask).
pub trait AssignmentHandout: Send + Sync + 'static {
    /// The sealed assignment of `task`'s current attempt, for its replacement (None: it was
    /// consumed, the executor reported).
    fn sealed_assignment(
        &self,
        task: TaskId,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>>;

    /// The hand-out: the sealed assignment for the executor of (`task`, `attempt`), while it
    /// has not reported. The first hand-out records the fetch (the start deadline stops).
    fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>>;

    /// The executor of (`task`, `attempt`) reported: its assignment is handed out for good.
    /// `Gone` when its executor no longer exists.
    fn consume(&self, task: TaskId, attempt: u32) -> BoxFuture<'_, Result<Presence, BackendError>>;
}
