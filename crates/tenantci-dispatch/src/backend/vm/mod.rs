//! The VM backend: Gitea tasks in OpenSandbox sandboxes, beside the pod backend.
//!
//! - [`settings`]: its config section (`[vm]`) and the checks on it; [`init`]: `dispatch
//!   init`'s flags for it (pure); [`api`]: the Lifecycle API client and its access check;
//! - [`desired`]: the create request, metadata and boot script of one task's sandbox (pure);
//! - [`sandboxes`]: the executors through the Lifecycle API (core's `opensandbox` client);
//! - [`lifecycle`]: a sandbox's state and metadata -> the reconciler's decision (pure).
//!
//! A sandbox has no Secret: the sealed assignment waits in the claim ledger, which keeps it
//! until the executor's first report, and the ledger's phase says how far the executor got.

pub mod api;
pub mod desired;
pub mod init;
pub mod lifecycle;
pub mod sandboxes;
pub mod settings;

pub use settings::Vm;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::backend::{
    AssignmentHandout, Backend, BackendError, BackendFacts, Created, ExecutorLifecycle,
    ExecutorObservation, Nouns, Observed, Presence, StartError,
};
use crate::backend_kind::BackendKind;
use crate::task::ledger::{Entry, Ledger, Phase};
use crate::task::spec::ExecutorSpec;
use crate::task_id::TaskId;
use sandboxes::Sandboxes;
use tenantci_core::opensandbox::Sandbox;

const LIFECYCLE_API: &str = "the OpenSandbox Lifecycle API";
const LEDGER: &str = "the claim ledger";

/// This dispatcher's sandboxes, and the claim ledger that holds their assignments.
pub struct VmExecutors {
    /// The sandboxes, through the Lifecycle API.
    pub sandboxes: Sandboxes,
    /// Where each attempt's sealed assignment waits for the hand-out, and whose phase says
    /// how far the executor got.
    pub ledger: Ledger,
}

/// This backend's name.
pub const KIND: BackendKind = BackendKind::new("vm");

/// What the rest of the dispatcher knows about the VM backend (registered in `catalog`).
pub const FACTS: BackendFacts = BackendFacts {
    kind: KIND,
    label: Some("vm"),
    turned_on_by: "no `--opensandbox-url` at `dispatch init`",
    default_capacity: 1,
    opt_in: false,
    section: Some("vm"),
    rented_nodes: false,
    nouns: Nouns {
        executor: "sandbox",
        executors: "VM sandboxes",
        source: "the Lifecycle API",
        gone: "the VM sandbox vanished (deleted or expired)",
        lost_partly: "its sandbox was lost (deleted, expired, or OpenSandbox lost it)",
        lost_whole: "its sandbox was lost (deleted, expired, or OpenSandbox lost it)",
    },
};

/// The VM backend's registration: on when `[vm]` is set.
pub struct Provider;

/// What `catalog` registers.
pub const PROVIDER: Provider = Provider;

impl crate::backend::provider::Provider for Provider {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }

    fn build(&self, i: &mut crate::backend::provider::Inputs) -> Option<Arc<dyn Backend>> {
        let sandboxes = i.sandboxes.take()?;
        Some(Arc::new(VmExecutors {
            sandboxes,
            ledger: i.ledger.clone(),
        }))
    }
}

fn api(e: impl Into<crate::backend::Cause>) -> BackendError {
    BackendError::new(LIFECYCLE_API, e)
}

/// Since the sandbox was created, by its `createdAt` (None: not given, or not a time).
fn age(s: &Sandbox) -> Option<Duration> {
    let created = chrono::DateTime::parse_from_rfc3339(s.created_at.as_deref()?).ok()?;
    (chrono::Utc::now() - created.with_timezone(&chrono::Utc))
        .to_std()
        .ok()
}

fn observed(task: TaskId, s: &Sandbox) -> Observed {
    Observed {
        task,
        attempt: desired::task_of(s).map_or(0, |(_, attempt)| attempt),
        decision: lifecycle::decide(s),
        terminal: desired::is_terminal(s),
        complete: true,
        age: age(s),
        // The ledger's phase says: the facade records each fetch and report there.
        progress: None,
        placement: None,
        class: None,
        recheck: None,
        marks: Vec::new(),
        waited_for_node: None,
    }
}

impl VmExecutors {
    /// Whether any sandbox of `task` exists.
    async fn present(&self, task: TaskId) -> Result<bool, BackendError> {
        let found = self.sandboxes.of_task(task).await.map_err(api)?;
        Ok(!found.is_empty())
    }

    /// The sealed assignment the claim ledger holds for `task`, when its entry is one `holds`
    /// accepts.
    async fn held(
        &self,
        task: TaskId,
        holds: impl Fn(&Entry) -> bool,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        let entry = self
            .ledger
            .get(task)
            .await
            .map_err(|e| BackendError::new(LEDGER, e))?;
        Ok(entry
            .filter(|e| holds(e))
            .and_then(|e| e.assignment)
            .map(|a| a.to_json()))
    }
}

impl Backend for VmExecutors {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }
}

impl ExecutorLifecycle for VmExecutors {
    /// An OpenSandbox outage (and a SPIRE server that mints nothing yet) is waited out inside
    /// the delivery this long; the consumer's progress acks keep the assignment ours.
    fn patience(&self) -> Duration {
        sandboxes::OUTAGE_PATIENCE
    }

    /// The sealed assignment stays in the claim ledger (the facade hands the task out from
    /// there); the sandbox gets only what its executor needs to reach the facade.
    fn start<'a>(
        &'a self,
        spec: &'a ExecutorSpec,
        _sealed: &'a [u8],
        fresh: bool,
    ) -> BoxFuture<'a, Result<Created, StartError>> {
        Box::pin(self.sandboxes.start(spec, !fresh))
    }

    fn exists(&self, task: TaskId) -> BoxFuture<'_, Result<bool, BackendError>> {
        Box::pin(self.present(task))
    }

    fn delete(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move { self.sandboxes.delete_task(task).await.map_err(api) })
    }

    fn mark_terminal(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move { self.sandboxes.mark_terminal(task).await.map_err(api) })
    }
}

impl ExecutorObservation for VmExecutors {
    fn observe(&self) -> BoxFuture<'_, Result<BTreeMap<TaskId, Observed>, BackendError>> {
        Box::pin(async move {
            let owned = self.sandboxes.owned().await.map_err(api)?;
            Ok(owned.iter().map(|(t, s)| (*t, observed(*t, s))).collect())
        })
    }
}

impl AssignmentHandout for VmExecutors {
    fn sealed_assignment(
        &self,
        task: TaskId,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(self.held(task, |e| e.phase < Phase::Fetched))
    }

    /// From the claim ledger, to the attempt it names, until the executor's first report.
    fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(self.held(task, move |e| {
            e.attempt == attempt && e.phase <= Phase::Fetched
        }))
    }

    fn consume(
        &self,
        task: TaskId,
        _attempt: u32,
    ) -> BoxFuture<'_, Result<Presence, BackendError>> {
        Box::pin(async move {
            Ok(match self.present(task).await? {
                true => Presence::Present,
                false => Presence::Gone,
            })
        })
    }
}
