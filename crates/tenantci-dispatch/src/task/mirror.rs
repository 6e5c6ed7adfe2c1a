//! The claim ledger as a local map, caught up at each status request with the writes made
//! since the previous one: what the status API reads, so a request costs one NATS round trip
//! per entry written since the last request, plus one that finds none, however many tasks
//! are held (a read per task held was one KV get each: a thousand at a thousand executors).
//!
//! The catch-up reads the bucket's stream in sequence order (JetStream direct get, "next
//! message at or after this sequence on `task.>`"), which `ci-worker` may do; a watch would
//! need it to create consumers on the bucket. The first request reads every live entry once.
//! An entry keeps one revision, so only live ones are read. The bucket's `max_age` drops an
//! entry without a marker, so an entry older than `ledger_bucket::RETENTION` is dropped here
//! too (`Seen::apply`). A catch-up that fails (NATS away) keeps what it read: the status
//! shows the registry's state for the rest, and the next request goes on from there.

use std::collections::BTreeMap;

use tokio::sync::Mutex;

use crate::queue::ledger_bucket::RETENTION;
use crate::task::ledger::{Entry, Ledger, Written};
use crate::task_id::TaskId;

/// The ledger's entries by task, and the stream sequence to read on from.
pub struct Mirror {
    ledger: Ledger,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    next: u64,
    entries: BTreeMap<TaskId, Entry>,
}

impl Mirror {
    /// An empty mirror of `ledger`: its first request reads every live entry.
    pub fn new(ledger: Ledger) -> Mirror {
        Mirror {
            ledger,
            seen: Mutex::new(Seen {
                next: 1,
                ..Seen::default()
            }),
        }
    }

    /// The entries of `tasks`, after reading the writes since the last call; what a failed
    /// read leaves out is logged and missing.
    pub async fn of(&self, tasks: impl IntoIterator<Item = TaskId>) -> BTreeMap<TaskId, Entry> {
        let mut seen = self.seen.lock().await;
        loop {
            match self.ledger.written_from(seen.next).await {
                Ok(Some(w)) => {
                    seen.next = w.sequence + 1;
                    seen.apply(w, chrono::Utc::now());
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "the status API could not read the claim ledger's latest writes; it shows the registry's state for those tasks");
                    break;
                }
            }
        }
        tasks
            .into_iter()
            .filter_map(|t| seen.entries.get(&t).map(|e| (t, e.clone())))
            .collect()
    }
}

impl Seen {
    /// Takes one write (an entry, or None for a deleted or purged key) and drops what the
    /// bucket's retention has dropped by `now` (pure).
    fn apply(&mut self, w: Written, now: chrono::DateTime<chrono::Utc>) {
        match w.entry {
            Some(e) => self.entries.insert(w.task, e),
            None => self.entries.remove(&w.task),
        };
        let retention = chrono::Duration::from_std(RETENTION).expect("the retention fits");
        self.entries.retain(|_, e| now - e.at < retention);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend_kind::BackendKind;
    use crate::task::ledger::Phase;

    fn write(task: TaskId, entry: Option<Entry>) -> Written {
        Written {
            sequence: 0,
            task,
            entry,
        }
    }

    #[test]
    fn a_write_replaces_a_delete_removes_and_the_retention_drops() {
        let mut s = Seen::default();
        let now = chrono::Utc::now();
        let mut old = Entry::step(TaskId::new(1), 1, BackendKind::new("pod"), Phase::Final);
        old.at = now - chrono::Duration::from_std(RETENTION).unwrap();
        s.apply(write(TaskId::new(1), Some(old)), now);
        let step = |t, p| Some(Entry::step(t, 1, BackendKind::new("pod"), p));
        s.apply(
            write(TaskId::new(2), step(TaskId::new(2), Phase::Claimed)),
            now,
        );
        s.apply(
            write(TaskId::new(2), step(TaskId::new(2), Phase::Fetched)),
            now,
        );
        s.apply(
            write(TaskId::new(3), step(TaskId::new(3), Phase::Started)),
            now,
        );
        s.apply(write(TaskId::new(3), None), now);
        assert_eq!(
            s.entries.keys().copied().collect::<Vec<_>>(),
            vec![TaskId::new(2)]
        );
        assert_eq!(s.entries[&TaskId::new(2)].phase, Phase::Fetched);
    }
}
