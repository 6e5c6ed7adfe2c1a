//! The claim ledger as a local map, kept current by one watch of its bucket: what the status
//! API reads, so a status request costs no NATS round trip however many tasks are held (a
//! read per task held was one KV get each: a thousand at a thousand executors).
//!
//! The watch starts from each key's last value (JetStream's `LastPerSubject`) and then follows
//! every write, on an ordered consumer the client re-creates after a gap. When the watch ends
//! or cannot be opened (NATS away), it is opened again after [`REOPEN`] and its history
//! overwrites the map. The map may trail a write by the watch's delivery; the status it
//! feeds is a view, never a decision (the ledger itself stays the truth: `task::ledger`).
//! The bucket's `max_age` drops an entry without a marker, so an entry older than
//! `ledger_bucket::RETENTION` is dropped here too ([`Mirror::apply`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use tokio::sync::watch;

use crate::queue::ledger_bucket::RETENTION;
use crate::task::ledger::{Entry, Ledger};

/// The pause before a watch that failed or ended is opened again.
pub const REOPEN: Duration = Duration::from_secs(1);

/// The ledger's entries by task, as the watch last delivered them.
#[derive(Clone, Default)]
pub struct Mirror {
    entries: Arc<RwLock<BTreeMap<i64, Entry>>>,
}

impl Mirror {
    /// A mirror of `ledger`, followed until `stop` turns true.
    pub fn spawn(ledger: &Ledger, stop: watch::Receiver<bool>) -> Mirror {
        let mirror = Mirror::default();
        tokio::spawn(follow(ledger.clone(), mirror.clone(), stop));
        mirror
    }

    /// The entries of `tasks` that the mirror holds (no I/O).
    pub fn of(&self, tasks: impl IntoIterator<Item = i64>) -> BTreeMap<i64, Entry> {
        let entries = self
            .entries
            .read()
            .expect("the mirror's lock is never poisoned");
        tasks
            .into_iter()
            .filter_map(|t| entries.get(&t).map(|e| (t, e.clone())))
            .collect()
    }

    /// Takes one delivered write: `entry` for `task`, or None when the key was deleted or
    /// purged; and drops what the bucket's retention has dropped by `now`.
    pub fn apply(&self, task: i64, entry: Option<Entry>, now: chrono::DateTime<chrono::Utc>) {
        let mut entries = self
            .entries
            .write()
            .expect("the mirror's lock is never poisoned");
        match entry {
            Some(e) => entries.insert(task, e),
            None => entries.remove(&task),
        };
        let retention = chrono::Duration::from_std(RETENTION).expect("the retention fits");
        entries.retain(|_, e| now - e.at < retention);
    }
}

/// Follows the bucket into `mirror` until `stop` turns true (or its sender is gone).
async fn follow(ledger: Ledger, mirror: Mirror, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            ended = watch_once(&ledger, &mirror) => tracing::warn!(
                error = %ended,
                "the claim ledger's watch for the status API ended; opening it again in {REOPEN:?}"
            ),
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(REOPEN) => {}
        }
    }
}

/// One watch, applied to `mirror` until it fails or ends; returns why it ended.
async fn watch_once(ledger: &Ledger, mirror: &Mirror) -> String {
    let mut writes = match ledger.watch().await {
        Ok(w) => w,
        Err(e) => return e.to_string(),
    };
    while let Some(next) = writes.next().await {
        let write = match next {
            Ok(w) => w,
            Err(e) => return format!("claim ledger: the watch failed: {e}"),
        };
        let Some(task) = write.key.strip_prefix("task.").and_then(|t| t.parse().ok()) else {
            continue;
        };
        let entry = match write.operation {
            kv::Operation::Put => match serde_json::from_slice(&write.value) {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::warn!(task, error = %e, "the claim ledger's entry does not decode; the status shows the registry's state");
                    continue;
                }
            },
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        mirror.apply(task, entry, chrono::Utc::now());
    }
    "claim ledger: the watch ended".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::BackendKind;
    use crate::task::ledger::Phase;

    #[test]
    fn a_write_replaces_a_delete_removes_and_the_retention_drops() {
        let m = Mirror::default();
        let now = chrono::Utc::now();
        let mut old = Entry::step(1, 1, BackendKind::Pod, Phase::Final);
        old.at = now - chrono::Duration::from_std(RETENTION).unwrap();
        m.apply(1, Some(old), now);
        m.apply(
            2,
            Some(Entry::step(2, 1, BackendKind::Pod, Phase::Claimed)),
            now,
        );
        m.apply(
            2,
            Some(Entry::step(2, 1, BackendKind::Pod, Phase::Fetched)),
            now,
        );
        m.apply(
            3,
            Some(Entry::step(3, 1, BackendKind::Vm, Phase::Started)),
            now,
        );
        m.apply(3, None, now);
        let seen = m.of([1, 2, 3]);
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(seen[&2].phase, Phase::Fetched);
    }
}
