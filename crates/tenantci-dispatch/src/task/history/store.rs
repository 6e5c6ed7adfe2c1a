//! The task history in its bucket (`queue::history_bucket`): [`History::record`] merges an
//! observation into a task's record with a compare-and-set on its revision (two writers
//! never lose each other's marks, `super::merge` makes a replay a no-op), and the write that
//! completes a record observes its phases in the metrics, at most once across every instance
//! (never twice; a completing write whose reply was lost is not observed on its retry).
//! [`History::note`] does it off the caller's path: a history write never delays a claim, a
//! start or a report, and a failed one is logged, never fatal (the task matters more than
//! its history). Reading: one record by task ([`History::get`]), and the writes in sequence
//! order for the status API's [`Seen`] (direct gets, as `task::mirror` reads the ledger).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};

use super::{Decoded, Observation, Record, decode, merge};
use crate::metrics::Metrics;
use crate::queue::history_bucket::BUCKET;
use crate::task_id::TaskId;

fn key(task: TaskId) -> String {
    format!("task.{task}")
}

/// Compare-and-set attempts before a write gives up (another writer kept winning): several
/// observers of one task may write at the same moment (a claim's description and its mark, a
/// Pod's two times, a facade's report).
const CAS_ATTEMPTS: usize = 12;

/// A pause of 1 to 20 ms between two attempts, so writers that lost together do not meet
/// again at once.
async fn back_off() {
    use rand::Rng as _;
    let ms = rand::rng().random_range(1..=20);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// Why the history could not be read or written; NATS's error kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The bucket could not be opened (not created by `queue init` or the dispatcher).
    #[error("task history: cannot open the bucket {BUCKET}: {0}")]
    Open(#[source] jetstream::context::KeyValueError),
    /// A record could not be read.
    #[error("task history: cannot read a record: {0}")]
    Read(#[source] kv::EntryError),
    /// A record that does not decode.
    #[error("task history: the record of task {task} does not decode: {source}")]
    Decode {
        /// Its task.
        task: TaskId,
        /// What the JSON decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// Every write lost the race, or the last one failed.
    #[error("task history: the record of task {task} could not be written: {reason}")]
    Write {
        /// Its task.
        task: TaskId,
        /// The last write's error.
        reason: String,
    },
    /// The bucket's stream could not be read at a sequence.
    #[error("task history: cannot read the latest writes: {0}")]
    ReadWrites(#[source] jetstream::stream::DirectGetError),
}

/// The history, reached as `ci-worker`.
#[derive(Clone)]
pub struct History {
    kv: kv::Store,
    metrics: Option<Arc<Metrics>>,
}

impl History {
    /// Opens the bucket; `metrics` observe each completed record's phases.
    pub async fn open(
        js: &jetstream::Context,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<History, HistoryError> {
        let kv = js.get_key_value(BUCKET).await.map_err(HistoryError::Open)?;
        Ok(History { kv, metrics })
    }

    async fn entry(&self, task: TaskId) -> Result<Option<(Decoded, u64)>, HistoryError> {
        let found = self.kv.entry(key(task)).await.map_err(HistoryError::Read)?;
        let Some(e) = found.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let d = decode(task, &e.value).map_err(|source| HistoryError::Decode { task, source })?;
        Ok(Some((reported(d), e.revision)))
    }

    /// The record of `task` (None: never seen, or past the bounds).
    pub async fn get(&self, task: TaskId) -> Result<Option<Decoded>, HistoryError> {
        Ok(self.entry(task).await?.map(|(d, _)| d))
    }

    /// Merges `seen` into the record of `task`; returns it as it stands afterwards (None: a
    /// newer release's record, left as it is).
    pub async fn record(
        &self,
        task: TaskId,
        seen: &Observation,
    ) -> Result<Option<Record>, HistoryError> {
        let mut last = String::new();
        for _ in 0..CAS_ATTEMPTS {
            let current = self.entry(task).await?;
            let (record, revision) = match current {
                Some((Decoded::Newer { .. }, _)) => return Ok(None),
                Some((Decoded::Record(r), rev)) => (Some(r), Some(rev)),
                None => (None, None),
            };
            let Some(next) = merge(record.as_ref(), task, seen) else {
                return Ok(record);
            };
            let value = serde_json::to_vec(&next.record).expect("a record always serializes");
            let written = match revision {
                Some(rev) => self
                    .kv
                    .update(key(task), value.into(), rev)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                None => self
                    .kv
                    .create(key(task), value.into())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            };
            match written {
                Ok(()) => {
                    if next.completed
                        && let Some(m) = &self.metrics
                    {
                        observe(m, &next.record);
                    }
                    return Ok(Some(next.record));
                }
                // Another writer was first: read again and merge over its record.
                Err(e) => {
                    last = e;
                    back_off().await;
                }
            }
        }
        Err(HistoryError::Write { task, reason: last })
    }

    /// [`History::record`] in the background, a failure logged.
    pub fn note(&self, task: TaskId, seen: Observation) {
        let history = self.clone();
        tokio::spawn(async move {
            if let Err(e) = history.record(task, &seen).await {
                tracing::warn!(task = task.get(), error = %e, "the task history (NATS bucket CI_HISTORY) did not record a step; the task goes on, its history misses it");
            }
        });
    }

    /// The first write at or after stream sequence `from` (one direct get): its sequence, its
    /// task and its record (None: deleted or purged); None when there is none yet.
    pub async fn written_from(
        &self,
        from: u64,
    ) -> Result<Option<(u64, TaskId, Option<Decoded>)>, HistoryError> {
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
            Err(e) => return Err(HistoryError::ReadWrites(e)),
        };
        let Some(task) = m.subject.rsplit('.').next().and_then(|t| t.parse().ok()) else {
            // Not a task's key: skipped, as nothing here writes one.
            return Ok(Some((m.sequence, TaskId::new(0), None)));
        };
        let record = match m.payload.is_empty() {
            true => None,
            false => Some(reported(
                decode(task, &m.payload).map_err(|source| HistoryError::Decode { task, source })?,
            )),
        };
        Ok(Some((m.sequence, task, record)))
    }
}

/// `d`, reported once (`newer_records`) when a newer release wrote it.
fn reported(d: Decoded) -> Decoded {
    if let Decoded::Newer { task, version } = &d {
        let newer = tenantci_core::record_version::Newer {
            kind: super::KIND.name,
            found: version.to_string(),
            reads: super::KIND.current,
        };
        crate::newer_records::report(&newer, &format!("{BUCKET} {}", key(*task)));
    }
    d
}

/// Each phase of a completed record, into the metrics (`none` for a missing class).
fn observe(metrics: &Metrics, record: &Record) {
    let backend = record.backend.as_deref().unwrap_or("unknown");
    let class = record.class.as_deref().unwrap_or("none");
    for span in record.phases() {
        metrics.task_phase(span.phase.name(), backend, class, span.took);
    }
}

/// The records read so far by sequence, for the status API: each task's latest write, and
/// the sequence to read on from. Bounded as the bucket is (the newest `max_tasks`).
#[derive(Debug, Default)]
pub struct Seen {
    next: u64,
    records: BTreeMap<TaskId, (u64, Decoded)>,
}

impl Seen {
    /// Reads every write since the last call (one direct get each, plus one that finds
    /// none); a failed read is logged and what was read kept.
    pub async fn catch_up(&mut self, history: &History, max_tasks: usize) {
        loop {
            match history.written_from(self.next.max(1)).await {
                Ok(Some((sequence, task, record))) => {
                    self.next = sequence + 1;
                    self.apply(sequence, task, record, max_tasks);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "the status API could not read the task history's latest writes");
                    break;
                }
            }
        }
    }

    /// Takes one write and keeps the newest `max_tasks` records (pure).
    pub fn apply(
        &mut self,
        sequence: u64,
        task: TaskId,
        record: Option<Decoded>,
        max_tasks: usize,
    ) {
        match record {
            Some(r) => self.records.insert(task, (sequence, r)),
            None => self.records.remove(&task),
        };
        if self.records.len() > max_tasks {
            let mut by_age: Vec<(u64, TaskId)> =
                self.records.iter().map(|(t, (s, _))| (*s, *t)).collect();
            by_age.sort_unstable();
            for (_, t) in by_age.iter().take(self.records.len() - max_tasks) {
                self.records.remove(t);
            }
        }
    }

    /// Drops the records whose last mark is before `cutoff` (the bucket's `max_age` drops them
    /// without a marker the catch-up would read) (pure).
    pub fn expire(&mut self, cutoff: chrono::DateTime<chrono::Utc>) {
        self.records.retain(|_, (_, d)| match d {
            Decoded::Record(r) => r.last_at().is_none_or(|at| at >= cutoff),
            Decoded::Newer { .. } => true,
        });
    }

    /// Every record held, by task.
    pub fn records(&self) -> impl Iterator<Item = &Decoded> {
        self.records.values().map(|(_, d)| d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::history::Mark;

    fn record(task: i64, at: i64) -> Option<Decoded> {
        let mut r = Record::new(TaskId::new(task));
        let t = chrono::DateTime::from_timestamp(1_800_000_000 + at, 0).unwrap();
        r.marks.insert(Mark::Claimed, t);
        Some(Decoded::Record(r))
    }

    #[test]
    fn the_status_keeps_the_newest_records_as_the_bucket_does() {
        let mut seen = Seen::default();
        seen.apply(1, TaskId::new(1), record(1, 0), 2);
        seen.apply(2, TaskId::new(2), record(2, 10), 2);
        // Task 1 written again: now the newest write.
        seen.apply(3, TaskId::new(1), record(1, 20), 2);
        seen.apply(4, TaskId::new(3), record(3, 30), 2);
        let kept: Vec<TaskId> = seen.records.keys().copied().collect();
        assert_eq!(kept, vec![TaskId::new(1), TaskId::new(3)]);
        seen.apply(5, TaskId::new(3), None, 2);
        assert_eq!(seen.records().count(), 1, "a deleted record goes");
        seen.expire(chrono::DateTime::from_timestamp(1_800_000_021, 0).unwrap());
        assert_eq!(seen.records().count(), 0, "past max_age");
    }
}
