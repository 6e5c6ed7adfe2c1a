//! Where the facade finds an executor's task and marks its end: on the backend the task runs
//! on, through [`Backend`] (a Pod's Secret and annotation, or the claim ledger and a
//! sandbox's metadata; each backend says which).
//!
//! Which backend a task runs on is the ledger entry's `backend`, read once per task and
//! instance. With one backend every task is that backend's and the ledger is not asked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, BackendError, Presence, catalog};
use crate::backend_kind::BackendKind;
use crate::task::ledger::{Entry, Ledger, Phase};
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::connect::ConnectError;

/// Tasks whose backend this instance remembers before it starts over (a few hours of tasks).
const REMEMBERED: usize = 4096;

/// Every backend this dispatcher runs, by name, and which one each task is on.
pub struct Handout {
    backends: BTreeMap<BackendKind, Arc<dyn Backend>>,
    ledger: Ledger,
    remembered: Mutex<BTreeMap<TaskId, BackendKind>>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ConnectError {
    tracing::warn!(error = %e, "facade: cannot reach {what}; the executor's call is answered unavailable and it retries");
    ConnectError::unavailable(format!("the dispatcher cannot reach {what}; retry"))
}

fn backend_error(e: BackendError) -> ConnectError {
    unavailable(e.api, &e)
}

impl Handout {
    /// `backends`: every backend this dispatcher runs; `ledger`: where a task's backend is
    /// read.
    pub fn new(backends: Vec<Arc<dyn Backend>>, ledger: Ledger) -> Self {
        Handout {
            backends: backends.into_iter().map(|b| (b.backend(), b)).collect(),
            ledger,
            remembered: Mutex::default(),
        }
    }

    /// The executors of the backend `task` runs on.
    async fn executors_of(&self, task: TaskId) -> Result<&dyn Backend, ConnectError> {
        let backend = self.backend_of(task).await?;
        self.backends
            .get(&backend)
            .or_else(|| self.backends.get(&catalog::default_kind()))
            .map(|b| &**b)
            .ok_or_else(|| ConnectError::unavailable("the dispatcher runs no backend"))
    }

    /// The backend `task` runs on.
    pub async fn backend_of(&self, task: TaskId) -> Result<BackendKind, ConnectError> {
        if self.backends.len() == 1 {
            return Ok(*self.backends.keys().next().expect("one backend"));
        }
        let remembered = self.lock().get(&task).copied();
        if let Some(b) = remembered {
            return Ok(b);
        }
        let backend = match self.ledger.get(task).await {
            Ok(Some(e)) => e.backend,
            // Claimed before the ledger existed, or its entry expired: a task of the default
            // backend then (the only one there was before the ledger).
            Ok(None) => catalog::default_kind(),
            Err(e) => return Err(unavailable("the claim ledger", e)),
        };
        let mut g = self.lock();
        if g.len() >= REMEMBERED {
            g.clear();
        }
        g.insert(task, backend);
        Ok(backend)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TaskId, BackendKind>> {
        self.remembered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller's sealed assignment, while its executor has not reported yet, with the
    /// backend it runs on (for the ledger's `fetched` step).
    pub async fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Result<Option<(BackendKind, Vec<u8>)>, ConnectError> {
        let executors = self.executors_of(task).await?;
        let sealed = executors
            .fetch(task, attempt)
            .await
            .map_err(backend_error)?;
        Ok(sealed.map(|s| (executors.backend(), s)))
    }

    /// The caller reported: its assignment is handed out for good. `Gone` when its executor
    /// no longer exists; an error when that cannot be told now.
    pub async fn consume(&self, task: TaskId, attempt: u32) -> Result<Presence, String> {
        let executors = self.executors_of(task).await.map_err(|e| e.to_string())?;
        let presence = executors
            .consume(task, attempt)
            .await
            .map_err(|e| e.to_string())?;
        if presence == Presence::Present {
            let step = Entry::step(task, attempt, executors.backend(), Phase::Reported);
            self.ledger.note(step).await;
        }
        Ok(presence)
    }

    /// Gitea accepted the final state: the executor may go.
    pub async fn mark_terminal(&self, task: TaskId) -> Result<(), ConnectError> {
        let executors = self.executors_of(task).await?;
        executors.mark_terminal(task).await.map_err(backend_error)
    }
}
