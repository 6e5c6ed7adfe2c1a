//! The claim registry of one leadership term: which tasks this leader queued (claimed at
//! Gitea, not yet an executor), which executors run, each holding a backend admission slot,
//! which tasks hold a resource class slot, and which queued tasks Gitea withdrew. It is
//! rebuilt when a term starts (recovery: the claim ledger and what each backend lists), so
//! nothing here must survive a crash: the claim ledger is the truth (`task::ledger`).
//! Beside each task it keeps what the status API shows of it ([`Card`]: the job's names from
//! the Gitea task, decoded once by the scheduler, and when the task entered its registry
//! state); a task recovered by a new term has no names, only its times from then on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::backend_kind::BackendKind;
use crate::queue::consumer::Slot;
use crate::task_id::TaskId;

struct Running {
    backend: BackendKind,
    /// None for an executor recovered beyond capacity (after the capacity was lowered).
    _slot: Option<Slot>,
}

#[derive(Default)]
struct Inner {
    queued: BTreeMap<TaskId, BackendKind>,
    running: BTreeMap<TaskId, Running>,
    /// Queued tasks Gitea ended (cancelled) before an executor started: the worker acks
    /// their assignment without starting one.
    withdrawn: BTreeSet<TaskId>,
    /// The resource class slot each task holds, from before its start until it is gone.
    classes: BTreeMap<TaskId, String>,
    /// What the status API shows of each task held above.
    cards: BTreeMap<TaskId, Card>,
}

/// The job a task runs, as the Gitea task's context and workflow name it (no secret: the
/// context's tokens are not copied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Description {
    /// `owner/name`.
    pub repository: String,
    /// The workflow's name.
    pub workflow: String,
    /// The job's name (its key in the workflow).
    pub job: String,
    /// The run's number in its repository (`run_number`; the run's id when absent).
    pub run: Option<i64>,
    /// The job's `runs-on` labels.
    pub runs_on: Vec<String>,
    /// The resource class the scheduler picked (it holds a slot of it only once it starts).
    pub class: Option<String>,
}

/// Where a task stands in the registry (the status API refines it with the ledger's phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Claimed and queued; no executor yet.
    Queued,
    /// Its executor exists, holding a backend admission slot.
    Running,
    /// Gitea ended it while it was queued: the worker drops its assignment without starting it.
    Withdrawn,
}

/// One task as the status API reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The Gitea task id.
    pub task: TaskId,
    /// The backend it is queued for or runs on.
    pub backend: BackendKind,
    /// Where it stands.
    pub held: Held,
    /// The resource class whose slot it holds; None: no class, or no slot held yet.
    pub class: Option<String>,
    /// The job it runs; None for a task this term recovered rather than claimed.
    pub description: Option<Description>,
    /// When this term first held it.
    pub since: chrono::DateTime<chrono::Utc>,
    /// When it entered `held`.
    pub held_since: chrono::DateTime<chrono::Utc>,
}

impl Inner {
    /// Notes `task` as `held` on `backend` (kept when it is there already).
    fn card(&mut self, task: TaskId, backend: BackendKind, held: Held) {
        let now = chrono::Utc::now();
        let card = self.cards.entry(task).or_insert_with(|| Card {
            task,
            backend,
            held,
            class: None,
            description: None,
            since: now,
            held_since: now,
        });
        if card.held != held {
            card.held = held;
            card.held_since = now;
        }
    }
}

/// The registry of one term, shared by the term's actors and read by the status API. Cleared
/// when the term ends ([`Registry::clear`]).
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
    pub fn queued(&self, task: TaskId, backend: BackendKind) {
        let mut g = self.lock();
        g.queued.insert(task, backend);
        g.card(task, backend, Held::Queued);
    }

    /// The job `task` runs (the scheduler decoded it), for the status API.
    pub fn describe(&self, task: TaskId, description: Description) {
        if let Some(card) = self.lock().cards.get_mut(&task) {
            card.description = Some(description);
        }
    }

    /// Every task this term holds, by task id, with its class (a snapshot for the status API).
    pub fn cards(&self) -> Vec<Card> {
        let g = self.lock();
        g.cards
            .values()
            .map(|c| Card {
                class: g.classes.get(&c.task).cloned(),
                ..c.clone()
            })
            .collect()
    }

    /// The worker (or recovery) knows `task`'s executor exists. Returns false when it was
    /// already running: the caller then does not hold a second slot.
    pub fn running(
        &self,
        task: TaskId,
        backend: BackendKind,
        slot: impl FnOnce() -> Option<Slot>,
    ) -> bool {
        let mut g = self.lock();
        g.queued.remove(&task);
        g.card(task, backend, Held::Running);
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
    pub fn reserve_class(&self, task: TaskId, class: &str, capacity: u32) -> bool {
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
    pub fn hold_class(&self, task: TaskId, class: &str) {
        self.lock().classes.insert(task, class.to_string());
    }

    /// `task`'s class slot is free again (its start failed; `finished` frees it too).
    pub fn release_class(&self, task: TaskId) {
        if self.lock().classes.remove(&task).is_some() {
            self.changed.notify_waiters();
        }
    }

    /// Tasks holding a slot of `class`.
    pub fn class_count(&self, class: &str) -> usize {
        self.lock().classes.values().filter(|c| *c == class).count()
    }

    /// Whether `task`'s executor is known to exist (it holds a slot).
    pub fn is_running(&self, task: TaskId) -> bool {
        self.lock().running.contains_key(&task)
    }

    /// The executor is gone: its slot frees up.
    pub fn finished(&self, task: TaskId) {
        let removed = {
            let mut g = self.lock();
            g.queued.remove(&task);
            g.cards.remove(&task);
            let class = g.classes.remove(&task).is_some();
            g.running.remove(&task).is_some() || class
        };
        if removed {
            self.changed.notify_waiters();
        }
    }

    /// Gitea ended `task` while it was queued: it must not start. True when it was queued.
    pub fn withdraw(&self, task: TaskId) -> bool {
        let mut g = self.lock();
        let was_queued = g.queued.remove(&task).is_some();
        if was_queued {
            g.withdrawn.insert(task);
            if let Some(card) = g.cards.get_mut(&task) {
                card.held = Held::Withdrawn;
                card.held_since = chrono::Utc::now();
            }
        }
        was_queued
    }

    /// Whether `task` was withdrawn (once: the caller drops its assignment).
    pub fn take_withdrawn(&self, task: TaskId) -> bool {
        let mut g = self.lock();
        let was = g.withdrawn.remove(&task);
        if was {
            g.cards.remove(&task);
        }
        was
    }

    /// Tasks queued by this leader that have no executor yet.
    pub fn queued_tasks(&self) -> Vec<TaskId> {
        self.lock().queued.keys().copied().collect()
    }

    /// The queued tasks with the backend each was queued for.
    pub fn queued_on(&self) -> BTreeMap<TaskId, BackendKind> {
        self.lock().queued.clone()
    }

    /// Tasks whose executor exists, every backend.
    pub fn running_tasks(&self) -> Vec<TaskId> {
        self.lock().running.keys().copied().collect()
    }

    /// Tasks whose executor exists on `backend`.
    pub fn running_tasks_of(&self, backend: BackendKind) -> Vec<TaskId> {
        self.lock()
            .running
            .iter()
            .filter(|(_, r)| r.backend == backend)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Executors on `backend`: its capacity in use.
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
        g.cards.clear();
    }

    /// Something changed that the scheduler or reconciler should look at now.
    pub fn notify(&self) {
        self.changed.notify_waiters();
    }

    /// Waits for the next change (a slot or class slot freed, [`Self::notify`]); only a change
    /// after the call wakes it.
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
        r.queued(TaskId::new(7), BackendKind::new("pod"));
        assert_eq!(r.queued_tasks(), [TaskId::new(7)]);
        assert!(r.running(TaskId::new(7), BackendKind::new("pod"), || None));
        assert!(
            !r.running(TaskId::new(7), BackendKind::new("pod"), || panic!(
                "no second slot"
            ))
        );
        assert_eq!(
            (
                r.queued_tasks().len(),
                r.running_count(BackendKind::new("pod"))
            ),
            (0, 1)
        );
        r.finished(TaskId::new(7));
        assert!(r.running_tasks().is_empty());
        assert!(r.cards().is_empty(), "the status API forgets it too");
    }

    #[test]
    fn a_card_follows_its_task_and_keeps_its_description() {
        let r = Registry::default();
        r.queued(TaskId::new(8), BackendKind::new("pod"));
        let job = Description {
            repository: "o/r".into(),
            job: "build".into(),
            ..Default::default()
        };
        r.describe(TaskId::new(8), job.clone());
        assert!(r.reserve_class(TaskId::new(8), "small", 1));
        let c = &r.cards()[0];
        assert_eq!((c.held, c.class.as_deref()), (Held::Queued, Some("small")));
        assert!(r.running(TaskId::new(8), BackendKind::new("pod"), || None));
        let c = &r.cards()[0];
        assert_eq!(
            (c.held, c.description.as_ref()),
            (Held::Running, Some(&job))
        );
        assert!(c.held_since >= c.since);
        r.queued(TaskId::new(9), BackendKind::new("pod"));
        assert!(r.withdraw(TaskId::new(9)));
        assert_eq!(r.cards()[1].held, Held::Withdrawn);
        assert!(r.take_withdrawn(TaskId::new(9)));
        assert_eq!(r.cards().len(), 1);
    }

    #[test]
    fn a_class_holds_at_most_its_capacity() {
        let r = Registry::default();
        assert!(r.reserve_class(TaskId::new(1), "large", 1));
        assert!(
            r.reserve_class(TaskId::new(1), "large", 1),
            "held already: kept"
        );
        assert!(!r.reserve_class(TaskId::new(2), "large", 1), "full");
        assert!(
            r.reserve_class(TaskId::new(3), "small", 2),
            "another class has its own"
        );
        r.finished(TaskId::new(1));
        assert!(
            r.reserve_class(TaskId::new(2), "large", 1),
            "freed when the task is gone"
        );
        r.release_class(TaskId::new(2));
        assert_eq!(r.class_count("large"), 0);
    }
}
