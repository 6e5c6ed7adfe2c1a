//! The VM backend's executors: one OpenSandbox sandbox per task attempt, created, found,
//! marked and deleted through the Lifecycle API. Found by metadata (task id and the owning
//! dispatcher), so a redelivered assignment finds its sandbox instead of creating a second,
//! and recovery finds every sandbox this dispatcher owns.
//!
//! Failures are classified for the worker: unreachable, 5xx and 409 are waited out inside the
//! delivery for up to [`OUTAGE_PATIENCE`] (the consumer's progress acks keep the assignment
//! ours meanwhile), then are worth another delivery; a refused key names its file and is
//! treated the same (the operator can fix the file under a running dispatcher); a 400 is the
//! task's failure with the API's message. Deliveries are unlimited by default, so an outage
//! costs latency only (docs/runbooks/gitea-dispatcher.md).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::sandbox;
use super::settings::Vm;
use crate::dispatch::executor::ExecutorSpec;
use crate::dispatch::objects::Created;
use crate::dispatch::worker::{Executors, StartError};
use crate::queue::Backend;
use tenantci_core::opensandbox::{ApiError, LifecycleClient, ListFilter, Sandbox};

/// How long one delivery waits for OpenSandbox to answer before the assignment goes back to
/// the queue (NAK with backoff).
pub const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);
/// The longest pause between two tries within a delivery.
const RETRY_MAX: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Sandboxes {
    client: LifecycleClient,
    vm: Vm,
    /// The Gitea runner id of the scheduler registration: `tenantci.io/dispatcher`.
    dispatcher: i64,
}

fn classify(e: ApiError) -> StartError {
    match e {
        ApiError::Rejected { .. } => StartError::Refused(e.to_string()),
        other => StartError::Unavailable(other.to_string()),
    }
}

impl Sandboxes {
    pub fn new(client: LifecycleClient, vm: Vm, dispatcher: i64) -> Self {
        Sandboxes {
            client,
            vm,
            dispatcher,
        }
    }

    /// `task`'s sandboxes (normally one; two only while an attempt replaces another).
    pub async fn of_task(&self, task: i64) -> Result<Vec<Sandbox>, ApiError> {
        self.client
            .list(&ListFilter {
                states: Vec::new(),
                metadata: sandbox::of_task(self.dispatcher, task),
            })
            .await
    }

    /// Every sandbox this dispatcher owns, by task (the latest attempt when there are two).
    pub async fn owned(&self) -> Result<BTreeMap<i64, Sandbox>, ApiError> {
        let all = self
            .client
            .list(&ListFilter {
                states: Vec::new(),
                metadata: sandbox::owned_by(self.dispatcher),
            })
            .await?;
        let mut by_task: BTreeMap<i64, Sandbox> = BTreeMap::new();
        for s in all {
            let Some((task, attempt)) = sandbox::task_of(&s) else {
                tracing::warn!(sandbox = %s.id, "a sandbox with this dispatcher's metadata names no task; left alone");
                continue;
            };
            let newer = by_task
                .get(&task)
                .and_then(sandbox::task_of)
                .is_none_or(|(_, seen)| attempt > seen);
            if newer {
                by_task.insert(task, s);
            }
        }
        Ok(by_task)
    }

    /// Gitea has the final state: the terminal marker on `task`'s sandboxes (a gone one is
    /// fine: nothing is left to mark).
    pub async fn mark_terminal(&self, task: i64) -> Result<(), ApiError> {
        let patch = BTreeMap::from([(sandbox::TERMINAL_KEY.to_string(), Some("true".into()))]);
        for s in self.of_task(task).await? {
            self.client.patch_metadata(&s.id, &patch).await?;
        }
        Ok(())
    }

    /// Deletes `task`'s sandboxes; gone already is done.
    pub async fn delete_task(&self, task: i64) -> Result<(), ApiError> {
        for s in self.of_task(task).await? {
            self.client.delete(&s.id).await?;
        }
        Ok(())
    }

    /// Deletes one sandbox; gone already is done.
    pub async fn delete(&self, id: &str) -> Result<(), ApiError> {
        self.client.delete(id).await.map(drop)
    }
}

impl Sandboxes {
    /// One try: the sandbox found by metadata (a redelivery), or created. Without `look` (a
    /// fresh assignment: no sandbox of the task can exist) straight to the create.
    async fn start_once(&self, spec: &ExecutorSpec, look: bool) -> Result<Created, StartError> {
        let existing = if look {
            self.of_task(spec.task_id).await.map_err(classify)?
        } else {
            Vec::new()
        };
        if let Some(s) = existing
            .iter()
            .find(|s| sandbox::task_of(s) == Some((spec.task_id, spec.attempt)))
        {
            tracing::info!(task = spec.task_id, sandbox = %s.id, "the sandbox exists already (a redelivery); not created again");
            return Ok(Created::Existing);
        }
        if !existing.is_empty() {
            // Another attempt's sandbox: the reconciler deletes it when it replaces it, so
            // the start waits for that instead of running two executors of one task.
            return Err(StartError::Unavailable(format!(
                "task {}'s sandbox of another attempt still exists",
                spec.task_id
            )));
        }
        let req = sandbox::desired(spec, &self.vm, self.dispatcher);
        let created = self.client.create(&req).await.map_err(classify)?;
        tracing::info!(task = spec.task_id, attempt = spec.attempt, sandbox = %created.id, state = %created.status.state, "sandbox created");
        Ok(Created::New)
    }
}

impl Executors for Sandboxes {
    fn backend(&self) -> Backend {
        Backend::Vm
    }

    /// The sealed assignment stays in the claim ledger (the facade hands the task out from
    /// there); the sandbox gets only what its executor needs to reach the facade.
    async fn start(
        &self,
        spec: &ExecutorSpec,
        _sealed: &[u8],
        fresh: bool,
    ) -> Result<Created, StartError> {
        let deadline = Instant::now() + OUTAGE_PATIENCE;
        let mut pause = Duration::from_millis(250);
        // Only the first try may skip the lookup: a create that timed out may have happened.
        let mut look = !fresh;
        loop {
            let tried = self.start_once(spec, look).await;
            look = true;
            match tried {
                Err(StartError::Unavailable(why)) if Instant::now() + pause < deadline => {
                    tracing::warn!(task = spec.task_id, error = %why, retry_in = ?pause, "OpenSandbox did not take the sandbox yet; trying again (the task stays queued)");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
                done => return done,
            }
        }
    }

    async fn exists(&self, task: i64) -> Result<bool, StartError> {
        Ok(!self.of_task(task).await.map_err(classify)?.is_empty())
    }
}
