//! The status model: what `GET /v1/status` answers, `tenantci dispatch status` prints and the
//! status page shows. Pure: [`build`] turns what `run::status_api` gathered (the registry's
//! cards, the claim ledger's entries, each backend's observation, the capacity and classes
//! from the config, the metrics' figures) into a [`Status`]. [`explain`] answers "why does this job
//! wait" from a `Status` for the job [`question`] finds; [`page`] renders it as HTML and
//! [`table`] as `dispatch status`'s text. [`history`] is where finished tasks' time went
//! (`/v1/history`), [`timeline`] draws its last hour on the page.
//!
//! Boundary: no I/O, no HTTP. Invariant: nothing secret goes in (no token, capability, key or
//! task secret: the job's names and labels only); the field names are the `v1` contract
//! (docs/cli.md), so a change is additive or a `v2`.

pub mod explain;
pub mod history;
pub mod page;
pub mod question;
pub mod table;
pub mod timeline;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::backend::{Observed, catalog};
use crate::backend_kind::BackendKind;
use crate::metrics::Figures;
use crate::sizing::class::ExecutorClass;
use crate::task::Progress;
use crate::task::ledger::{Entry, Phase};
use crate::task::registry::{Card, Held};
use crate::task_id::TaskId;

/// The API version in the path (`/v1/status`) and the document.
pub const API_VERSION: &str = "v1";

/// Gitea shows a runner offline one minute after its last call.
pub const FORGE_OFFLINE_AFTER_SECS: u64 = 60;

/// A task's state, as the task state table names it (docs/architecture.md, "A task's
/// state"); finished tasks are not held, so not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// FetchTask returned it; not on the queue yet.
    Claimed,
    /// On the queue, waiting for a slot.
    Queued,
    /// Its executor is being created.
    Starting,
    /// Its executor runs and has not fetched the task yet ("running, not fetched").
    Running,
    /// "running, fetched".
    Fetched,
    /// "running, reported": the executor reports its steps.
    Reported,
    /// Gitea ended it while it was queued; it will not start.
    Withdrawn,
}

impl State {
    /// Every state, in the order a task goes through them (withdrawn last).
    pub const ALL: [State; 7] = [
        State::Claimed,
        State::Queued,
        State::Starting,
        State::Running,
        State::Fetched,
        State::Reported,
        State::Withdrawn,
    ];

    /// The state's name as the table and page show it: `Queued`.
    pub fn name(self) -> &'static str {
        match self {
            State::Claimed => "Claimed",
            State::Queued => "Queued",
            State::Starting => "Starting",
            State::Running => "Running",
            State::Fetched => "Fetched",
            State::Reported => "Reported",
            State::Withdrawn => "Withdrawn",
        }
    }

    /// Whether an executor of the task exists (it holds a slot).
    pub fn has_executor(self) -> bool {
        matches!(
            self,
            State::Starting | State::Running | State::Fetched | State::Reported
        )
    }
}

/// The document `/v1/status` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// [`API_VERSION`].
    pub api_version: String,
    /// `DispatcherStatus`.
    pub kind: String,
    /// When this instance built the document.
    pub generated_at: DateTime<Utc>,
    /// This instance's identity (the Lease holder name it uses).
    pub instance: String,
    /// Only the leader claims, so only its tasks and queue figures are live.
    pub leader: bool,
    /// The figures over every task.
    pub summary: Summary,
    /// Every task this instance's term holds, queued or running.
    pub tasks: Vec<TaskStatus>,
}

/// The dispatcher as a whole: its backends, classes, queue, forge and cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Every `runs-on` label this dispatcher registered at the forge.
    pub labels: Vec<String>,
    /// Each backend this dispatcher runs, in registration order.
    pub backends: Vec<BackendStatus>,
    /// Each resource class of the config.
    pub classes: Vec<ClassStatus>,
    /// Assignments waiting on the queue, every backend together.
    pub queue_depth: u64,
    /// Tasks claimed in the last 60 seconds, every backend together.
    pub claims_per_minute: u32,
    /// The forge, as the scheduler last reached it.
    pub forge: ForgeStatus,
    /// The shared actions cache.
    pub cache: CacheStatus,
}

/// One backend's slots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// Which backend.
    pub backend: BackendKind,
    /// Its concurrent executors.
    pub capacity: u32,
    /// Slots taken: its tasks whose executor exists.
    pub used: u32,
    /// `capacity` less `used` (never below 0).
    pub free: u32,
    /// Its assignments waiting on the queue.
    pub queued: u64,
    /// Its API answered the observation behind this document.
    pub reachable: bool,
    /// Why its API did not answer (None: it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One resource class's slots and warm pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    /// The class's name.
    pub name: String,
    /// The `runs-on` label that selects it.
    pub label: String,
    /// The backend its executors run on.
    pub backend: BackendKind,
    /// Its concurrent executors.
    pub capacity: u32,
    /// Slots its tasks hold.
    pub used: u32,
    /// `capacity` less `used` (never below 0).
    pub free: u32,
    /// Its warm pool's size as last applied (0: none).
    pub warm_slots: u32,
}

/// The forge as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForgeStatus {
    /// Its base URL (`gitea.url`).
    pub url: String,
    /// None: unknown (this instance does not lead, or has not asked yet).
    pub reachable: Option<bool>,
    /// Since the forge last answered this dispatcher's FetchTask.
    pub seconds_since_answer: Option<u64>,
    /// The last FetchTask's failure, while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The shared actions cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheStatus {
    /// `[cache]` is set.
    pub enabled: bool,
    /// Bytes of all committed entries after the last eviction sweep.
    pub stored_bytes: u64,
}

/// One task the term holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The Gitea task id.
    pub task: TaskId,
    /// The executor's attempt, else the ledger's (None: neither knows).
    pub attempt: Option<u32>,
    /// `owner/name`; empty for a task recovered by this term (its names are sealed).
    pub repository: String,
    /// The workflow's name; empty like `repository`.
    pub workflow: String,
    /// The job's name; empty like `repository`.
    pub job: String,
    /// The run's number (else its id); None like `repository`.
    pub run: Option<i64>,
    /// The job's `runs-on` labels; empty like `repository`.
    pub runs_on: Vec<String>,
    /// The backend it is queued for or runs on.
    pub backend: BackendKind,
    /// Its resource class (None: none).
    pub class: Option<String>,
    /// Where it stands.
    pub state: State,
    /// The executor Pod's name (pod backend, once scheduled).
    pub executor: Option<String>,
    /// The node it runs on.
    pub node: Option<String>,
    /// Since this term first held the task.
    pub age_seconds: u64,
    /// Since it entered its state.
    pub in_state_seconds: u64,
}

/// What [`build`] reads; `run::status_api` gathers it.
pub struct Inputs<'a> {
    /// The time ages are counted to.
    pub now: DateTime<Utc>,
    /// This instance's identity.
    pub instance: &'a str,
    /// This instance leads.
    pub leader: bool,
    /// `gitea.url`.
    pub forge_url: &'a str,
    /// The labels registered at the forge.
    pub labels: &'a [String],
    /// Each backend this dispatcher runs, with its capacity, in registration order.
    pub capacity: &'a [(BackendKind, u32)],
    /// The resource classes.
    pub classes: &'a [ExecutorClass],
    /// `[cache]` is set.
    pub cache_enabled: bool,
    /// Every task the term's registry holds.
    pub cards: Vec<Card>,
    /// The claim ledger's entry of those tasks, where it has one.
    pub ledger: BTreeMap<TaskId, Entry>,
    /// Each backend's executors by task, or why its API did not answer.
    pub observed: BTreeMap<BackendKind, Result<BTreeMap<TaskId, Observed>, String>>,
    /// What the metrics hold that no series shows (claims per minute, the forge's last
    /// answer, queue depths, warm slots, the cache's size).
    pub figures: Figures,
}

/// The status document (pure).
pub fn build(i: Inputs<'_>) -> Status {
    let tasks: Vec<TaskStatus> = i.cards.iter().map(|c| task_status(&i, c)).collect();
    let summary = Summary {
        labels: i.labels.to_vec(),
        backends: i
            .capacity
            .iter()
            .map(|(b, c)| backend_status(&i, &tasks, *b, *c))
            .collect(),
        classes: i.classes.iter().map(|c| class_status(&i, c)).collect(),
        queue_depth: i.figures.queue_depth.values().sum(),
        claims_per_minute: i.figures.claims_last_minute,
        forge: forge_status(&i),
        cache: CacheStatus {
            enabled: i.cache_enabled,
            stored_bytes: i.figures.cache_stored_bytes,
        },
    };
    Status {
        api_version: API_VERSION.to_string(),
        kind: "DispatcherStatus".to_string(),
        generated_at: i.now,
        instance: i.instance.to_string(),
        leader: i.leader,
        summary,
        tasks,
    }
}

fn seconds(now: DateTime<Utc>, since: DateTime<Utc>) -> u64 {
    u64::try_from((now - since).num_seconds()).unwrap_or(0)
}

fn observed<'i>(i: &'i Inputs<'_>, backend: BackendKind, task: TaskId) -> Option<&'i Observed> {
    i.observed.get(&backend)?.as_ref().ok()?.get(&task)
}

/// The state of a task from its registry card, ledger phase and executor (pure).
pub fn state(held: Held, phase: Option<Phase>, executor: Option<&Observed>) -> State {
    match held {
        Held::Withdrawn => State::Withdrawn,
        Held::Queued => match (phase, executor) {
            (Some(Phase::Claimed), None) => State::Claimed,
            (Some(Phase::Started), _) | (_, Some(_)) => State::Starting,
            _ => State::Queued,
        },
        Held::Running => {
            let progress = executor
                .and_then(|o| o.progress)
                .or(phase.map(Phase::progress));
            match progress {
                Some(Progress::Fetched) => State::Fetched,
                Some(Progress::Reported) => State::Reported,
                _ => State::Running,
            }
        }
    }
}

fn task_status(i: &Inputs<'_>, c: &Card) -> TaskStatus {
    let entry = i.ledger.get(&c.task);
    let executor = observed(i, c.backend, c.task);
    let state = state(c.held, entry.map(|e| e.phase), executor);
    // The ledger's time is when its phase last moved; the registry's when it was queued or
    // started here. The later of the two is when the shown state began.
    let entered = entry.map_or(c.held_since, |e| e.at.max(c.held_since));
    let d = c.description.clone().unwrap_or_default();
    let placement = executor.and_then(|o| o.placement.as_ref());
    TaskStatus {
        task: c.task,
        attempt: executor.map(|o| o.attempt).or(entry.map(|e| e.attempt)),
        repository: d.repository,
        workflow: d.workflow,
        job: d.job,
        run: d.run,
        runs_on: d.runs_on,
        backend: c.backend,
        // The slot it holds, else the class the scheduler picked, else the executor's label.
        class: (c.class.clone().or(d.class)).or_else(|| executor.and_then(|o| o.class.clone())),
        state,
        executor: placement.map(|p| p.pod_name.clone()),
        node: placement.map(|p| p.node_name.clone()),
        age_seconds: seconds(i.now, c.since),
        in_state_seconds: seconds(i.now, entered),
    }
}

fn backend_status(
    i: &Inputs<'_>,
    tasks: &[TaskStatus],
    backend: BackendKind,
    capacity: u32,
) -> BackendStatus {
    let used = tasks
        .iter()
        .filter(|t| t.backend == backend && t.state.has_executor())
        .count();
    let used = u32::try_from(used).unwrap_or(u32::MAX);
    let error = match i.observed.get(&backend) {
        Some(Err(e)) => Some(e.clone()),
        _ => None,
    };
    BackendStatus {
        backend,
        capacity,
        used,
        free: capacity.saturating_sub(used),
        queued: i.figures.queue_depth.get(&backend).copied().unwrap_or(0),
        reachable: error.is_none(),
        error,
    }
}

fn class_status(i: &Inputs<'_>, c: &ExecutorClass) -> ClassStatus {
    let used = i
        .cards
        .iter()
        .filter(|t| t.class.as_deref() == Some(c.name.as_str()))
        .count();
    let used = u32::try_from(used).unwrap_or(u32::MAX);
    ClassStatus {
        name: c.name.clone(),
        label: c.label.clone(),
        backend: catalog::of_class(c),
        capacity: c.capacity,
        used,
        free: c.capacity.saturating_sub(used),
        warm_slots: i.figures.warm_slots.get(&c.name).copied().unwrap_or(0),
    }
}

fn forge_status(i: &Inputs<'_>) -> ForgeStatus {
    let since = i.figures.since_forge_answered.map(|d| d.as_secs());
    let reachable = match (&i.figures.forge_error, since) {
        (Some(_), _) => Some(false),
        (None, Some(s)) => Some(s <= FORGE_OFFLINE_AFTER_SECS),
        (None, None) => None,
    };
    ForgeStatus {
        url: i.forge_url.to_string(),
        reachable: if i.leader { reachable } else { None },
        seconds_since_answer: since,
        error: i.figures.forge_error.clone(),
    }
}

#[cfg(test)]
mod tests;
