//! Where a task's time went (pure): one [`Record`] per task with the time of each [`Mark`] it
//! passed (the forge's creation of the job where known, claimed, queued, executor created,
//! scheduled, started, fetched by the runner, reported, executor gone), and what is read off
//! it: the [`Phase`]s between marks, their durations, the slowest one and its likely cause.
//!
//! Several instances write one record (the leader's scheduler and reconciler, a facade on
//! another replica), each the marks it observes, in any order: [`merge`] keeps the earliest
//! time of each mark and fills each descriptive field once, so a mark written twice (a retry,
//! two observers) counts once and a mark never overwrites another's. [`store`] applies it
//! with a compare-and-set on the record's revision (nothing lost between two writers).
//!
//! A record carries [`VERSION`]; one written by a newer release is reported as such
//! ([`Decoded::Newer`]), never read with this release's meaning. It holds no secret: ids,
//! names, times and a result name only.

pub mod store;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::backend_kind::BackendKind;
use crate::task_id::TaskId;

/// The version of [`Record`] this release writes and reads.
pub const VERSION: u32 = 1;
/// A history record's kind for the version rule (`tenantci_core::record_version`).
pub const KIND: tenantci_core::record_version::Kind =
    tenantci_core::record_version::Kind::new("task_history", VERSION);

/// A point a task passes, in the order it passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// The forge created the job (where the forge says it).
    Created,
    /// FetchTask returned it to this dispatcher.
    Claimed,
    /// Its assignment is on the queue.
    Queued,
    /// Its executor (Pod and Secret, or sandbox) was created.
    ExecutorCreated,
    /// Its executor was placed on a node (the Pod's `PodScheduled` condition).
    Scheduled,
    /// Its executor's container started.
    Started,
    /// The runner fetched the task from the facade (the first hand-out).
    Fetched,
    /// The forge accepted its final state (the final UpdateTask).
    Reported,
    /// Its executor was deleted.
    Gone,
}

impl Mark {
    /// Every mark, in order.
    pub const ALL: [Mark; 9] = [
        Mark::Created,
        Mark::Claimed,
        Mark::Queued,
        Mark::ExecutorCreated,
        Mark::Scheduled,
        Mark::Started,
        Mark::Fetched,
        Mark::Reported,
        Mark::Gone,
    ];

    /// Its name as stored and shown (`executor_created`).
    pub fn name(self) -> &'static str {
        match self {
            Mark::Created => "created",
            Mark::Claimed => "claimed",
            Mark::Queued => "queued",
            Mark::ExecutorCreated => "executor_created",
            Mark::Scheduled => "scheduled",
            Mark::Started => "started",
            Mark::Fetched => "fetched",
            Mark::Reported => "reported",
            Mark::Gone => "gone",
        }
    }

    /// The phase that ends at this mark (None for the first).
    pub fn ends(self) -> Option<Phase> {
        Some(match self {
            Mark::Created => return None,
            Mark::Claimed => Phase::ForgeQueue,
            Mark::Queued => Phase::Claim,
            Mark::ExecutorCreated => Phase::Queue,
            Mark::Scheduled => Phase::Scheduling,
            Mark::Started => Phase::Starting,
            Mark::Fetched => Phase::RunnerStart,
            Mark::Reported => Phase::Run,
            Mark::Gone => Phase::Teardown,
        })
    }
}

/// The time between two marks, named by what the task was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Created to claimed: waiting at the forge.
    ForgeQueue,
    /// Claimed to queued: sealing and publishing.
    Claim,
    /// Queued to executor created: waiting for a free slot.
    Queue,
    /// Executor created to scheduled: waiting for a node.
    Scheduling,
    /// Scheduled to started: image pull and container start.
    Starting,
    /// Started to fetched: the runner starting.
    RunnerStart,
    /// Fetched to reported: the job's own steps.
    Run,
    /// Reported to gone: the executor's deletion.
    Teardown,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 8] = [
        Phase::ForgeQueue,
        Phase::Claim,
        Phase::Queue,
        Phase::Scheduling,
        Phase::Starting,
        Phase::RunnerStart,
        Phase::Run,
        Phase::Teardown,
    ];

    /// Its name as shown and as the metric's `phase` label (`forge_queue`).
    pub fn name(self) -> &'static str {
        match self {
            Phase::ForgeQueue => "forge_queue",
            Phase::Claim => "claim",
            Phase::Queue => "queue",
            Phase::Scheduling => "scheduling",
            Phase::Starting => "starting",
            Phase::RunnerStart => "runner_start",
            Phase::Run => "run",
            Phase::Teardown => "teardown",
        }
    }

    /// What a long phase of this kind usually means, in the operator's words.
    pub fn cause(self) -> &'static str {
        match self {
            Phase::ForgeQueue => {
                "the forge's own queue: the job waited at the forge before this dispatcher claimed it (no free capacity to claim, or a label no runner took)"
            }
            Phase::Claim => "sealing and publishing the assignment (NATS slow to answer)",
            Phase::Queue => {
                "a full queue: every slot of the backend (or of the class) was busy until one was freed"
            }
            Phase::Scheduling => {
                "waiting for a node: a rented node booting (no room on a warm one), or a quota"
            }
            Phase::Starting => "an image pull and the container's start",
            Phase::RunnerStart => "the runner starting and fetching its task",
            Phase::Run => "the job's own steps",
            Phase::Teardown => "deleting the executor",
        }
    }
}

/// One task's history as stored: who it was and when it passed each mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// [`VERSION`] when written by this release (absent: 1, the rule's).
    #[serde(default = "unversioned")]
    pub version: u32,
    /// The forge's task id.
    pub task: TaskId,
    /// `owner/name`, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The run's number, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<i64>,
    /// The backend its executors ran on, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The resource class, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The final result's proto name (`RESULT_SUCCESS`), once reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The marks passed, each at its earliest observed time.
    pub marks: BTreeMap<Mark, DateTime<Utc>>,
    /// When its executor was first seen waiting for a node (the Pod unschedulable: no node had
    /// room, so one was rented and booted); absent: never seen waiting, it went to a node that
    /// was there (warm, or with room). Optional, so a record without it reads as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for_node: Option<DateTime<Utc>>,
}

fn unversioned() -> u32 {
    tenantci_core::record_version::UNVERSIONED
}

/// What a writer observed of a task: marks and the descriptive fields it knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Marks and when they were passed.
    pub marks: Vec<(Mark, DateTime<Utc>)>,
    /// `owner/name`.
    pub repository: Option<String>,
    /// The run's number.
    pub run: Option<i64>,
    /// The backend.
    pub backend: Option<BackendKind>,
    /// The resource class.
    pub class: Option<String>,
    /// The final result's proto name.
    pub result: Option<String>,
    /// When its executor was seen waiting for a node.
    pub waited_for_node: Option<DateTime<Utc>>,
}

impl Observation {
    /// One mark at `at`.
    pub fn mark(mark: Mark, at: DateTime<Utc>) -> Observation {
        Observation {
            marks: vec![(mark, at)],
            ..Observation::default()
        }
    }
}

impl Record {
    /// An empty record of `task`.
    pub fn new(task: TaskId) -> Record {
        Record {
            version: VERSION,
            task,
            repository: None,
            run: None,
            backend: None,
            class: None,
            result: None,
            marks: BTreeMap::new(),
            waited_for_node: None,
        }
    }

    /// The forge accepted its final state.
    pub fn finished(&self) -> bool {
        self.marks.contains_key(&Mark::Reported)
    }

    /// Its last mark's time (None: no mark).
    pub fn last_at(&self) -> Option<DateTime<Utc>> {
        self.marks.values().max().copied()
    }

    /// The phases it has, in order: each from the nearest earlier mark present to its own
    /// end mark (a missing mark folds its phase into the next one: `from` says so). A time
    /// earlier than its start (two writers' clocks apart) counts as zero.
    pub fn phases(&self) -> Vec<Span> {
        let mut spans = Vec::new();
        let mut previous: Option<(Mark, DateTime<Utc>)> = None;
        for (&mark, &at) in &self.marks {
            if let (Some((from, start)), Some(phase)) = (previous, mark.ends()) {
                let took = (at - start).to_std().unwrap_or(Duration::ZERO);
                spans.push(Span {
                    phase,
                    from,
                    to: mark,
                    start,
                    took,
                });
            }
            previous = Some((mark, at));
        }
        spans
    }

    /// Why `phase` of this task took its time, in the operator's words: for the scheduling, whether
    /// its executor was seen waiting for a node (a rented one booting) or went to one that was
    /// there.
    pub fn cause(&self, phase: Phase) -> &'static str {
        match (phase, self.waited_for_node) {
            (Phase::Scheduling, Some(_)) => {
                "waiting for a node: a rented node booting (the executor was unschedulable until it joined; a warm pool avoids it)"
            }
            (Phase::Scheduling, None) => {
                "placing the executor on a node that was there (warm, or with room): no node was rented for it, so the scheduler or a quota held it"
            }
            (other, _) => other.cause(),
        }
    }

    /// The longest phase (the first of equals), None without two marks.
    pub fn slowest(&self) -> Option<Span> {
        self.phases()
            .into_iter()
            .reduce(|a, b| if b.took > a.took { b } else { a })
    }

    /// From its first mark to its last.
    pub fn total(&self) -> Duration {
        let first = self.marks.values().min();
        let last = self.marks.values().max();
        match (first, last) {
            (Some(f), Some(l)) => (*l - *f).to_std().unwrap_or(Duration::ZERO),
            _ => Duration::ZERO,
        }
    }
}

/// One phase of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// Which phase (named by its end mark).
    pub phase: Phase,
    /// The mark it starts at: its own start, or an earlier one when marks are missing.
    pub from: Mark,
    /// The mark it ends at.
    pub to: Mark,
    /// When it started.
    pub start: DateTime<Utc>,
    /// How long it took.
    #[serde(serialize_with = "seconds")]
    pub took: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What [`merge`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The record to write.
    pub record: Record,
    /// This write made it complete (reported and gone): the one write that observes its
    /// phases in the metrics, whichever instance made it.
    pub completed: bool,
}

/// The record after `seen` over `current`; None when it changes nothing (pure). A mark keeps
/// its earliest time; each descriptive field is filled once.
pub fn merge(current: Option<&Record>, task: TaskId, seen: &Observation) -> Option<Merged> {
    let was = current.cloned().unwrap_or_else(|| Record::new(task));
    let mut next = was.clone();
    for &(mark, at) in &seen.marks {
        next.marks
            .entry(mark)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }
    fill(&mut next.repository, &seen.repository);
    fill(&mut next.run, &seen.run);
    fill(&mut next.backend, &seen.backend.map(|b| b.to_string()));
    fill(&mut next.class, &seen.class);
    fill(&mut next.result, &seen.result);
    next.waited_for_node = match (next.waited_for_node, seen.waited_for_node) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if current.is_some() && next == was {
        return None;
    }
    let complete = |r: &Record| r.finished() && r.marks.contains_key(&Mark::Gone);
    let completed = complete(&next) && !(current.is_some() && complete(&was));
    Some(Merged {
        record: next,
        completed,
    })
}

fn fill<T: Clone>(field: &mut Option<T>, value: &Option<T>) {
    if field.is_none() {
        field.clone_from(value);
    }
}

/// A stored record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A record this release reads.
    Record(Record),
    /// A record a newer release wrote: shown as such, not read.
    Newer {
        /// Its task (from the key).
        task: TaskId,
        /// The version it carries.
        version: u64,
    },
}

/// Reads a stored record of `task` by the version rule ([`KIND`]) (pure): a newer version is
/// [`Decoded::Newer`] (one that is not a number: `u64::MAX`), a record that does not decode
/// is the decoder's error.
pub fn decode(task: TaskId, bytes: &[u8]) -> Result<Decoded, serde_json::Error> {
    if let Err(newer) = KIND.check_json(bytes)? {
        let version = newer.found.parse().unwrap_or(u64::MAX);
        return Ok(Decoded::Newer { task, version });
    }
    Ok(Decoded::Record(serde_json::from_slice(bytes)?))
}

#[cfg(test)]
mod tests;
