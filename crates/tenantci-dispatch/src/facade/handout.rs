//! Where the facade finds an executor's task and marks its end, per backend.
//!
//! - A Pod executor's sealed assignment waits in its Secret (`ExecutorObjects`); the end is
//!   the terminal annotation on the Pod.
//! - A VM executor has no Secret: its sealed assignment waits in the claim ledger, which keeps
//!   it until the executor's first report; the end is the terminal marker in the sandbox's
//!   metadata.
//!
//! Which backend a task runs on is the ledger entry's `backend`, read once per task and
//! instance. Without the VM backend every task is a Pod task and the ledger is not asked.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::backend::pod::objects::{ExecutorObjects, Presence};
use crate::backend::vm::sandboxes::Sandboxes;
use crate::facade::capability;
use crate::queue::Backend;
use crate::queue::ledger::{Entry, Ledger, Phase};
use tenantci_core::forge::gitea::connect::ConnectError;

/// Tasks whose backend this instance remembers before it starts over (a few hours of tasks).
const REMEMBERED: usize = 4096;

pub struct Handout {
    pub objects: ExecutorObjects,
    pub sandboxes: Option<Sandboxes>,
    pub ledger: Ledger,
    backends: Mutex<BTreeMap<i64, Backend>>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ConnectError {
    tracing::warn!(error = %e, "facade: {what}");
    ConnectError::unavailable(format!("the dispatcher cannot reach {what}; retry"))
}

fn apiserver(e: kube::Error) -> ConnectError {
    unavailable("the tenant apiserver", e)
}

impl Handout {
    pub fn new(objects: ExecutorObjects, sandboxes: Option<Sandboxes>, ledger: Ledger) -> Self {
        Handout {
            objects,
            sandboxes,
            ledger,
            backends: Mutex::default(),
        }
    }

    /// The backend `task` runs on.
    pub async fn backend_of(&self, task: i64) -> Result<Backend, ConnectError> {
        if self.sandboxes.is_none() {
            return Ok(Backend::Pod);
        }
        let remembered = self.lock().get(&task).copied();
        if let Some(b) = remembered {
            return Ok(b);
        }
        let backend = match self.ledger.get(task).await {
            Ok(Some(e)) => e.backend,
            // Claimed before the ledger existed, or its entry expired: a Pod task then.
            Ok(None) => Backend::Pod,
            Err(e) => return Err(unavailable("the claim ledger", e)),
        };
        let mut g = self.lock();
        if g.len() >= REMEMBERED {
            g.clear();
        }
        g.insert(task, backend);
        Ok(backend)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, Backend>> {
        self.backends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller's sealed assignment, while its executor has not reported yet.
    pub async fn fetch(
        &self,
        task: i64,
        attempt: u32,
        backend: Backend,
    ) -> Result<Option<Vec<u8>>, ConnectError> {
        match backend {
            Backend::Pod => self
                .objects
                .fetch_assignment(task, &capability::assignment_id(task, attempt))
                .await
                .map_err(apiserver),
            Backend::Vm => {
                let entry = self
                    .ledger
                    .get(task)
                    .await
                    .map_err(|e| unavailable("the claim ledger", e))?;
                Ok(entry
                    .filter(|e| e.attempt == attempt && e.phase <= Phase::Fetched)
                    .and_then(|e| e.assignment)
                    .map(|a| a.to_json()))
            }
        }
    }

    /// The caller reported: its assignment is handed out for good. `Gone` when its executor
    /// no longer exists; an error when that cannot be told now.
    pub async fn consume(
        &self,
        task: i64,
        attempt: u32,
        backend: Backend,
    ) -> Result<Presence, String> {
        let presence = match (backend, &self.sandboxes) {
            (Backend::Vm, Some(sandboxes)) => match sandboxes.of_task(task).await {
                Ok(found) if found.is_empty() => Presence::Gone,
                Ok(_) => Presence::Present,
                Err(e) => return Err(e.to_string()),
            },
            _ => self
                .objects
                .consume_assignment(task, &capability::assignment_id(task, attempt))
                .await
                .map_err(|e| e.to_string())?,
        };
        if presence == Presence::Present {
            let step = Entry::step(task, attempt, backend, Phase::Reported);
            self.ledger.note(step).await;
        }
        Ok(presence)
    }

    /// Gitea accepted the final state: the executor may go.
    pub async fn mark_terminal(&self, task: i64, backend: Backend) -> Result<(), ConnectError> {
        match (backend, &self.sandboxes) {
            (Backend::Vm, Some(sandboxes)) => sandboxes
                .mark_terminal(task)
                .await
                .map_err(|e| unavailable("the OpenSandbox Lifecycle API", e)),
            _ => self.objects.mark_terminal(task).await.map_err(apiserver),
        }
    }
}
