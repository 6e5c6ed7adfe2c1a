//! The claim ledger: a JetStream key-value bucket ([`BUCKET`]) with one entry per task a
//! scheduler claimed, from the moment FetchTask returned it until Gitea accepted its final
//! state. It is what survives when the executor objects do not (an apiserver that lost its
//! state, Pods deleted while no dispatcher was leading, a VM sandbox that is simply gone):
//! recovery at every leadership term reads it first.
//!
//! An entry is `{version, task, attempt, backend, phase, result?, assignment?, at}`; its
//! version follows the one rule (`tenantci_core::record_version`): one without is version 1,
//! one a newer release wrote is reported (`newer_records`) and left as it is, never merged
//! over: [`LedgerError::Newer`] for its task, skipped by [`Ledger::entries`] and the mirror. The phase only
//! moves forward (claimed, queued, started, fetched, reported, final); a new attempt restarts
//! at `started`; a final entry never changes. Until the executor's first report the entry
//! keeps the sealed assignment (ciphertext, as on the queue): a task whose executor vanished
//! before fetching can be started again, and an executor whose backend keeps no copy of it
//! (a VM sandbox has no Secret) is handed its task from here, again after a lost FetchTask
//! answer; from `reported` on it is dropped. [`merge`] is that rule, pure; [`Ledger::record`]
//! applies it with a compare-and-set on the entry's revision, so two writers never lose each
//! other's step.
//!
//! Retention: the bucket keeps one revision per key and drops every entry
//! `ledger_bucket::RETENTION` after its last write (JetStream `max_age`). Final entries are
//! kept that long on purpose: a facade of any instance answers a replayed report from them.
//! No live task outlives its entry as long as RETENTION exceeds Gitea's `[actions]
//! ENDLESS_TASK_TIMEOUT` (3h by default), after which Gitea stops the task itself.
//!
//! Backend-neutral: the backend is a field; nothing here knows Pods or VMs. Does not decide
//! what recovery does with an entry (`task::recovery`).
//!
//! With a history beside it ([`Ledger::with_history`]), each write that moves a task's phase
//! also marks it in the task history (`task::history`), in the background: claimed, queued,
//! executor created (`started`), fetched, reported (`final`); the first report is no mark.

use async_nats::jetstream::{self, kv};
use futures::TryStreamExt as _;
use serde::{Deserialize, Serialize};

use tenantci_core::record_version::{Kind, Newer};

use crate::backend_kind::BackendKind;
use crate::newer_records;
use crate::queue::assignment::Assignment;
use crate::queue::ledger_bucket::BUCKET;
use crate::task::Progress;
use crate::task::history::store::History;
use crate::task::history::{Mark, Observation};
use crate::task_id::TaskId;

/// An entry's kind and the version this release writes (and reads up to).
pub const KIND: Kind = Kind::new("claim_ledger", 1);

fn key(task: TaskId) -> String {
    format!("task.{task}")
}

/// Where a claimed task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// FetchTask returned it; not yet on the queue.
    Claimed,
    /// Its assignment is on the queue.
    Queued,
    /// Its executor exists (this attempt's).
    Started,
    /// Its executor has been handed the task.
    Fetched,
    /// Its executor reported (UpdateLog / UpdateTask): the hand-out arrived; no second one.
    Reported,
    /// Gitea accepted its final state.
    Final,
}

impl Phase {
    /// How far the executor of an entry at this phase got, for a backend that cannot tell
    /// by itself.
    pub fn progress(self) -> Progress {
        match self {
            Phase::Claimed | Phase::Queued | Phase::Started => Progress::Unfetched,
            Phase::Fetched => Progress::Fetched,
            Phase::Reported | Phase::Final => Progress::Reported,
        }
    }
}

/// One task's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The entry's format ([`KIND`]); absent on entries of releases before the field: 1.
    #[serde(default = "unversioned")]
    pub version: u32,
    /// The Gitea task id.
    pub task: TaskId,
    /// The latest attempt (1: the first executor).
    pub attempt: u32,
    /// The backend its executors run on; the first write's stays.
    pub backend: BackendKind,
    /// How far the latest attempt got.
    pub phase: Phase,
    /// The final result's proto name (`RESULT_SUCCESS`), once final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The sealed assignment, until the executor's first report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Assignment>,
    /// When this entry was written (RFC 3339, UTC).
    pub at: chrono::DateTime<chrono::Utc>,
}

fn unversioned() -> u32 {
    tenantci_core::record_version::UNVERSIONED
}

impl Entry {
    /// A step of `task` to record; [`merge`] decides what it changes.
    pub fn step(task: TaskId, attempt: u32, backend: BackendKind, phase: Phase) -> Entry {
        Entry {
            version: KIND.current,
            task,
            attempt,
            backend,
            phase,
            result: None,
            assignment: None,
            at: chrono::Utc::now(),
        }
    }

    /// This step carrying the sealed assignment `a` (kept until the executor's first report).
    pub fn with_assignment(mut self, a: &Assignment) -> Entry {
        self.assignment = Some(a.clone());
        self
    }

    /// This step carrying the final result's proto name (`RESULT_SUCCESS`).
    pub fn with_result(mut self, result: &str) -> Entry {
        self.result = Some(result.to_string());
        self
    }

    /// Whether Gitea accepted the task's final state: the entry never changes again.
    pub fn is_final(&self) -> bool {
        self.phase == Phase::Final
    }
}

/// Reads an entry's bytes: [`LedgerError::Newer`] (reported once) for a newer release's.
fn decode(task: TaskId, bytes: &[u8]) -> Result<Entry, LedgerError> {
    let decoding = |source| LedgerError::Decode { task, source };
    if let Err(newer) = KIND.check_json(bytes).map_err(decoding)? {
        newer_records::report(&newer, &format!("{BUCKET} {}", key(task)));
        return Err(LedgerError::Newer { task, newer });
    }
    serde_json::from_slice(bytes).map_err(decoding)
}

/// What recording `step` over `current` writes; None when it changes nothing (pure).
pub fn merge(current: Option<&Entry>, step: Entry) -> Option<Entry> {
    let Some(cur) = current else {
        return Some(trimmed(step));
    };
    if cur.is_final() {
        return None;
    }
    let next = if step.phase == Phase::Final {
        Entry {
            attempt: cur.attempt.max(step.attempt),
            ..step
        }
    } else if step.attempt > cur.attempt {
        step
    } else if step.attempt == cur.attempt && step.phase > cur.phase {
        Entry {
            assignment: step.assignment.or_else(|| cur.assignment.clone()),
            ..step
        }
    } else {
        return None;
    };
    Some(trimmed(Entry {
        backend: cur.backend,
        ..next
    }))
}

/// From `reported` on the assignment is not needed (and not kept).
fn trimmed(mut e: Entry) -> Entry {
    if e.phase >= Phase::Reported {
        e.assignment = None;
    }
    e
}

/// The history's mark for a ledger phase (None: the first report is no mark of its own).
fn history_mark(phase: Phase) -> Option<Mark> {
    match phase {
        Phase::Claimed => Some(Mark::Claimed),
        Phase::Queued => Some(Mark::Queued),
        Phase::Started => Some(Mark::ExecutorCreated),
        Phase::Fetched => Some(Mark::Fetched),
        Phase::Reported => None,
        Phase::Final => Some(Mark::Reported),
    }
}

/// One write read back from the bucket's stream ([`Ledger::written_from`]).
#[derive(Debug, Clone)]
pub struct Written {
    /// The write's sequence in the bucket's stream.
    pub sequence: u64,
    /// The task whose entry was written.
    pub task: TaskId,
    /// None: the key was deleted or purged.
    pub entry: Option<Entry>,
}

/// Why the ledger could not do what was asked: the step that failed, with what NATS (or a
/// record's bytes) answered kept as the source, so a caller tells a timeout from a refusal by
/// the type (`kind()` of async-nats's errors), not by the text.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The bucket could not be opened (not created by `queue init`, or NATS did not answer).
    #[error("claim ledger: cannot open the bucket: {0}")]
    Open(#[source] jetstream::context::KeyValueError),
    /// An entry could not be read.
    #[error("claim ledger: cannot read an entry: {0}")]
    Read(#[source] kv::EntryError),
    /// An entry (read, or from the bucket's stream) that is not an [`Entry`].
    #[error("claim ledger: the entry of task {task} does not decode: {source}")]
    Decode {
        /// The task whose entry it is.
        task: TaskId,
        /// What the JSON decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// A task's first entry could not be created ([`Ledger::record_first`]).
    #[error("claim ledger: cannot write an entry: {0}")]
    Write(#[source] kv::CreateError),
    /// Every one of `CAS_ATTEMPTS` (5) writes failed; the last one's error is the source (a lost
    /// compare-and-set, as a rule).
    #[error(
        "claim ledger: the entry of task {task} kept changing; {CAS_ATTEMPTS} writes lost the race"
    )]
    Contended {
        /// The task whose entry kept changing.
        task: TaskId,
        /// The last write's error.
        #[source]
        last: LostWrite,
    },
    /// The bucket's stream could not be read at a sequence ([`Ledger::written_from`]).
    #[error("claim ledger: cannot read the latest writes: {0}")]
    ReadWrites(#[source] jetstream::stream::DirectGetError),
    /// A key under `task.` that does not name a task (`subject`: the key's subject, data shown
    /// to the operator).
    #[error("claim ledger: the key `{subject}` at sequence {sequence} is not a task's")]
    NotATask {
        /// The key's subject.
        subject: async_nats::Subject,
        /// Its sequence in the bucket's stream.
        sequence: u64,
    },
    /// The entry of `task` was written by a newer release: left as it is (and reported once).
    #[error("claim ledger: the entry of task {task}: {newer}")]
    Newer {
        /// The task whose entry it is.
        task: TaskId,
        /// Its version and what to do.
        newer: Newer,
    },
    /// The bucket's keys could not be listed ([`Ledger::entries`]).
    #[error("claim ledger: cannot list the entries: {0}")]
    List(#[source] jetstream::stream::InfoError),
}

/// A compare-and-set write of [`Ledger::record`] that did not land.
#[derive(Debug, thiserror::Error)]
pub enum LostWrite {
    /// The update of an existing entry (its revision moved on, as a rule).
    #[error(transparent)]
    Update(#[from] kv::UpdateError),
    /// The create of a new entry (another writer created it first, as a rule).
    #[error(transparent)]
    Create(#[from] kv::CreateError),
}

/// The ledger, reached through a JetStream context (as `ci-worker`, whose permissions allow
/// exactly this bucket's reads and writes).
#[derive(Clone)]
pub struct Ledger {
    kv: kv::Store,
    /// Where each phase change is also marked (`task::history`); None: not kept.
    history: Option<History>,
}

/// Compare-and-set attempts before [`Ledger::record`] gives up (another writer kept winning).
const CAS_ATTEMPTS: usize = 5;

impl Ledger {
    /// Opens the bucket `queue init` created.
    pub async fn open(js: &jetstream::Context) -> Result<Ledger, LedgerError> {
        let kv = js.get_key_value(BUCKET).await.map_err(LedgerError::Open)?;
        Ok(Ledger { kv, history: None })
    }

    /// This ledger, also marking each phase change in `history` (in the background: the
    /// step never waits for its history).
    pub fn with_history(mut self, history: History) -> Ledger {
        self.history = Some(history);
        self
    }

    /// The task history beside it, when kept.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// Marks in the history what `written` (over `before`) changed, when it moved the phase.
    fn mark(&self, before: Option<Phase>, written: &Entry) {
        let Some(history) = &self.history else {
            return;
        };
        if before == Some(written.phase) {
            return;
        }
        let Some(mark) = history_mark(written.phase) else {
            return;
        };
        let seen = Observation {
            backend: Some(written.backend),
            result: written.result.clone(),
            ..Observation::mark(mark, written.at)
        };
        history.note(written.task, seen);
    }

    /// The entry of `task` and its revision.
    async fn entry(&self, task: TaskId) -> Result<Option<(Entry, u64)>, LedgerError> {
        let found = self.kv.entry(key(task)).await.map_err(LedgerError::Read)?;
        let Some(e) = found.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        Ok(Some((decode(task, &e.value)?, e.revision)))
    }

    /// The entry of `task`; None when there is none (never claimed here, or past the retention).
    pub async fn get(&self, task: TaskId) -> Result<Option<Entry>, LedgerError> {
        Ok(self.entry(task).await?.map(|(e, _)| e))
    }

    /// Records `step` ([`merge`]); returns the entry as it stands afterwards.
    pub async fn record(&self, step: Entry) -> Result<Option<Entry>, LedgerError> {
        let task = step.task;
        let mut last = None;
        for _ in 0..CAS_ATTEMPTS {
            let current = self.entry(task).await?;
            let Some(next) = merge(current.as_ref().map(|(e, _)| e), step.clone()) else {
                return Ok(current.map(|(e, _)| e));
            };
            let value = serde_json::to_vec(&next).expect("an entry always serializes");
            let written = match &current {
                Some((_, revision)) => self
                    .kv
                    .update(key(task), value.into(), *revision)
                    .await
                    .map(|_| ())
                    .map_err(LostWrite::from),
                None => self
                    .kv
                    .create(key(task), value.into())
                    .await
                    .map(|_| ())
                    .map_err(LostWrite::from),
            };
            match written {
                Ok(()) => {
                    self.mark(current.as_ref().map(|(e, _)| e.phase), &next);
                    return Ok(Some(next));
                }
                // Another writer was first: read again and merge over its entry.
                Err(e) => {
                    tracing::debug!(task = task.get(), error = %e, "claim ledger: write lost a race; retrying");
                    last = Some(e);
                }
            }
        }
        Err(LedgerError::Contended {
            task,
            last: last.expect("CAS_ATTEMPTS is at least 1"),
        })
    }

    /// Records the first step of a task just claimed: one create, no read before it (the
    /// scheduler's path, where every round trip is claim latency). An entry already there (a
    /// task Gitea handed out again) is merged as [`Ledger::record`] does.
    pub async fn record_first(&self, step: Entry) -> Result<Option<Entry>, LedgerError> {
        let Some(first) = merge(None, step.clone()) else {
            return self.record(step).await;
        };
        let value = serde_json::to_vec(&first).expect("an entry always serializes");
        match self.kv.create(key(step.task), value.into()).await {
            Ok(_) => {
                self.mark(None, &first);
                Ok(Some(first))
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => self.record(step).await,
            Err(e) => Err(LedgerError::Write(e)),
        }
    }

    /// [`Ledger::record_first`], logging a failure instead of returning it.
    pub async fn note_first(&self, step: Entry) {
        let (task, phase) = (step.task, step.phase);
        if let Err(e) = self.record_first(step).await
            && !matches!(e, LedgerError::Newer { .. })
        {
            tracing::warn!(task = task.get(), ?phase, error = %e, "the claim ledger (NATS bucket CI_CLAIMS) did not record this step; the step goes on, and recovery reads the apiserver's objects instead");
        }
    }

    /// Records `step`, logging a failure instead of returning it: the step itself (a claim,
    /// a start, a report) matters more, and recovery still has what the backends list.
    pub async fn note(&self, step: Entry) {
        let (task, phase) = (step.task, step.phase);
        if let Err(e) = self.record(step).await
            && !matches!(e, LedgerError::Newer { .. })
        {
            tracing::warn!(task = task.get(), ?phase, error = %e, "the claim ledger (NATS bucket CI_CLAIMS) did not record this step; the step goes on, and recovery reads the apiserver's objects instead");
        }
    }

    /// The final result recorded for `task` (its proto name), if the entry is final.
    pub async fn final_result(&self, task: TaskId) -> Result<Option<String>, LedgerError> {
        Ok(self
            .get(task)
            .await?
            .filter(Entry::is_final)
            .map(|e| e.result.unwrap_or_default()))
    }

    /// The first write to an entry at or after stream sequence `from` (a direct get, one
    /// round trip); None when there is none yet (`task::mirror` reads on with it).
    pub async fn written_from(&self, from: u64) -> Result<Option<Written>, LedgerError> {
        let read = self
            .kv
            .stream
            .direct_get_next_for_subject(format!("$KV.{BUCKET}.task.>"), Some(from))
            .await;
        let m = match read {
            Ok(m) => m,
            Err(e) if e.kind() == jetstream::stream::DirectGetErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(LedgerError::ReadWrites(e)),
        };
        let sequence = m.sequence;
        let task = m.subject.rsplit('.').next().and_then(|t| t.parse().ok());
        let Some(task) = task else {
            return Err(LedgerError::NotATask {
                subject: m.subject,
                sequence: m.sequence,
            });
        };
        // A delete or purge marker has no value (and a `KV-Operation` header); a newer
        // release's entry is reported and shown as none (the mirror reads on past it).
        let entry = match m.payload.is_empty() {
            true => None,
            false => match decode(task, &m.payload) {
                Ok(e) => Some(e),
                Err(LedgerError::Newer { .. }) => None,
                Err(e) => return Err(e),
            },
        };
        Ok(Some(Written {
            sequence,
            task,
            entry,
        }))
    }

    /// Every entry within the retention, final ones too (what recovery looks at): one stream
    /// info (the keys) and one read per entry.
    pub async fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        let mut stream = self
            .kv
            .stream
            .info_with_subjects(format!("$KV.{BUCKET}.task.>"))
            .await
            .map_err(LedgerError::List)?;
        let mut tasks = Vec::new();
        while let Some((subject, _)) = stream.try_next().await.map_err(LedgerError::List)? {
            if let Some(task) = subject.rsplit('.').next().and_then(|t| t.parse().ok()) {
                tasks.push(task);
            }
        }
        tasks.sort_unstable();
        let mut all = Vec::new();
        for task in tasks {
            match self.get(task).await {
                Ok(e) => all.extend(e),
                // Reported; recovery leaves a newer release's task to that release.
                Err(LedgerError::Newer { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(attempt: u32, phase: Phase) -> Entry {
        Entry::step(TaskId::new(7), attempt, BackendKind::new("pod"), phase)
    }

    fn sealed() -> Assignment {
        let key = crate::queue::assignment::SealingKey::generate();
        Assignment::seal(&key, "7", 1, BackendKind::new("pod"), vec![], b"task").unwrap()
    }

    #[test]
    fn phases_only_move_forward_and_final_never_changes() {
        let claimed = merge(None, step(1, Phase::Claimed).with_assignment(&sealed())).unwrap();
        let queued = merge(Some(&claimed), step(1, Phase::Queued)).unwrap();
        assert_eq!(queued.phase, Phase::Queued);
        assert!(queued.assignment.is_some(), "kept until fetched");
        assert_eq!(merge(Some(&queued), step(1, Phase::Claimed)), None);
        let fetched = merge(Some(&queued), step(1, Phase::Fetched)).unwrap();
        assert!(fetched.assignment.is_some(), "kept for a repeated hand-out");
        let reported = merge(Some(&fetched), step(1, Phase::Reported)).unwrap();
        assert_eq!(reported.assignment, None, "dropped at the first report");
        let done = merge(
            Some(&reported),
            step(1, Phase::Final).with_result("RESULT_SUCCESS"),
        );
        let done = done.unwrap();
        assert_eq!(done.result.as_deref(), Some("RESULT_SUCCESS"));
        for later in [Phase::Started, Phase::Final] {
            assert_eq!(merge(Some(&done), step(2, later)), None);
        }
    }

    #[test]
    fn a_new_attempt_restarts_and_a_stale_one_changes_nothing() {
        let started = merge(None, step(1, Phase::Started)).unwrap();
        let second = merge(Some(&started), step(2, Phase::Started)).unwrap();
        assert_eq!((second.attempt, second.phase), (2, Phase::Started));
        assert_eq!(merge(Some(&second), step(1, Phase::Fetched)), None);
        let failed = merge(Some(&second), step(1, Phase::Final)).unwrap();
        assert_eq!(failed.attempt, 2, "final keeps the latest attempt");
    }

    /// The version rule: an entry of a release before the field is version 1; a newer
    /// release's is not read (whatever its fields say).
    #[test]
    fn an_entry_without_a_version_is_1_and_a_newer_one_is_not_read() {
        let task = TaskId::new(7);
        let old = br#"{"task":7,"attempt":1,"backend":"pod","phase":"claimed","at":"2026-12-01T00:00:00Z"}"#;
        assert_eq!(decode(task, old).unwrap().version, 1);
        let newer = br#"{"version":2,"task":7,"attempt":1,"backend":"pod","phase":"teleported","at":"2026-12-01T00:00:00Z"}"#;
        assert!(matches!(
            decode(task, newer),
            Err(LedgerError::Newer { newer, .. }) if newer.found == "2"
        ));
        let ours = serde_json::to_value(step(1, Phase::Claimed)).unwrap();
        assert_eq!(ours["version"], KIND.current);
    }

    #[test]
    fn the_backend_of_the_first_entry_stays() {
        let vm = merge(
            None,
            Entry::step(TaskId::new(7), 1, BackendKind::new("vm"), Phase::Claimed),
        )
        .unwrap();
        let next = merge(Some(&vm), step(1, Phase::Started)).unwrap();
        assert_eq!(next.backend, BackendKind::new("vm"));
    }
}
