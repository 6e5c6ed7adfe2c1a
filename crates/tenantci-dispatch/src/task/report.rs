//! What the dispatcher itself tells Gitea about a task: the keep-alive of a task no executor
//! has picked up yet, and FAILURE with one log line saying why when the dispatcher gives up
//! on a task (it could not be queued, its executor ended or vanished without a final state).
//!
//! The two ports the backend layer (worker, reconciler, keep-alive, recovery) reaches Gitea
//! and the claim ledger through: [`TaskReports`] (implemented by `RunnerClient`) and
//! [`ClaimLedger`] (implemented by `ledger::Ledger`). Narrow and dyn-compatible, so those
//! decisions can be tested against in-memory doubles without a forge or NATS.

use futures::future::BoxFuture;

use crate::backend_kind::BackendKind;
use crate::task::history::Observation;
use crate::task::ledger::{Entry, Ledger, LedgerError, Phase};
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::client::{ClientError, RunnerClient};
use tenantci_core::forge::gitea::proto::{
    LogRow, ProtoEnum as _, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest, timestamp,
};

/// What the dispatcher tells Gitea about a task it holds.
pub trait TaskReports: Send + Sync + 'static {
    /// A non-final UpdateTask (Gitea's heartbeat). Returns the task's result as Gitea has it:
    /// final when the task is over (or being cancelled).
    fn keep_alive(&self, task: TaskId) -> BoxFuture<'_, Result<TaskResult, ClientError>>;

    /// Appends `line` to the task's log (after what Gitea holds) and finalises it as
    /// FAILURE. A task Gitea already finalised keeps its result.
    fn fail<'a>(&'a self, task: TaskId, line: &'a str) -> BoxFuture<'a, Result<(), ClientError>>;
}

/// The claim ledger as the backend layer uses it: reads, and best-effort writes.
pub trait ClaimLedger: Send + Sync + 'static {
    /// The entry of `task`; None when there is none.
    fn get(&self, task: TaskId) -> BoxFuture<'_, Result<Option<Entry>, LedgerError>>;

    /// Every entry within the retention, final ones too (what recovery looks at).
    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, LedgerError>>;

    /// Records `step` (phases only move forward), logging a failure instead of returning it.
    fn note(&self, step: Entry) -> BoxFuture<'_, ()>;

    /// Marks what a backend saw of `task` in the task history, in the background (a ledger
    /// that keeps no history ignores it).
    fn mark(&self, task: TaskId, seen: Observation) {
        let _ = (task, seen);
    }
}

impl ClaimLedger for Ledger {
    fn get(&self, task: TaskId) -> BoxFuture<'_, Result<Option<Entry>, LedgerError>> {
        Box::pin(Ledger::get(self, task))
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, LedgerError>> {
        Box::pin(Ledger::entries(self))
    }

    fn note(&self, step: Entry) -> BoxFuture<'_, ()> {
        Box::pin(Ledger::note(self, step))
    }

    fn mark(&self, task: TaskId, seen: Observation) {
        if let Some(history) = self.history() {
            history.note(task, seen);
        }
    }
}

impl TaskReports for RunnerClient {
    fn keep_alive(&self, task: TaskId) -> BoxFuture<'_, Result<TaskResult, ClientError>> {
        Box::pin(update_task(self, task))
    }

    fn fail<'a>(&'a self, task: TaskId, line: &'a str) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(log_and_fail(self, task, line))
    }
}

/// The claim ledger's step for a task Gitea has as ended with `result`. Attempt and backend
/// are the entry's own (`ledger::merge` keeps them); these (attempt 1 on `backend`, the one
/// the caller knows the task by) only fill a missing entry.
pub fn final_step(task: TaskId, backend: BackendKind, result: TaskResult) -> Entry {
    let name = TaskResult::proto_name(result as i32).unwrap_or("RESULT_UNSPECIFIED");
    Entry::step(task, 1, backend, Phase::Final).with_result(name)
}

/// The ledger step after [`fail`] succeeded.
pub fn failed_step(task: TaskId, backend: BackendKind) -> Entry {
    final_step(task, backend, TaskResult::Failure)
}

fn now() -> prost_types::Timestamp {
    timestamp(std::time::SystemTime::now())
}

/// [`TaskReports::keep_alive`] at Gitea.
async fn update_task(gitea: &RunnerClient, task: TaskId) -> Result<TaskResult, ClientError> {
    let resp = gitea
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: task.get(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    Ok(resp
        .state
        .and_then(|s| TaskResult::try_from(s.result).ok())
        .unwrap_or(TaskResult::Unspecified))
}

/// [`TaskReports::fail`] at Gitea: UpdateTask does not change a done task, so its result stays.
async fn log_and_fail(gitea: &RunnerClient, task: TaskId, line: &str) -> Result<(), ClientError> {
    // Where the log ends: an empty UpdateLog answers with the stored row count.
    let probe = gitea
        .update_log(&UpdateLogRequest {
            task_id: task.get(),
            index: 0,
            rows: vec![],
            no_more: false,
        })
        .await;
    if let Ok(ack) = probe {
        let _ = gitea
            .update_log(&UpdateLogRequest {
                task_id: task.get(),
                index: ack.ack_index,
                rows: vec![LogRow {
                    time: Some(now()),
                    content: format!("tenantci: {line}"),
                }],
                no_more: false,
            })
            .await;
    }
    gitea
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: task.get(),
                result: TaskResult::Failure as i32,
                stopped_at: Some(now()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// [`TaskReports::fail`], for callers holding a concrete client.
pub async fn fail(gitea: &dyn TaskReports, task: TaskId, line: &str) -> Result<(), ClientError> {
    gitea.fail(task, line).await
}

/// Before an executor is started again for `task`: whether Gitea still has it open. `Some(false)`
/// when it ended meanwhile (recorded in the ledger, logged); `None` when Gitea cannot be asked
/// now (logged; the caller tries again at its next pass).
pub async fn still_open(
    gitea: &dyn TaskReports,
    ledger: &dyn ClaimLedger,
    task: TaskId,
    backend: BackendKind,
) -> Option<bool> {
    match gitea.keep_alive(task).await {
        Ok(result) if result.is_final() => {
            tracing::info!(
                task = task.get(),
                ?result,
                "the task ended at Gitea meanwhile; no executor is started for it"
            );
            ledger.note(final_step(task, backend, result)).await;
            Some(false)
        }
        Ok(_) => Some(true),
        Err(e) => {
            tracing::warn!(task = task.get(), error = %e, "cannot ask Gitea whether the task is open; retrying next pass");
            None
        }
    }
}

/// A reconciler's FAILURE report for an executor that ended or vanished without a final
/// state: reported with `reason` in the log, then recorded in the ledger and counted. False
/// while Gitea is unreachable (the caller keeps the executor for its next pass); true once
/// Gitea has been told, or answered that it will not hear it (the task is not ours any more).
pub async fn executor_failed(
    gitea: &dyn TaskReports,
    ledger: &dyn ClaimLedger,
    metrics: &crate::metrics::Metrics,
    backend: BackendKind,
    task: TaskId,
    reason: &str,
) -> bool {
    match gitea.fail(task, reason).await {
        Ok(()) => {}
        Err(e) if e.code().is_some() => {
            tracing::warn!(task = task.get(), error = %e, "the forge refused the FAILURE report; the task is not ours any more, so nothing is retried");
        }
        Err(e) => {
            tracing::warn!(task = task.get(), error = %e, "cannot report FAILURE to the forge; keeping the executor and reporting again at the next pass");
            return false;
        }
    }
    tracing::warn!(task = task.get(), "{reason}: reported FAILURE to Gitea");
    // The dispatcher's own verdict; Gitea keeps a final state it had before.
    ledger.note(failed_step(task, backend)).await;
    metrics.failed(backend);
    true
}
