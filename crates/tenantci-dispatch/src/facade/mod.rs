//! The dispatcher's RunnerService facade: what an executor's official runner talks to instead
//! of Gitea. The transport (Connect, HTTPS) is `forge::gitea::facade`; this is the behaviour.
//!
//! - Authentication is stateless: the runner uuid is the assignment id (`task-<id>-attempt-<n>`)
//!   and the token its capability, recomputed with the capability key and compared in constant
//!   time. A token for one task is worthless for another.
//! - FetchTask hands the caller its own task, opened only here in memory, until the caller's
//!   first UpdateLog / UpdateTask: a retried FetchTask after a lost answer gets it again
//!   (from wherever the task's backend keeps it, e.g. the Pod's Secret or the claim ledger:
//!   `handout`); the first report consumes the assignment for good, and a replaced attempt's
//!   capability never gets it.
//! - UpdateTask / UpdateLog are accepted only for the caller's own task and forwarded to Gitea
//!   with the scheduler's credential; a final state Gitea accepted puts the terminal marker
//!   on the executor (its backend's `mark_terminal`), which lets the reconciler clean up.
//! - After the end nothing is forwarded: once Gitea accepted a final state (recorded in
//!   [`Finished`] and in the claim ledger, which every instance reads) or the task's executor
//!   is gone, a final UpdateTask repeating that state is answered with it (the runner's retry
//!   of a lost answer), and every other UpdateTask or UpdateLog gets `failed_precondition`.
//!   The capability itself stays valid.
//! - The claim ledger learns `fetched` at the hand-out and `final` with the result.
//! - With executor identity on (`[identity]`), the facade serves SPIFFE mTLS, and a caller is
//!   authenticated only when its capability verifies bound to the client's SPIFFE ID
//!   (`capability`: the worker bound the task's ID in): no client SVID is `unauthenticated`,
//!   an SVID that is not the task's (or a capability that is not its task's) is
//!   `permission_denied`. Both are logged with the ID and the task, never the token.
//!
//! Every dispatcher instance serves this (leader or not): all state is at the backends and in
//! the ledger; [`Finished`] and `consumed` only save round trips.

pub mod cert;
pub mod finished;
pub mod handout;
pub mod serving;
pub mod settings;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prost::Message as _;

use crate::backend::Presence;
use crate::capability::{self, CapabilityKey};
use crate::facade::finished::Finished;
use crate::facade::handout::Handout;
use crate::metrics::Metrics;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::task::ledger::{Entry, Ledger, Phase};
use crate::task::registry::Registry;
use crate::task::report;
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::client::{ClientError, RunnerClient};
use tenantci_core::forge::gitea::connect::{Code, ConnectError};
use tenantci_core::forge::gitea::facade::RunnerServiceHandler;
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, DeclareResponse, FetchTaskRequest, FetchTaskResponse, ProtoEnum as _, Runner,
    Task, TaskResult, TaskState, UpdateLogRequest, UpdateLogResponse, UpdateTaskRequest,
    UpdateTaskResponse,
};
use tenantci_core::spiffe::tls::PeerId;

/// The tasks version the facade answers with: constant, since a caller only ever has one task.
const TASKS_VERSION: i64 = 1;

/// The authenticated executor: its task and attempt.
#[derive(Debug, Clone, Copy)]
pub struct Executor {
    /// The Gitea task it runs.
    pub task: TaskId,
    /// Its attempt at the task.
    pub attempt: u32,
}

/// The RunnerService as executors see it; every instance serves one.
pub struct Facade {
    /// Verifies each caller's capability (its runner token).
    pub capability_key: CapabilityKey,
    /// Opens the sealed assignments it hands out.
    pub sealing_key: SealingKey,
    /// Each task's backend: where its assignment is fetched, consumed and marked terminal.
    pub handout: Handout,
    /// Gitea, with the scheduler's credential: where reports are forwarded.
    pub gitea: RunnerClient,
    /// Notified at a hand-out and a final state, so the scheduler and reconciler look again.
    pub registry: Arc<Registry>,
    /// The claim ledger: `fetched`, `reported` and `final`, and the end another instance saw.
    pub ledger: Ledger,
    /// Hand-outs and refused callers.
    pub metrics: Arc<Metrics>,
    /// The name Declare answers with: the registration's.
    pub runner_name: String,
    /// Executor identity on: capabilities are bound to their task's SPIFFE ID.
    pub identity: bool,
    /// Executors (task, attempt) whose assignment this instance consumed: every later report
    /// skips the backend's round trip. Another instance consumes at most once more.
    pub consumed: Mutex<BTreeSet<(TaskId, u32)>>,
    /// Tasks whose final state Gitea accepted through this instance (bounded).
    pub finished: Finished,
}

/// The refusal of a report after the task's end.
fn over(task: TaskId, result: Option<TaskResult>) -> ConnectError {
    let state = result.map_or("its executor objects are gone".to_string(), |r| {
        let name = TaskResult::proto_name(r as i32).unwrap_or("final");
        format!("its final state is {name}")
    });
    ConnectError::new(
        Code::FailedPrecondition,
        format!("task {task} is over ({state}); nothing more is forwarded to Gitea"),
    )
}

/// Gitea's answer, as the executor should see it: its code, a message without our URL.
fn forwarded(method: &str, e: ClientError) -> ConnectError {
    match e {
        ClientError::Status { error, .. } => error,
        other => {
            tracing::warn!(method, error = %other, "facade: cannot forward {method} to the forge; the executor's call is answered unavailable and it retries");
            ConnectError::unavailable(format!(
                "{method}: Gitea is not reachable from the dispatcher"
            ))
        }
    }
}

impl Facade {
    fn own(&self, caller: &Executor, task: TaskId) -> Result<(), ConnectError> {
        if caller.task == task {
            Ok(())
        } else {
            tracing::warn!(
                caller = caller.task.get(),
                task = task.get(),
                "facade: an executor reported another task; refused"
            );
            Err(ConnectError::permission_denied(
                "this runner may only report its own task",
            ))
        }
    }

    /// The caller reported: its assignment is consumed at its backend (once per instance).
    /// Refused when the task is over (recorded here or in the ledger, or its executor is
    /// gone). A backend failure is logged, not returned: the report itself matters more, and
    /// the next one retries.
    async fn consume(&self, caller: &Executor) -> Result<(), ConnectError> {
        if let Some(result) = self.finished.result(caller.task) {
            return Err(over(caller.task, Some(result)));
        }
        let key = (caller.task, caller.attempt);
        if self
            .consumed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return Ok(());
        }
        if let Some(result) = self.ledger_final(caller.task).await {
            return Err(over(caller.task, Some(result)));
        }
        match self.handout.consume(caller.task, caller.attempt).await {
            Ok(Presence::Present) => {
                self.consumed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key);
            }
            Ok(Presence::Gone) => {
                tracing::warn!(
                    task = caller.task.get(),
                    "facade: a report for a task whose executor objects are gone; refused"
                );
                return Err(over(caller.task, None));
            }
            Err(e) => {
                tracing::warn!(task = caller.task.get(), error = %e, "facade: cannot consume the assignment; retrying at the next report")
            }
        }
        Ok(())
    }

    /// The final state the claim ledger holds for `task` (another instance saw the end),
    /// remembered here. A ledger that cannot be read is logged, and the report goes on.
    async fn ledger_final(&self, task: TaskId) -> Option<TaskResult> {
        let name = match self.ledger.final_result(task).await {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(task = task.get(), error = %e, "facade: cannot read the task's result from the claim ledger (NATS); the call goes on without it");
                return None;
            }
        };
        let result = TaskResult::from_proto_name(&name)
            .and_then(|v| TaskResult::try_from(v).ok())
            .unwrap_or(TaskResult::Unspecified);
        self.finished.record(task, result);
        Some(result)
    }

    /// A final UpdateTask repeating the recorded final state: the runner retrying a lost
    /// answer. Answered as Gitea answered, without asking it again.
    async fn repeated_final(&self, req: &UpdateTaskRequest) -> Option<UpdateTaskResponse> {
        let state = req.state.as_ref()?;
        if !TaskResult::try_from(state.result).is_ok_and(TaskResult::is_final) {
            return None;
        }
        let recorded = match self.finished.result(TaskId::new(state.id)) {
            Some(r) => r,
            None => self.ledger_final(TaskId::new(state.id)).await?,
        };
        (state.result == recorded as i32).then(|| UpdateTaskResponse {
            state: Some(TaskState {
                id: state.id,
                result: recorded as i32,
                ..Default::default()
            }),
            sent_outputs: req.outputs.keys().cloned().collect(),
        })
    }

    async fn mark_terminal(&self, task: TaskId) -> Result<(), ConnectError> {
        self.handout.mark_terminal(task).await
    }

    /// Opens the assignment its backend handed over; it must be the caller's.
    fn open(&self, caller: &Executor, sealed: &[u8]) -> Result<Task, ConnectError> {
        let a = Assignment::from_json(sealed).map_err(|e| {
            tracing::error!(task = caller.task.get(), error = %e, "facade: the task's stored assignment does not decode; the executor's FetchTask is answered internal and the start deadline replaces it");
            ConnectError::internal("the task's assignment is damaged")
        })?;
        if a.task_id != caller.task.to_string() || a.attempt != caller.attempt {
            tracing::error!(
                task = caller.task.get(),
                "facade: the stored assignment is another task's; the executor's FetchTask is answered internal and the start deadline replaces it"
            );
            return Err(ConnectError::internal(
                "the task's assignment is not this runner's",
            ));
        }
        let payload = a.open(&self.sealing_key).map_err(|e| {
            tracing::error!(task = caller.task.get(), error = %e, "facade: the task's assignment does not open with the sealing key; the executor's FetchTask is answered internal and the start deadline replaces it");
            ConnectError::internal("the task's assignment cannot be opened")
        })?;
        Task::decode(payload.as_slice())
            .map_err(|_| ConnectError::internal("the task does not decode"))
    }
}

impl RunnerServiceHandler for Facade {
    type Caller = Executor;

    async fn authenticate_peer(
        &self,
        uuid: &str,
        token: &str,
        peer: Option<&PeerId>,
    ) -> Result<Executor, ConnectError> {
        if !self.identity {
            return self.authenticate(uuid, token).await;
        }
        let Some(PeerId(id)) = peer else {
            // Not reachable through the mTLS listener (it requires a client SVID); a facade
            // served otherwise must still not fall back to the capability alone.
            self.metrics.identity_refused();
            tracing::warn!("facade: a call without a client SVID; refused");
            return Err(ConnectError::unauthenticated(
                "a client SVID is required (SPIFFE mTLS)",
            ));
        };
        match capability::parse_assignment_id(uuid) {
            Some((task, attempt))
                if self
                    .capability_key
                    .verify_for(task, attempt, Some(&id.to_string()), token) =>
            {
                Ok(Executor { task, attempt })
            }
            parsed => {
                self.metrics.identity_refused();
                tracing::warn!(
                    client = %id,
                    task = parsed.map(|(t, _)| t.get()),
                    "facade: the client's SPIFFE ID is not the one its capability was issued for; refused"
                );
                Err(ConnectError::permission_denied(
                    "this SPIFFE ID may not act for this runner",
                ))
            }
        }
    }

    async fn authenticate(&self, uuid: &str, token: &str) -> Result<Executor, ConnectError> {
        match capability::parse_assignment_id(uuid) {
            Some((task, attempt)) if self.capability_key.verify(task, attempt, token) => {
                Ok(Executor { task, attempt })
            }
            _ => {
                self.metrics.facade_refused();
                Err(ConnectError::unauthenticated("unregistered runner"))
            }
        }
    }

    async fn declare(
        &self,
        caller: &Executor,
        req: DeclareRequest,
    ) -> Result<DeclareResponse, ConnectError> {
        Ok(DeclareResponse {
            runner: Some(Runner {
                id: caller.task.get(),
                uuid: capability::assignment_id(caller.task, caller.attempt),
                name: self.runner_name.clone(),
                version: req.version,
                labels: req.labels,
                ephemeral: true,
                ..Default::default()
            }),
        })
    }

    async fn fetch_task(
        &self,
        caller: &Executor,
        _req: FetchTaskRequest,
    ) -> Result<FetchTaskResponse, ConnectError> {
        let Some((backend, sealed)) = self.handout.fetch(caller.task, caller.attempt).await? else {
            return Ok(FetchTaskResponse {
                task: None,
                tasks_version: TASKS_VERSION,
                additional_tasks: Vec::new(),
            });
        };
        let task = self.open(caller, &sealed)?;
        tracing::info!(
            task = caller.task.get(),
            attempt = caller.attempt,
            "facade: handed the task to its executor"
        );
        // Recorded before the answer: once the executor has its task, recovery must not
        // start it again.
        let fetched = Entry::step(caller.task, caller.attempt, backend, Phase::Fetched);
        self.ledger.note(fetched).await;
        self.metrics.handed_out();
        self.registry.notify();
        Ok(FetchTaskResponse {
            task: Some(task),
            tasks_version: TASKS_VERSION,
            additional_tasks: Vec::new(),
        })
    }

    async fn update_task(
        &self,
        caller: &Executor,
        req: UpdateTaskRequest,
    ) -> Result<UpdateTaskResponse, ConnectError> {
        let state = req
            .state
            .as_ref()
            .ok_or_else(|| ConnectError::invalid_argument("UpdateTask needs a state"))?;
        self.own(caller, TaskId::new(state.id))?;
        if let Some(resp) = self.repeated_final(&req).await {
            tracing::info!(
                task = caller.task.get(),
                "facade: the final state again; answered without Gitea"
            );
            // The first answer may have been lost because the marker could not be set: set
            // it again (idempotent), or the executor would never be cleaned up.
            if let Err(e) = self.mark_terminal(caller.task).await {
                tracing::warn!(task = caller.task.get(), error = %e, "facade: the terminal marker is still not set; the executor retries");
            }
            return Ok(resp);
        }
        self.consume(caller).await?;
        let final_result = TaskResult::try_from(state.result)
            .ok()
            .filter(|r| r.is_final());
        let resp = self
            .gitea
            .update_task(&req)
            .await
            .map_err(|e| forwarded("UpdateTask", e))?;
        if let Some(result) = final_result {
            self.finished.record(caller.task, result);
            // The task's backend (remembered since its consume): only for a ledger entry that
            // is missing.
            let backend = self
                .handout
                .backend_of(caller.task)
                .await
                .unwrap_or_else(|_| crate::backend::catalog::default_kind());
            self.ledger
                .note(report::final_step(caller.task, backend, result))
                .await;
            self.consumed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(caller.task, caller.attempt));
            // Gitea has the final state: from here on the executor may go.
            self.mark_terminal(caller.task).await?;
            tracing::info!(
                task = caller.task.get(),
                result = state.result,
                "facade: the task reported its final state"
            );
            self.registry.notify();
        }
        Ok(resp)
    }

    async fn update_log(
        &self,
        caller: &Executor,
        req: UpdateLogRequest,
    ) -> Result<UpdateLogResponse, ConnectError> {
        self.own(caller, TaskId::new(req.task_id))?;
        self.consume(caller).await?;
        self.gitea.update_log(&req).await.map_err(|e| {
            let e = forwarded("UpdateLog", e);
            if e.code == Code::AlreadyExists {
                tracing::debug!(
                    task = caller.task.get(),
                    "facade: the log is archived already"
                );
            }
            e
        })
    }
}
