//! The claim registry of one leadership term: which tasks this leader queued (claimed at
//! Gitea, not yet an executor) and which executors run, each holding a backend admission slot.
//! It is rebuilt from the apiserver when a term starts (recovery), so nothing here must
//! survive a crash: the Pod and Secret metadata and the JetStream stream are the truth.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::queue::BackendKind;
use crate::queue::consumer::Slot;

struct Running {
    backend: BackendKind,
    /// None for an executor recovered beyond capacity (after the capacity was lowered).
    _slot: Option<Slot>,
}

#[derive(Default)]
struct Inner {
    queued: BTreeMap<i64, BackendKind>,
    running: BTreeMap<i64, Running>,
    /// Queued tasks Gitea ended (cancelled) before an executor started: the worker acks
    /// their assignment without starting one.
    withdrawn: BTreeSet<i64>,
    /// The resource class slot each task holds, from before its start until it is gone.
    classes: BTreeMap<i64, String>,
}

#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
    /// Fired when capacity frees up or an executor reached its terminal state.
    changed: Notify,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The scheduler queued `task` on `backend`.
    pub fn queued(&self, task: i64, backend: BackendKind) {
        self.lock().queued.insert(task, backend);
    }

    /// The worker (or recovery) knows `task`'s executor exists. Returns false when it was
    /// already running: the caller then does not hold a second slot.
    pub fn running(
        &self,
        task: i64,
        backend: BackendKind,
        slot: impl FnOnce() -> Option<Slot>,
    ) -> bool {
        let mut g = self.lock();
        g.queued.remove(&task);
        if g.running.contains_key(&task) {
            return false;
        }
        g.running.insert(
            task,
            Running {
                backend,
                _slot: slot(),
            },
        );
        true
    }

    /// Takes a slot of `class` for `task` unless `capacity` of them are held by other tasks.
    /// True when `task` holds one (a task that holds one already keeps it).
    pub fn reserve_class(&self, task: i64, class: &str, capacity: u32) -> bool {
        let mut g = self.lock();
        if g.classes.contains_key(&task) {
            return true;
        }
        let held = g.classes.values().filter(|c| *c == class).count();
        if held >= capacity as usize {
            return false;
        }
        g.classes.insert(task, class.to_string());
        true
    }

    /// `task` holds a slot of `class` whatever the class's capacity: an executor that exists
    /// (found by recovery, or started again) counts, so new ones wait until it is gone.
    pub fn hold_class(&self, task: i64, class: &str) {
        self.lock().classes.insert(task, class.to_string());
    }

    /// `task`'s class slot is free again (its start failed; `finished` frees it too).
    pub fn release_class(&self, task: i64) {
        if self.lock().classes.remove(&task).is_some() {
            self.changed.notify_waiters();
        }
    }

    /// Tasks holding a slot of `class`.
    pub fn class_count(&self, class: &str) -> usize {
        self.lock().classes.values().filter(|c| *c == class).count()
    }

    pub fn is_running(&self, task: i64) -> bool {
        self.lock().running.contains_key(&task)
    }

    /// The executor is gone: its slot frees up.
    pub fn finished(&self, task: i64) {
        let removed = {
            let mut g = self.lock();
            g.queued.remove(&task);
            let class = g.classes.remove(&task).is_some();
            g.running.remove(&task).is_some() || class
        };
        if removed {
            self.changed.notify_waiters();
        }
    }

    /// Gitea ended `task` while it was queued: it must not start. True when it was queued.
    pub fn withdraw(&self, task: i64) -> bool {
        let mut g = self.lock();
        let was_queued = g.queued.remove(&task).is_some();
        if was_queued {
            g.withdrawn.insert(task);
        }
        was_queued
    }

    /// Whether `task` was withdrawn (once: the caller drops its assignment).
    pub fn take_withdrawn(&self, task: i64) -> bool {
        self.lock().withdrawn.remove(&task)
    }

    /// Tasks queued by this leader that have no executor yet.
    pub fn queued_tasks(&self) -> Vec<i64> {
        self.lock().queued.keys().copied().collect()
    }

    pub fn running_tasks(&self) -> Vec<i64> {
        self.lock().running.keys().copied().collect()
    }

    pub fn running_tasks_of(&self, backend: BackendKind) -> Vec<i64> {
        self.lock()
            .running
            .iter()
            .filter(|(_, r)| r.backend == backend)
            .map(|(t, _)| *t)
            .collect()
    }

    pub fn running_count(&self, backend: BackendKind) -> usize {
        self.lock()
            .running
            .values()
            .filter(|r| r.backend == backend)
            .count()
    }

    /// Forgets everything (a leadership term ended; slots go with their consumer).
    pub fn clear(&self) {
        let mut g = self.lock();
        g.queued.clear();
        g.running.clear();
        g.withdrawn.clear();
        g.classes.clear();
    }

    /// Something changed that the scheduler or reconciler should look at now.
    pub fn notify(&self) {
        self.changed.notify_waiters();
    }

    pub async fn changed(&self) {
        self.changed.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_moves_from_queued_to_running_to_gone() {
        let r = Registry::default();
        r.queued(7, BackendKind::Pod);
        assert_eq!(r.queued_tasks(), [7]);
        assert!(r.running(7, BackendKind::Pod, || None));
        assert!(!r.running(7, BackendKind::Pod, || panic!("no second slot")));
        assert_eq!(
            (r.queued_tasks().len(), r.running_count(BackendKind::Pod)),
            (0, 1)
        );
        r.finished(7);
        assert!(r.running_tasks().is_empty());
    }

    #[test]
    fn a_class_holds_at_most_its_capacity() {
        let r = Registry::default();
        assert!(r.reserve_class(1, "large", 1));
        assert!(r.reserve_class(1, "large", 1), "held already: kept");
        assert!(!r.reserve_class(2, "large", 1), "full");
        assert!(r.reserve_class(3, "small", 2), "another class has its own");
        r.finished(1);
        assert!(
            r.reserve_class(2, "large", 1),
            "freed when the task is gone"
        );
        r.release_class(2);
        assert_eq!(r.class_count("large"), 0);
    }
}
