//! `dispatch explain`'s answer (pure): why a job waits, from a [`Status`] and the job's
//! `runs-on` labels (and the task the dispatcher holds for it, when it claimed one). The
//! reasons come in the order an operator fixes them: labels, class, the backend, capacity,
//! the backend's API, the executor, the forge's view of this runner. Each is one sentence
//! and its fix; none means it runs or will.
//!
//! Boundary: reads only the status document, so it explains what the dispatcher knew when
//! it answered; an executor Pod's events are the CLI's to add (it reads them at the
//! apiserver, `backend::pod::events`).

use serde::Serialize;

use super::{FORGE_OFFLINE_AFTER_SECS, State, Status, TaskStatus};
use crate::backend::catalog;
use crate::backend_kind::BackendKind;
use crate::claim::routing;
use crate::sizing::class;

/// Why a job waits, and what makes it run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// A stable name: `labels`, `class`, `backend`, `capacity`, `backend-api`, `executor`,
    /// `forge`.
    pub kind: &'static str,
    /// What stops it, in one sentence.
    pub what: String,
    /// What the operator does about it.
    pub fix: String,
}

fn reason(kind: &'static str, what: String, fix: String) -> Reason {
    Reason { kind, what, fix }
}

/// Every reason, in order (pure). Empty: it runs, or will as soon as the scheduler asks.
pub fn reasons(s: &Status, runs_on: &[String], task: Option<&TaskStatus>) -> Vec<Reason> {
    let mut out = Vec::new();
    if let Some(r) = labels(s, runs_on) {
        // Gitea never hands this job to this runner: nothing below matters.
        return vec![r];
    }
    let classes = &s.summary.classes;
    let picked = match class::pick_by(classes, |c| (&c.name, &c.label), runs_on) {
        Ok(c) => c,
        Err(why) => {
            let what = "its labels match this dispatcher, but no executor class fits".into();
            return vec![reason("class", what, why)];
        }
    };
    let backend = picked.map_or_else(|| routing::route(runs_on), |c| c.backend);
    let Some(b) = s.summary.backends.iter().find(|b| b.backend == backend) else {
        let what = format!("it asks for the {backend} backend, which this dispatcher does not run");
        let fix = format!(
            "use `runs-on: pod`, or turn the {backend} backend on ({})",
            catalog::turned_on_by(backend)
        );
        return vec![reason("backend", what, fix)];
    };
    let runs = task.is_some_and(|t| t.state.has_executor());
    if !runs {
        out.extend(capacity(s, backend, picked.map(|c| c.name.as_str()), task));
    }
    if let Some(e) = b.error.as_ref().filter(|_| !b.reachable) {
        out.push(reason(
            "backend-api",
            format!("the {backend} backend's API does not answer: {e}"),
            "the dispatcher waits it out and starts the job when it is back (nothing is lost); check that API's service".into(),
        ));
    }
    out.extend(task.and_then(executor));
    out.extend(forge(s));
    out
}

/// The labels Gitea compares: every one of the job's must be among the runner's.
fn labels(s: &Status, runs_on: &[String]) -> Option<Reason> {
    let has = |l: &String| s.summary.labels.iter().any(|m| m.eq_ignore_ascii_case(l));
    let missing: Vec<&String> = runs_on.iter().filter(|l| !has(l)).collect();
    let first = missing.first()?;
    let closest = s
        .summary
        .labels
        .iter()
        .map(|l| {
            (
                strsim::levenshtein(&l.to_lowercase(), &first.to_lowercase()),
                l,
            )
        })
        .min()
        .map(|(_, l)| l.as_str());
    let what = format!(
        "no label of this dispatcher matches `{first}` (it registered {:?}), so the forge never hands the job to it",
        s.summary.labels
    );
    let fix = match closest {
        Some(c) => format!(
            "the closest is `{c}`: use it in runs-on, or add `{first}` to the dispatcher's labels (gitea.labels; `tenantci dispatch init --labels`)"
        ),
        None => format!("add `{first}` to the dispatcher's labels (gitea.labels)"),
    };
    Some(reason("labels", what, fix))
}

/// Full when its backend or its class has no free slot: its place in the queue and what runs.
fn capacity(
    s: &Status,
    backend: BackendKind,
    class: Option<&str>,
    task: Option<&TaskStatus>,
) -> Option<Reason> {
    let b = s.summary.backends.iter().find(|b| b.backend == backend)?;
    let c = class.and_then(|n| s.summary.classes.iter().find(|c| c.name == n));
    let (free, capacity, of) = match c {
        Some(c) if c.free == 0 => (0, c.capacity, format!("class {}", c.name)),
        _ => (b.free, b.capacity, format!("{backend} backend")),
    };
    if free > 0 {
        return None;
    }
    let same =
        |t: &&TaskStatus| t.backend == backend && (class.is_none() || t.class.as_deref() == class);
    let running: Vec<String> = s
        .tasks
        .iter()
        .filter(same)
        .filter(|t| t.state.has_executor())
        .map(|t| format!("{} ({})", t.task, describe(t)))
        .collect();
    let waiting = |t: &&TaskStatus| matches!(t.state, State::Claimed | State::Queued);
    let ahead = s
        .tasks
        .iter()
        .filter(same)
        .filter(waiting)
        .filter(|t| task.is_none_or(|me| t.task < me.task))
        .count();
    let what = format!(
        "capacity full: {capacity} of {capacity} executors of the {of} run (tasks {}); this job is number {} in its queue",
        running.join(", "),
        ahead + 1
    );
    let fix = format!(
        "it starts when one of them ends; for more at once raise the {of}'s capacity (capacity.{backend} or the class's capacity) and the cluster's room"
    );
    Some(reason("capacity", what, fix))
}

/// An executor that exists but has not fetched its task: a Pod not on a node yet (on a
/// backend whose executors run on the rented nodes).
fn executor(t: &TaskStatus) -> Option<Reason> {
    let on_nodes = catalog::facts(t.backend).is_some_and(|f| f.rented_nodes);
    if !on_nodes || !matches!(t.state, State::Starting | State::Running) {
        return None;
    }
    if t.node.is_some() {
        return None;
    }
    let what = format!(
        "its executor Pod has no node yet (Pending for {}s): the cluster has no room for it now",
        t.in_state_seconds
    );
    let fix = "a rented node may be booting, an image pulling, or a quota full: the Pod's events (below) say which; the start deadline (claim.start_deadline) replaces a stuck one".into();
    Some(reason("executor", what, fix))
}

/// The forge shows a runner offline a minute after its last call.
fn forge(s: &Status) -> Option<Reason> {
    let f = &s.summary.forge;
    if f.reachable != Some(false) {
        return None;
    }
    let what = match (&f.error, f.seconds_since_answer) {
        (Some(e), _) => format!("the forge does not see this runner online: FetchTask fails ({e})"),
        (None, Some(secs)) => format!(
            "the forge does not see this runner online: its last FetchTask answer was {secs}s ago (offline after {FORGE_OFFLINE_AFTER_SECS}s)"
        ),
        (None, None) => "the forge does not see this runner online".into(),
    };
    let fix = format!(
        "check that {} answers from this host, and that the registration is still known there (`tenantci dispatch init` re-registers)",
        f.url
    );
    Some(reason("forge", what, fix))
}

/// `owner/repo job` for a line, or `-` for a task whose names are sealed.
pub fn describe(t: &TaskStatus) -> String {
    if t.repository.is_empty() {
        return "-".into();
    }
    format!("{} {}", t.repository, t.job)
}

#[cfg(test)]
mod tests {
    use super::super::tests::full;
    use super::*;
    use crate::task_id::TaskId;

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_label_it_does_not_have_names_the_closest_and_nothing_else() {
        let r = reasons(&full(), &labels(&["self-hosted", "podd"]), None);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, "labels");
        assert!(
            r[0].what.contains("`podd`") && r[0].fix.contains("closest is `pod`"),
            "{r:?}"
        );
    }

    #[test]
    fn a_full_backend_gives_the_queue_position_and_what_runs() {
        let s = full();
        let queued = s.tasks.iter().find(|t| t.task == TaskId::new(3)).unwrap();
        let r = reasons(&s, &labels(&["self-hosted", "pod"]), Some(queued));
        assert_eq!(r[0].kind, "capacity", "{r:?}");
        assert!(r[0].what.contains("number 1 in its queue"), "{}", r[0].what);
        assert!(
            r[0].what.contains("tasks 1 (acme/app job-1), 2"),
            "{}",
            r[0].what
        );
        let new = reasons(&s, &labels(&["pod"]), None);
        assert!(
            new[0].what.contains("number 2"),
            "one queued ahead: {}",
            new[0].what
        );
    }

    #[test]
    fn a_running_task_waits_only_for_its_pod_to_get_a_node() {
        let s = full();
        let unscheduled = s.tasks.iter().find(|t| t.task == TaskId::new(2)).unwrap();
        let r = reasons(&s, &unscheduled.runs_on, Some(unscheduled));
        assert_eq!(r.iter().map(|r| r.kind).collect::<Vec<_>>(), ["executor"]);
        let placed = s.tasks.iter().find(|t| t.task == TaskId::new(1)).unwrap();
        assert!(reasons(&s, &placed.runs_on, Some(placed)).is_empty());
    }

    #[test]
    fn the_vm_api_away_and_the_forge_offline_are_named() {
        let mut s = full();
        s.summary.backends[1].used = 0;
        s.summary.backends[1].free = 1;
        s.summary.forge.reachable = Some(false);
        s.summary.forge.seconds_since_answer = Some(120);
        let r = reasons(&s, &labels(&["vm"]), None);
        let kinds: Vec<_> = r.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, ["labels"], "vm is not among its labels: {r:?}");
        s.summary.labels.push("vm".into());
        let r = reasons(&s, &labels(&["vm"]), None);
        let kinds: Vec<_> = r.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, ["backend-api", "forge"], "{r:?}");
        assert!(r[1].what.contains("120s ago"));
    }
}
