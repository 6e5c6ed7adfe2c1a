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
//!
//! With executor identity on, each create is preceded by minting the task's X509-SVID at the
//! SPIRE Server API ([`Minter`]). A server that is down, slow or refuses (the dispatcher not
//! yet an admin there) is waited out like an OpenSandbox outage: no sandbox starts without
//! its SVID, and the assignment stays queued. A redelivery that finds the sandbox mints
//! nothing: the sandbox has its SVID already.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::vm::desired::{self, SvidFiles};
use crate::backend::vm::settings::Vm;
use crate::backend::{Created, StartError};
use crate::metrics::Metrics;
use crate::task::spec::ExecutorSpec;
use crate::task_id::TaskId;
use tenantci_core::opensandbox::{ApiError, LifecycleClient, ListFilter, Sandbox};
use tenantci_core::spiffe::SpiffeId;
use tenantci_core::spiffe::server_api::ServerApi;

/// Mints VM executors' SVIDs (identity on): the SPIRE Server API client and the lifetime to
/// ask for, the sandbox's own (an SVID that outlives its sandbox is never used; one that
/// expires before it would fail the job's last calls, and there is no agent to rotate it).
#[derive(Clone)]
pub struct Minter {
    /// The SPIRE Server API, where the dispatcher is an admin.
    pub api: ServerApi,
    /// Each SVID's lifetime: the sandbox's timeout (`[vm] timeout`).
    pub ttl: Duration,
    /// Counts the mints that failed (`tenantci_dispatch_spire_mint_errors_total`).
    pub metrics: Arc<Metrics>,
}

impl Minter {
    async fn mint(&self, task: TaskId, id: &str) -> Result<SvidFiles, StartError> {
        let id = SpiffeId::new(id).map_err(|source| {
            StartError::refused(MintFailed::BadId {
                task,
                id: id.to_owned(),
                source: source.into(),
            })
        })?;
        let minted = self.api.mint_x509_svid(&id, self.ttl).await.map_err(|e| {
            self.metrics.spire_mint_error();
            // Refused too is waited out: the fix (the dispatcher in the server's admin_ids) is
            // the operator's and needs no restart; failing the task would lose it.
            StartError::unavailable(MintFailed::Server { task, source: e })
        })?;
        tracing::info!(task = task.get(), spiffe_id = %minted.id, expires_at = minted.expires_at, "minted the VM executor's X509-SVID");
        Ok(minted.into())
    }
}

/// Why no SVID was minted for a sandbox; the SPIFFE or SPIRE error stays its source.
#[derive(Debug, thiserror::Error)]
enum MintFailed {
    #[error("task {task}'s SPIFFE ID `{id}` is not valid: {source}")]
    BadId {
        task: TaskId,
        /// The ID as rendered from the task's Gitea context, shown to the operator.
        id: String,
        source: crate::backend::Cause,
    },
    #[error("no SVID for task {task} from the SPIRE server: {source}")]
    Server {
        task: TaskId,
        source: tenantci_core::spiffe::server_api::MintError,
    },
}

/// How long one delivery waits for OpenSandbox to answer before the assignment goes back to
/// the queue (NAK with backoff).
pub const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);

/// This dispatcher's sandboxes at one OpenSandbox server, and how each is created.
#[derive(Clone)]
pub struct Sandboxes {
    client: LifecycleClient,
    vm: Vm,
    /// The Gitea runner id of the scheduler registration: `tenantci.io/dispatcher`.
    dispatcher: i64,
    /// Identity on: where each sandbox's SVID comes from.
    minter: Option<Minter>,
}

fn classify(e: ApiError) -> StartError {
    match e {
        ApiError::Rejected { .. } => StartError::refused(e),
        other => StartError::unavailable(other),
    }
}

impl Sandboxes {
    /// Through `client`, each sandbox as `vm` sets it, owned by `dispatcher` (the scheduler
    /// registration's Gitea runner id); `minter`: identity on, each sandbox's SVID.
    pub fn new(client: LifecycleClient, vm: Vm, dispatcher: i64, minter: Option<Minter>) -> Self {
        Sandboxes {
            client,
            vm,
            dispatcher,
            minter,
        }
    }

    /// `task`'s sandboxes (normally one; two only while an attempt replaces another).
    pub async fn of_task(&self, task: TaskId) -> Result<Vec<Sandbox>, ApiError> {
        self.client
            .list(&ListFilter {
                states: Vec::new(),
                metadata: desired::of_task(self.dispatcher, task),
            })
            .await
            .map(|all| all.into_iter().filter(desired::readable).collect())
    }

    /// Every sandbox this dispatcher owns, by task (the latest attempt when there are two).
    pub async fn owned(&self) -> Result<BTreeMap<TaskId, Sandbox>, ApiError> {
        let all = self
            .client
            .list(&ListFilter {
                states: Vec::new(),
                metadata: desired::owned_by(self.dispatcher),
            })
            .await?;
        let mut by_task: BTreeMap<TaskId, Sandbox> = BTreeMap::new();
        for s in all.into_iter().filter(desired::readable) {
            let Some((task, attempt)) = desired::task_of(&s) else {
                tracing::warn!(sandbox = %s.id, "a sandbox with this dispatcher's metadata names no task; left alone");
                continue;
            };
            let newer = by_task
                .get(&task)
                .and_then(desired::task_of)
                .is_none_or(|(_, seen)| attempt > seen);
            if newer {
                by_task.insert(task, s);
            }
        }
        Ok(by_task)
    }

    /// Gitea has the final state: the terminal marker on `task`'s sandboxes (a gone one is
    /// fine: nothing is left to mark).
    pub async fn mark_terminal(&self, task: TaskId) -> Result<(), ApiError> {
        let patch = BTreeMap::from([(desired::TERMINAL_KEY.to_string(), Some("true".into()))]);
        for s in self.of_task(task).await? {
            self.client.patch_metadata(&s.id, &patch).await?;
        }
        Ok(())
    }

    /// Deletes `task`'s sandboxes; gone already is done.
    pub async fn delete_task(&self, task: TaskId) -> Result<(), ApiError> {
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
    pub async fn start(&self, spec: &ExecutorSpec, look: bool) -> Result<Created, StartError> {
        let existing = if look {
            self.of_task(spec.task_id).await.map_err(classify)?
        } else {
            Vec::new()
        };
        if let Some(s) = existing
            .iter()
            .find(|s| desired::task_of(s) == Some((spec.task_id, spec.attempt)))
        {
            tracing::info!(task = spec.task_id.get(), sandbox = %s.id, "the sandbox exists already (a redelivery); not created again");
            return Ok(Created::Existing);
        }
        if !existing.is_empty() {
            // Another attempt's sandbox: the reconciler deletes it when it replaces it, so
            // the start waits for that instead of running two executors of one task.
            return Err(StartError::unavailable(format!(
                "task {}'s sandbox of another attempt still exists",
                spec.task_id
            )));
        }
        let svid = match (&spec.identity, &self.minter) {
            (Some(identity), Some(minter)) => {
                Some(minter.mint(spec.task_id, &identity.spiffe_id).await?)
            }
            // `Config::validate` requires the SPIRE server beside [vm] with [identity].
            (Some(_), None) => {
                return Err(StartError::refused(
                    "executor identity is on but no SPIRE server is configured to mint the sandbox's SVID",
                ));
            }
            (None, _) => None,
        };
        let req = desired::desired(spec, &self.vm, self.dispatcher, svid.as_ref());
        let created = self.client.create(&req).await.map_err(classify)?;
        tracing::info!(task = spec.task_id.get(), attempt = spec.attempt, sandbox = %created.id, state = %created.status.state, "sandbox created");
        Ok(Created::New)
    }
}
