//! Tasks whose final state Gitea accepted through this facade instance, with that state: a
//! capability stays cryptographically valid after its task ended, so the facade must remember
//! the end to refuse what comes after it (a replayed final UpdateTask would otherwise reach
//! Gitea again).
//!
//! Bounded: at most [`CAPACITY`] entries, the oldest forgotten first. An entry only matters
//! while the task's executor can still call, that is until the reconciler deleted it (seconds
//! after the end); past that the executor is gone, which the facade also takes as the end, and
//! the claim ledger keeps the final state across instances and restarts. At
//! 16 bytes a task plus the queue's copy, [`CAPACITY`] entries hold well under 1 MiB.
//!
//! Pure bookkeeping: no I/O.

use crate::task_id::TaskId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use tenantci_core::forge::gitea::proto::TaskResult;

/// Entries kept; far more than executors end within one reconciler pass.
pub const CAPACITY: usize = 4096;

#[derive(Default)]
struct Inner {
    results: BTreeMap<TaskId, TaskResult>,
    /// Insertion order, for forgetting the oldest.
    order: VecDeque<TaskId>,
}

/// The finished tasks of one facade instance.
pub struct Finished {
    inner: Mutex<Inner>,
    capacity: usize,
}

impl Default for Finished {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl Finished {
    /// Keeping at most `capacity` tasks (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Finished {
            inner: Mutex::default(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gitea accepted `result` as `task`'s final state. A second record keeps the first.
    pub fn record(&self, task: TaskId, result: TaskResult) {
        let mut g = self.lock();
        if g.results.contains_key(&task) {
            return;
        }
        while g.order.len() >= self.capacity {
            if let Some(oldest) = g.order.pop_front() {
                g.results.remove(&oldest);
            }
        }
        g.results.insert(task, result);
        g.order.push_back(task);
    }

    /// The final state of `task`, when this instance saw it end.
    pub fn result(&self, task: TaskId) -> Option<TaskResult> {
        self.lock().results.get(&task).copied()
    }

    /// How many tasks are remembered.
    pub fn len(&self) -> usize {
        self.lock().results.len()
    }

    /// No task is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_final_state_is_kept() {
        let f = Finished::default();
        assert_eq!(f.result(TaskId::new(7)), None);
        f.record(TaskId::new(7), TaskResult::Success);
        f.record(TaskId::new(7), TaskResult::Failure);
        assert_eq!(f.result(TaskId::new(7)), Some(TaskResult::Success));
    }

    #[test]
    fn the_oldest_entries_go_first_and_the_size_stays_bounded() {
        let f = Finished::with_capacity(3);
        for task in 1..=10 {
            f.record(TaskId::new(task), TaskResult::Success);
            assert!(f.len() <= 3);
        }
        assert_eq!(f.len(), 3);
        assert_eq!(f.result(TaskId::new(7)), None);
        for task in 8..=10 {
            assert_eq!(f.result(TaskId::new(task)), Some(TaskResult::Success));
        }
    }
}
