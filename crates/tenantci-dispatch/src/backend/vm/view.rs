//! The VM backend's view of its sandboxes, kept between reconciler passes so that a pass pays
//! for what changes, not for every sandbox: the OpenSandbox Lifecycle API has no change feed
//! (no watch, no events, no `since` on its list; only list, get and the per-sandbox calls), so
//! the view is kept from what the dispatcher itself did (creates, terminal markers, deletes)
//! and from a few looks of its own:
//!
//! - a full listing at the first pass and then every resync (`[cluster] resync`, as the pod
//!   backend's watches are backed up);
//! - between them, a GET of each sandbox in a transition (not Running: starting, stopping,
//!   pausing; or carrying the terminal marker; or expiring within two passes), and of one
//!   Running sandbox a pass in turn, so a sandbox the platform fails or loses while it runs is
//!   seen within a pass at small scale and within `N` passes at `N` sandboxes, at one call a
//!   pass;
//! - a full listing instead of the GETs when it is cheaper (more sandboxes in a transition
//!   than the listing has pages: a burst).
//!
//! A view may lag: an executor missing from it is confirmed gone with a GET of the sandbox it
//! knew (`VmExecutors::exists`) before its task fails, as every backend's observation is.
//! [`plan`] is pure; the calls are `VmExecutors::observe`'s.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backend::reconciler::RESYNC;
use crate::backend::vm::desired;
use crate::task_id::TaskId;
use tenantci_core::opensandbox::{PAGE_SIZE, Sandbox, SandboxState};

/// A sandbox expiring this soon (seconds: two passes) is looked at every pass, so its end is
/// seen when it comes.
const EXPIRING_SECS: i64 = 2 * RESYNC.as_secs() as i64;

/// What a pass asks of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Every sandbox the dispatcher owns (the resync, or cheaper than the GETs).
    List,
    /// These sandboxes (task, sandbox id), one GET each; none: no call at all.
    Get(Vec<(TaskId, String)>),
}

/// One sandbox as the view holds it.
#[derive(Debug, Clone)]
struct Held {
    sandbox: Sandbox,
    /// The view's write counter when the dispatcher itself wrote it: a listing that began
    /// before does not drop it.
    written: u64,
}

#[derive(Debug, Default)]
struct State {
    by_task: BTreeMap<TaskId, Held>,
    /// When the last full listing began; None: never (the first pass lists).
    listed_at: Option<Instant>,
    /// The last Running sandbox's task looked at in turn.
    cursor: Option<TaskId>,
    /// Counts the dispatcher's own writes.
    writes: u64,
    /// Sandboxes the last listing left out though the view held them: `exists` GETs them,
    /// so a lagging list costs no task.
    vanished: BTreeMap<TaskId, String>,
}

/// The view, shared by the reconciler, keep-alive, the status page and the facade.
#[derive(Debug)]
pub struct View {
    state: Mutex<State>,
    /// How often the whole list is read again.
    resync: Duration,
}

/// Whether the sandbox may change without the dispatcher doing anything soon: not Running, the
/// terminal marker on it (the reconciler deletes it), or expiring within two passes.
pub fn in_transition(s: &Sandbox, now: chrono::DateTime<chrono::Utc>) -> bool {
    if s.status.state != SandboxState::Running || desired::is_terminal(s) {
        return true;
    }
    let soon = chrono::TimeDelta::seconds(EXPIRING_SECS);
    s.expires_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t.with_timezone(&chrono::Utc) - now <= soon)
}

/// What one pass asks of the API (pure): a listing when none was made, the last one is older
/// than `resync`, or more sandboxes are in a transition than it has pages; else a GET of each
/// sandbox in a transition and of the next Running one after `cursor`.
pub fn plan<'a>(
    sandboxes: impl Iterator<Item = (TaskId, &'a Sandbox)> + Clone,
    listed_for: Option<Duration>,
    resync: Duration,
    cursor: Option<TaskId>,
    now: chrono::DateTime<chrono::Utc>,
) -> Plan {
    if listed_for.is_none_or(|d| d >= resync) {
        return Plan::List;
    }
    let mut gets: Vec<(TaskId, String)> = sandboxes
        .clone()
        .filter(|(_, s)| in_transition(s, now))
        .map(|(t, s)| (t, s.id.clone()))
        .collect();
    let count = sandboxes.clone().count();
    let pages = count.div_ceil(PAGE_SIZE as usize).max(1);
    if gets.len() > pages {
        return Plan::List;
    }
    let running = || sandboxes.clone().filter(|(_, s)| !in_transition(s, now));
    let next = running()
        .find(|(t, _)| cursor.is_none_or(|c| *t > c))
        .or_else(|| running().next());
    if let Some((t, s)) = next {
        gets.push((t, s.id.clone()));
    }
    Plan::Get(gets)
}

impl View {
    /// An empty view, listed whole every `resync`.
    pub fn new(resync: Duration) -> Self {
        View {
            state: Mutex::new(State::default()),
            resync,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This pass's plan, and the write counter a listing's answer is applied against.
    pub fn plan(&self) -> (Plan, u64) {
        let s = self.lock();
        let listed_for = s.listed_at.map(|t| t.elapsed());
        let all = s.by_task.iter().map(|(t, h)| (*t, &h.sandbox));
        let p = plan(all, listed_for, self.resync, s.cursor, chrono::Utc::now());
        (p, s.writes)
    }

    /// A full listing that began at write counter `began` (and `at`): it replaces the view,
    /// but a sandbox the dispatcher wrote since it began and the listing does not hold yet is
    /// kept (the list may lag a create).
    pub fn listed(&self, found: BTreeMap<TaskId, Sandbox>, began: u64, at: Instant) {
        let mut s = self.lock();
        let mut next: BTreeMap<TaskId, Held> = found
            .into_iter()
            .map(|(t, sandbox)| {
                let written = s.by_task.get(&t).map_or(0, |h| h.written);
                (t, Held { sandbox, written })
            })
            .collect();
        let mut vanished = BTreeMap::new();
        for (t, h) in &s.by_task {
            if next.contains_key(t) {
                continue;
            }
            if h.written > began {
                next.insert(*t, h.clone());
            } else {
                vanished.insert(*t, h.sandbox.id.clone());
            }
        }
        s.by_task = next;
        s.vanished = vanished;
        s.listed_at = Some(at);
    }

    /// What a GET of `id` (`task`'s sandbox in the view) answered: the sandbox, or None (gone).
    /// A view that holds another sandbox for the task by now (a replacement) is left alone.
    pub fn looked(&self, task: TaskId, id: &str, found: Option<Sandbox>) {
        let mut s = self.lock();
        if s.vanished.get(&task).is_some_and(|v| v == id) {
            s.vanished.remove(&task);
        }
        if s.by_task.get(&task).is_none_or(|h| h.sandbox.id == id) {
            match found {
                Some(sandbox) => {
                    let written = s.by_task.get(&task).map_or(0, |h| h.written);
                    s.by_task.insert(task, Held { sandbox, written });
                }
                None => {
                    s.by_task.remove(&task);
                }
            }
        }
        let running = s
            .by_task
            .get(&task)
            .is_some_and(|h| h.sandbox.status.state == SandboxState::Running);
        if running || !s.by_task.contains_key(&task) {
            s.cursor = Some(task);
        }
    }

    /// The dispatcher created, found or changed `sandbox` (`task`'s latest attempt).
    pub fn wrote(&self, task: TaskId, sandbox: Sandbox) {
        let mut s = self.lock();
        s.writes += 1;
        let written = s.writes;
        let newer = s.by_task.get(&task).is_none_or(|h| {
            h.sandbox.id == sandbox.id
                || desired::task_of(&h.sandbox).map(|(_, a)| a)
                    <= desired::task_of(&sandbox).map(|(_, a)| a)
        });
        if newer {
            s.by_task.insert(task, Held { sandbox, written });
        }
    }

    /// The dispatcher deleted `task`'s sandboxes.
    pub fn deleted(&self, task: TaskId) {
        let mut s = self.lock();
        s.by_task.remove(&task);
        s.vanished.remove(&task);
    }

    /// The sandbox id the view holds for `task`, or the one the last listing left out.
    pub fn id_of(&self, task: TaskId) -> Option<String> {
        let s = self.lock();
        s.by_task
            .get(&task)
            .map(|h| h.sandbox.id.clone())
            .or_else(|| s.vanished.get(&task).cloned())
    }

    /// Every sandbox in the view, by task.
    pub fn snapshot(&self) -> BTreeMap<TaskId, Sandbox> {
        self.lock()
            .by_task
            .iter()
            .map(|(t, h)| (*t, h.sandbox.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantci_core::opensandbox::SandboxStatus;

    fn sandbox(id: &str, state: SandboxState) -> Sandbox {
        Sandbox {
            id: id.into(),
            status: SandboxStatus {
                state,
                reason: None,
                message: None,
            },
            metadata: BTreeMap::new(),
            created_at: None,
            expires_at: None,
        }
    }

    fn t(n: i64) -> TaskId {
        TaskId::new(n)
    }

    #[test]
    fn steady_state_gets_one_running_sandbox_a_pass_in_turn_and_lists_only_at_the_resync() {
        let now = chrono::Utc::now();
        let view: Vec<(TaskId, Sandbox)> = (1..=3)
            .map(|n| (t(n), sandbox(&format!("s{n}"), SandboxState::Running)))
            .collect();
        let all = || view.iter().map(|(t, s)| (*t, s));
        let (resync, young) = (Duration::from_secs(300), Some(Duration::from_secs(10)));
        assert_eq!(plan(all(), None, resync, None, now), Plan::List, "first");
        assert_eq!(
            plan(all(), Some(resync), resync, None, now),
            Plan::List,
            "resync"
        );
        let get = |c| plan(all(), young, resync, c, now);
        assert_eq!(get(None), Plan::Get(vec![(t(1), "s1".into())]));
        assert_eq!(get(Some(t(1))), Plan::Get(vec![(t(2), "s2".into())]));
        assert_eq!(
            get(Some(t(3))),
            Plan::Get(vec![(t(1), "s1".into())]),
            "wraps"
        );
        let none = std::iter::empty();
        assert_eq!(plan(none, young, resync, None, now), Plan::Get(vec![]));
    }

    #[test]
    fn sandboxes_in_a_transition_are_got_each_pass_or_listed_when_cheaper() {
        let now = chrono::Utc::now();
        let mut expiring = sandbox("s3", SandboxState::Running);
        expiring.expires_at = Some((now + chrono::TimeDelta::seconds(1)).to_rfc3339());
        let mut marked = sandbox("s4", SandboxState::Running);
        marked
            .metadata
            .insert(desired::TERMINAL_KEY.into(), "true".into());
        let view = [
            (t(1), sandbox("s1", SandboxState::Pending)),
            (t(2), sandbox("s2", SandboxState::Running)),
            (t(3), expiring),
            (t(4), marked),
        ];
        let all = || view.iter().map(|(t, s)| (*t, s));
        let young = Some(Duration::from_secs(1));
        // 3 in a transition against one page: a listing is cheaper.
        assert_eq!(
            plan(all(), young, Duration::from_secs(300), None, now),
            Plan::List
        );
        let two = || view[..2].iter().map(|(t, s)| (*t, s));
        assert_eq!(
            plan(two(), young, Duration::from_secs(300), None, now),
            Plan::Get(vec![(t(1), "s1".into()), (t(2), "s2".into())])
        );
    }

    #[test]
    fn a_listing_keeps_what_the_dispatcher_wrote_after_it_began_and_a_get_of_gone_drops() {
        let v = View::new(Duration::from_secs(300));
        let (_, began) = v.plan();
        v.wrote(t(1), sandbox("s1", SandboxState::Pending));
        v.listed(BTreeMap::new(), began, Instant::now());
        assert_eq!(
            v.id_of(t(1)).as_deref(),
            Some("s1"),
            "the list lagged a create"
        );
        let (_, began) = v.plan();
        v.listed(BTreeMap::new(), began, Instant::now());
        assert!(
            v.snapshot().is_empty(),
            "a later listing without it drops it"
        );
        assert_eq!(
            v.id_of(t(1)).as_deref(),
            Some("s1"),
            "to be confirmed by a GET"
        );
        v.looked(t(1), "s1", None);
        assert_eq!(v.id_of(t(1)), None, "confirmed gone");
        v.wrote(t(2), sandbox("s2", SandboxState::Running));
        v.looked(t(2), "old", None);
        assert!(v.id_of(t(2)).is_some(), "a GET of another sandbox");
        v.looked(t(2), "s2", None);
        assert_eq!(v.id_of(t(2)), None);
    }
}
