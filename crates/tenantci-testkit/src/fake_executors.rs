//! In-memory doubles of the dispatcher's backend layer: a backend ([`FakeExecutors`]), the
//! claim ledger ([`FakeLedger`]), Gitea as the dispatcher reports to it ([`FakeGitea`]) and
//! the admission slots recovery takes ([`FakeSlots`]). With them the worker, reconciler,
//! keep-alive and recovery run as unit tests: no NATS, no apiserver, no forge.
//!
//! Each double records what it was asked and answers what the test set; the test reads the
//! records to check which decision the code under test made.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tenantci_dispatch::task_id::TaskId;

use tenantci_core::forge::gitea::client::ClientError;
use tenantci_core::forge::gitea::proto::TaskResult;
use tenantci_dispatch::backend::lifecycle::Decision;
use tenantci_dispatch::backend::reconciler::slots::Slots;
use tenantci_dispatch::backend::{
    AssignmentHandout, Backend, BackendError, BackendFacts, Context, Created, ExecutorLifecycle,
    ExecutorObservation, Nouns, Observed, Presence, StartError,
};
use tenantci_dispatch::backend_kind::BackendKind;
use tenantci_dispatch::metrics::Metrics;
use tenantci_dispatch::queue::consumer::Slot;
use tenantci_dispatch::sizing::demand::WarmDemand;
use tenantci_dispatch::task::Progress;
use tenantci_dispatch::task::ledger::{self, Entry, LedgerError};
use tenantci_dispatch::task::registry::Registry;
use tenantci_dispatch::task::report::{ClaimLedger, TaskReports};
use tenantci_dispatch::task::spec::ExecutorSpec;
use tokio::sync::Semaphore;

/// The traits' `futures::future::BoxFuture`, spelled out (the same type).
type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An executor of `task`'s `attempt` as a backend observes it: alive (`Keep`), complete,
/// created `age` ago, not fetched yet.
pub fn unfetched(task: TaskId, attempt: u32, age: Duration) -> Observed {
    Observed {
        task,
        attempt,
        decision: Decision::Keep,
        terminal: false,
        complete: true,
        age: Some(age),
        progress: Some(Progress::Unfetched),
        placement: None,
        class: None,
        recheck: None,
        marks: Vec::new(),
        waited_for_node: None,
    }
}

/// One call of [`ExecutorLifecycle::start`] that the backend took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The task id of the executor started.
    pub task: TaskId,
    /// The task's attempt.
    pub attempt: u32,
    /// The `fresh` the backend was called with: no executor of the task could exist yet.
    pub fresh: bool,
}

#[derive(Default)]
struct Backing {
    found: BTreeMap<TaskId, Observed>,
    sealed: BTreeMap<TaskId, Vec<u8>>,
    starts: Vec<Start>,
    tries: usize,
    deletes: Vec<TaskId>,
    fail_starts: VecDeque<StartError>,
}

/// A backend in memory: a start creates an executor that `observe` lists (unfetched, age 0)
/// and a delete removes it; the test sets what else is listed and which starts fail.
pub struct FakeExecutors {
    facts: &'static BackendFacts,
    state: Mutex<Backing>,
}

impl FakeExecutors {
    /// A fake backend that reports itself as `backend`, listing nothing yet.
    pub fn new(backend: BackendKind) -> Arc<Self> {
        // One leak per fake backend of a test: facts are `'static` as a registered backend's.
        let facts = Box::leak(Box::new(BackendFacts {
            kind: backend,
            label: None,
            turned_on_by: "it is a test's",
            default_capacity: 1,
            opt_in: false,
            section: None,
            rented_nodes: false,
            nouns: Nouns {
                executor: "fake executor",
                executors: "fake executors",
                source: "the fake",
                gone: "the fake executor was deleted",
                lost_partly: "its fake executor was lost",
                lost_whole: "its fake executor was lost",
            },
        }));
        Arc::new(FakeExecutors {
            facts,
            state: Mutex::new(Backing::default()),
        })
    }

    /// Lists `o` (replacing what was listed for its task), its sealed assignment `sealed`.
    pub fn put(&self, o: Observed, sealed: Option<Vec<u8>>) {
        let mut s = lock(&self.state);
        if let Some(sealed) = sealed {
            s.sealed.insert(o.task, sealed);
        }
        s.found.insert(o.task, o);
    }

    /// Changes what `observe` lists for `task` (nothing when it is not listed).
    pub fn update(&self, task: TaskId, change: impl FnOnce(&mut Observed)) {
        if let Some(o) = lock(&self.state).found.get_mut(&task) {
            change(o);
        }
    }

    /// What `observe` lists for `task`.
    pub fn observed(&self, task: TaskId) -> Option<Observed> {
        lock(&self.state).found.get(&task).cloned()
    }

    /// The next start fails with `e` (queued: one failure per call).
    pub fn fail_next_start(&self, e: StartError) {
        lock(&self.state).fail_starts.push_back(e);
    }

    /// The starts the backend took, in order.
    pub fn starts(&self) -> Vec<Start> {
        lock(&self.state).starts.clone()
    }

    /// Every call of `start`, failed ones too.
    pub fn start_tries(&self) -> usize {
        lock(&self.state).tries
    }

    /// The tasks whose executors were deleted, in order (a delete of nothing counts).
    pub fn deletes(&self) -> Vec<TaskId> {
        lock(&self.state).deletes.clone()
    }
}

impl Backend for FakeExecutors {
    fn facts(&self) -> &'static BackendFacts {
        self.facts
    }
}

impl ExecutorLifecycle for FakeExecutors {
    fn start<'a>(
        &'a self,
        spec: &'a ExecutorSpec,
        sealed: &'a [u8],
        fresh: bool,
    ) -> Boxed<'a, Result<Created, StartError>> {
        let mut s = lock(&self.state);
        s.tries += 1;
        let done = match s.fail_starts.pop_front() {
            Some(e) => Err(e),
            None => Ok(start_one(&mut s, spec, sealed, fresh)),
        };
        Box::pin(async move { done })
    }

    fn exists(&self, task: TaskId) -> Boxed<'_, Result<bool, BackendError>> {
        let found = lock(&self.state).found.contains_key(&task);
        Box::pin(async move { Ok(found) })
    }

    fn delete(&self, task: TaskId) -> Boxed<'_, Result<(), BackendError>> {
        let mut s = lock(&self.state);
        s.found.remove(&task);
        s.sealed.remove(&task);
        s.deletes.push(task);
        Box::pin(async { Ok(()) })
    }

    fn mark_terminal(&self, task: TaskId) -> Boxed<'_, Result<(), BackendError>> {
        if let Some(o) = lock(&self.state).found.get_mut(&task) {
            o.terminal = true;
            o.decision = Decision::Delete;
        }
        Box::pin(async { Ok(()) })
    }
}

impl ExecutorObservation for FakeExecutors {
    fn observe(&self) -> Boxed<'_, Result<BTreeMap<TaskId, Observed>, BackendError>> {
        let found = lock(&self.state).found.clone();
        Box::pin(async move { Ok(found) })
    }
}

impl AssignmentHandout for FakeExecutors {
    fn sealed_assignment(&self, task: TaskId) -> Boxed<'_, Result<Option<Vec<u8>>, BackendError>> {
        let sealed = lock(&self.state).sealed.get(&task).cloned();
        Box::pin(async move { Ok(sealed) })
    }

    fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> Boxed<'_, Result<Option<Vec<u8>>, BackendError>> {
        let mut s = lock(&self.state);
        let sealed = match s.found.get_mut(&task) {
            Some(o) if o.attempt == attempt && o.progress != Some(Progress::Reported) => {
                o.progress = Some(Progress::Fetched);
                s.sealed.get(&task).cloned()
            }
            _ => None,
        };
        Box::pin(async move { Ok(sealed) })
    }

    fn consume(&self, task: TaskId, attempt: u32) -> Boxed<'_, Result<Presence, BackendError>> {
        let mut s = lock(&self.state);
        let presence = match s.found.get_mut(&task) {
            Some(o) if o.attempt == attempt => {
                o.progress = Some(Progress::Reported);
                s.sealed.remove(&task);
                Presence::Present
            }
            _ => Presence::Gone,
        };
        Box::pin(async move { Ok(presence) })
    }
}

/// A start the backend takes: idempotent by task and attempt, as a real backend's is.
fn start_one(s: &mut Backing, spec: &ExecutorSpec, sealed: &[u8], fresh: bool) -> Created {
    let (task, attempt) = (spec.task_id, spec.attempt);
    if s.found.get(&task).is_some_and(|o| o.attempt == attempt) {
        return Created::Existing;
    }
    s.starts.push(Start {
        task,
        attempt,
        fresh,
    });
    s.found
        .insert(task, unfetched(task, attempt, Duration::ZERO));
    s.sealed.insert(task, sealed.to_vec());
    Created::New
}

/// The claim ledger in memory, merging steps as the real one does (`ledger::merge`).
#[derive(Default)]
pub struct FakeLedger {
    entries: Mutex<BTreeMap<TaskId, Entry>>,
}

impl FakeLedger {
    /// An empty ledger.
    pub fn new() -> Arc<Self> {
        Arc::new(FakeLedger::default())
    }

    /// Sets `e` as its task's entry, whatever was there.
    pub fn put(&self, e: Entry) {
        lock(&self.entries).insert(e.task, e);
    }

    /// The task's entry; `None` when the ledger has none.
    pub fn entry(&self, task: TaskId) -> Option<Entry> {
        lock(&self.entries).get(&task).cloned()
    }
}

impl ClaimLedger for FakeLedger {
    fn get(&self, task: TaskId) -> Boxed<'_, Result<Option<Entry>, LedgerError>> {
        let e = self.entry(task);
        Box::pin(async move { Ok(e) })
    }

    fn entries(&self) -> Boxed<'_, Result<Vec<Entry>, LedgerError>> {
        let all = lock(&self.entries).values().cloned().collect();
        Box::pin(async move { Ok(all) })
    }

    fn note(&self, step: Entry) -> Boxed<'_, ()> {
        let mut entries = lock(&self.entries);
        if let Some(next) = ledger::merge(entries.get(&step.task), step) {
            entries.insert(next.task, next);
        }
        Box::pin(async {})
    }
}

#[derive(Default)]
struct Forge {
    results: BTreeMap<TaskId, TaskResult>,
    unreachable: bool,
    keep_alives: Vec<TaskId>,
    failures: Vec<(TaskId, String)>,
}

/// Gitea as the dispatcher reports to it: every task is open until the test sets its result
/// (or a FAILURE report ends it); keep-alives and FAILURE reports are recorded.
#[derive(Default)]
pub struct FakeGitea {
    state: Mutex<Forge>,
}

impl FakeGitea {
    /// A Gitea with every task open and reachable.
    pub fn new() -> Arc<Self> {
        Arc::new(FakeGitea::default())
    }

    /// Gitea has `task` with `result` (e.g. `Cancelled`: ended while it waited).
    pub fn set_result(&self, task: TaskId, result: TaskResult) {
        lock(&self.state).results.insert(task, result);
    }

    /// Every call fails as a connection error does (no answer from Gitea).
    pub fn set_unreachable(&self, unreachable: bool) {
        lock(&self.state).unreachable = unreachable;
    }

    /// The tasks of every keep-alive UpdateTask, in order.
    pub fn keep_alives(&self) -> Vec<TaskId> {
        lock(&self.state).keep_alives.clone()
    }

    /// Every FAILURE report: its task and the log line.
    pub fn failures(&self) -> Vec<(TaskId, String)> {
        lock(&self.state).failures.clone()
    }
}

fn unreachable() -> ClientError {
    ClientError::Config("the fake Gitea is unreachable".into())
}

impl TaskReports for FakeGitea {
    fn keep_alive(&self, task: TaskId) -> Boxed<'_, Result<TaskResult, ClientError>> {
        let mut g = lock(&self.state);
        g.keep_alives.push(task);
        let answer = match g.unreachable {
            true => Err(unreachable()),
            false => Ok(g.results.get(&task).copied().unwrap_or_default()),
        };
        Box::pin(async move { answer })
    }

    fn fail<'a>(&'a self, task: TaskId, line: &'a str) -> Boxed<'a, Result<(), ClientError>> {
        let mut g = lock(&self.state);
        let answer = if g.unreachable {
            Err(unreachable())
        } else {
            g.failures.push((task, line.to_string()));
            // A task Gitea finalised keeps its result.
            g.results.entry(task).or_insert(TaskResult::Failure);
            Ok(())
        };
        Box::pin(async move { answer })
    }
}

/// Admission slots in memory: `capacity` of them, each free again when the registry lets its
/// executor go (`Registry::finished`), as a consumer's slot is.
pub struct FakeSlots {
    free: Arc<Semaphore>,
}

impl FakeSlots {
    /// `capacity` slots, all free.
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(FakeSlots {
            free: Arc::new(Semaphore::new(capacity)),
        })
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.free.available_permits()
    }
}

impl Slots for FakeSlots {
    fn reserve(&self) -> Option<Slot> {
        let permit = self.free.clone().try_acquire_owned().ok()?;
        Some(Slot::of_permit(permit))
    }

    fn acquire(&self) -> Boxed<'static, Option<Slot>> {
        let free = self.free.clone();
        Box::pin(async move { Some(Slot::of_permit(free.acquire_owned().await.ok()?)) })
    }
}

/// The doubles a backend `Context` is made of, kept for the test to read.
pub struct Fakes {
    /// Gitea's reports (keep-alives, FAILURE reports) and the results the test sets.
    pub gitea: Arc<FakeGitea>,
    /// The claim ledger.
    pub ledger: Arc<FakeLedger>,
    /// The claim registry (a new, empty one).
    pub registry: Arc<Registry>,
    /// The dispatcher's metrics (a new set).
    pub metrics: Arc<Metrics>,
}

impl Fakes {
    /// Fresh doubles: all empty, Gitea reachable.
    pub fn new() -> Self {
        Fakes {
            gitea: FakeGitea::new(),
            ledger: FakeLedger::new(),
            registry: Arc::new(Registry::default()),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// The `Context` the worker, reconciler and keep-alive get.
    pub fn ctx(&self) -> Context {
        Context {
            gitea: self.gitea.clone(),
            registry: self.registry.clone(),
            ledger: self.ledger.clone(),
            metrics: self.metrics.clone(),
            warm: Arc::new(WarmDemand::new(&[])),
        }
    }
}

impl Default for Fakes {
    fn default() -> Self {
        Fakes::new()
    }
}
