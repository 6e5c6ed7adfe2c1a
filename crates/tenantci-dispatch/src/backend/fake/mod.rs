//! The fake backend (feature `fake-backend`, tests only): each task's executor is a directory
//! on the dispatcher's host, under `$TENANTCI_FAKE_BACKEND_DIR/<task>/`, holding what a runner
//! needs (`.runner`, `ca.crt`, `facade.url`) and, until the executor reports, its sealed
//! assignment. The test plays the runner from those files against the facade, so a task runs
//! through claim, queue, executor, facade and report with no cluster and no VM.
//!
//! It is also the proof that a backend is one folder: nothing outside `backend/` names it,
//! and its registration is one line in `catalog`. Off unless `[capacity]` names it (`fake =
//! N`); a job selects it with `runs-on: fake`.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::backend::lifecycle::Decision;
use crate::backend::provider::Inputs;
use crate::backend::{
    AssignmentHandout, Backend, BackendError, BackendFacts, BackendKind, Created,
    ExecutorLifecycle, ExecutorObservation, Nouns, Observed, Presence, StartError,
};
use crate::task::Progress;
use crate::task::spec::{ExecutorSpec, runner_file};
use crate::task_id::TaskId;

/// This backend's name.
pub const KIND: BackendKind = BackendKind::new("fake");

/// Where the executors' directories go: the variable a test sets for its dispatcher.
pub const DIR_VAR: &str = "TENANTCI_FAKE_BACKEND_DIR";

/// What the rest of the dispatcher knows about the fake backend.
pub const FACTS: BackendFacts = BackendFacts {
    kind: KIND,
    label: Some("fake"),
    turned_on_by: "no `fake` in [capacity]",
    default_capacity: 1,
    opt_in: true,
    section: None,
    rented_nodes: false,
    nouns: Nouns {
        executor: "fake executor directory",
        executors: "fake executors",
        source: "the fake backend's directory",
        gone: "the fake executor's directory was removed",
        lost_partly: "its fake executor directory was lost",
        lost_whole: "its fake executor directory was lost",
    },
};

const API: &str = "the fake backend's directory";
const ATTEMPT: &str = "attempt";
const SEALED: &str = "sealed";
const FETCHED: &str = "fetched";
const TERMINAL: &str = "terminal";

/// The fake backend's registration: on when `[capacity]` names it and [`DIR_VAR`] is set.
pub struct Provider;

/// What `catalog` registers.
pub const PROVIDER: Provider = Provider;

impl crate::backend::provider::Provider for Provider {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }

    fn build(&self, i: &mut Inputs) -> Option<Arc<dyn Backend>> {
        if !i.capacity.contains_key(&KIND) {
            return None;
        }
        let Some(root) = std::env::var_os(DIR_VAR) else {
            tracing::error!(
                "[capacity] names the fake backend but {DIR_VAR} is not set; it stays off"
            );
            return None;
        };
        Some(Arc::new(FakeDirs::new(root.into())))
    }
}

/// The executors as directories under `root`.
pub struct FakeDirs {
    root: PathBuf,
}

fn io(e: std::io::Error) -> BackendError {
    BackendError::new(API, e)
}

/// Writes `bytes` to `path`, readable by its owner only (a capability is in `.runner`).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// The file's contents; None when it does not exist.
fn read_if_there(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl FakeDirs {
    /// The executors as directories under `root` (created on the first start).
    pub fn new(root: PathBuf) -> Self {
        FakeDirs { root }
    }

    fn dir(&self, task: TaskId) -> PathBuf {
        self.root.join(task.to_string())
    }

    /// The attempt whose directory `task` has; None: no directory.
    fn attempt(&self, task: TaskId) -> std::io::Result<Option<u32>> {
        Ok(read_if_there(&self.dir(task).join(ATTEMPT))?
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse().ok()))
    }

    fn create(&self, spec: &ExecutorSpec, sealed: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = self.dir(spec.task_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        write_private(&dir.join(".runner"), &runner_file(spec))?;
        write_private(&dir.join("ca.crt"), spec.facade_ca_pem.as_bytes())?;
        write_private(&dir.join("facade.url"), spec.facade_url.as_bytes())?;
        write_private(&dir.join(SEALED), sealed)?;
        // Last: a directory with its attempt is a complete executor.
        write_private(&dir.join(ATTEMPT), spec.attempt.to_string().as_bytes())
    }

    fn observed(&self, task: TaskId, attempt: u32) -> Observed {
        let dir = self.dir(task);
        let terminal = dir.join(TERMINAL).exists();
        let age = std::fs::metadata(dir.join(ATTEMPT))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        let progress = match (dir.join(SEALED).exists(), dir.join(FETCHED).exists()) {
            (false, _) => Progress::Reported,
            (true, true) => Progress::Fetched,
            (true, false) => Progress::Unfetched,
        };
        Observed {
            task,
            attempt,
            decision: if terminal {
                Decision::Delete
            } else {
                Decision::Keep
            },
            terminal,
            complete: true,
            age,
            progress: Some(progress),
            placement: None,
            class: None,
            recheck: None,
            marks: Vec::new(),
            waited_for_node: None,
        }
    }
}

impl Backend for FakeDirs {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }
}

impl ExecutorLifecycle for FakeDirs {
    fn start<'a>(
        &'a self,
        spec: &'a ExecutorSpec,
        sealed: &'a [u8],
        _fresh: bool,
    ) -> BoxFuture<'a, Result<Created, StartError>> {
        Box::pin(async move {
            match self.attempt(spec.task_id) {
                Ok(Some(a)) if a == spec.attempt => return Ok(Created::Existing),
                Ok(Some(_)) => {
                    return Err(StartError::unavailable(format!(
                        "task {}'s fake executor of another attempt still exists",
                        spec.task_id
                    )));
                }
                Ok(None) => {}
                Err(e) => return Err(StartError::unavailable(e)),
            }
            self.create(spec, sealed).map_err(StartError::unavailable)?;
            Ok(Created::New)
        })
    }

    fn exists(&self, task: TaskId) -> BoxFuture<'_, Result<bool, BackendError>> {
        Box::pin(async move { Ok(self.dir(task).exists()) })
    }

    fn delete(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move {
            match std::fs::remove_dir_all(self.dir(task)) {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(io(e)),
                _ => Ok(()),
            }
        })
    }

    fn mark_terminal(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move {
            let dir = self.dir(task);
            if !dir.exists() {
                return Ok(());
            }
            write_private(&dir.join(TERMINAL), b"").map_err(io)
        })
    }
}

impl ExecutorObservation for FakeDirs {
    fn observe(&self) -> BoxFuture<'_, Result<BTreeMap<TaskId, Observed>, BackendError>> {
        Box::pin(async move {
            let mut found = BTreeMap::new();
            let entries = match std::fs::read_dir(&self.root) {
                Ok(e) => e,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(found),
                Err(e) => return Err(io(e)),
            };
            for entry in entries {
                let entry = entry.map_err(io)?;
                let Some(task) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                    continue;
                };
                if let Some(attempt) = self.attempt(task).map_err(io)? {
                    found.insert(task, self.observed(task, attempt));
                }
            }
            Ok(found)
        })
    }

    /// A directory has no watch here: the reconciler polls it.
    fn resync(&self) -> Duration {
        Duration::from_millis(500)
    }
}

impl AssignmentHandout for FakeDirs {
    fn sealed_assignment(
        &self,
        task: TaskId,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(async move { read_if_there(&self.dir(task).join(SEALED)).map_err(io) })
    }

    fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(async move {
            if self.attempt(task).map_err(io)? != Some(attempt) {
                return Ok(None);
            }
            let sealed = read_if_there(&self.dir(task).join(SEALED)).map_err(io)?;
            if sealed.is_some() {
                write_private(&self.dir(task).join(FETCHED), b"").map_err(io)?;
            }
            Ok(sealed)
        })
    }

    fn consume(&self, task: TaskId, attempt: u32) -> BoxFuture<'_, Result<Presence, BackendError>> {
        Box::pin(async move {
            if self.attempt(task).map_err(io)? != Some(attempt) {
                return Ok(Presence::Gone);
            }
            match std::fs::remove_file(self.dir(task).join(SEALED)) {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(io(e)),
                _ => Ok(Presence::Present),
            }
        })
    }
}
