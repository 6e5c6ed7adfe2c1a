//! What a new leadership term does with each claim-ledger entry, given which of the task's
//! executor objects exist (pure; the reconciler carries it out).
//!
//! The ledger is read first because a backend may have lost what the dispatcher made (an
//! apiserver restored from an old backup, Pods and Secrets deleted while no dispatcher was
//! leading, a VM sandbox simply gone): a task the ledger has as claimed and not final, without
//! an executor, is started again when its executor never had the task, and reported FAILURE
//! with a line saying what was lost when it had. The same for an executor only partly there
//! ([`Objects::Partial`], e.g. the pod backend's Secret without its Pod) once the ledger has
//! its start as done: no redelivery will finish it. A task the ledger has
//! as final whose objects are still there is over: its objects go.

use crate::backend_kind::Nouns;
use crate::task::ledger::{Entry, Phase};

/// What the backend lists of an entry's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objects {
    /// Nothing.
    None,
    /// What a start left without a runnable executor (the pod backend's Secret without its
    /// Pod).
    Partial {
        /// The attempt whose start left it.
        attempt: u32,
        /// Its runner had fetched the task.
        fetched: bool,
    },
    /// An executor.
    Complete,
}

/// What recovery does for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: the reconciler looks after a live executor, the worker after a queued
    /// assignment (or a start cut short before the ledger heard of it: its assignment was not
    /// acked, so it comes back), and a final entry without objects is done.
    Leave,
    /// Start the next attempt from the recorded sealed assignment (if Gitea still has the
    /// task open).
    Restart {
        /// The attempt whose partial objects are deleted first (the next attempt follows the
        /// later of it and the ledger's); None: nothing is left.
        leftover: Option<u32>,
    },
    /// Report FAILURE at Gitea with a line saying why.
    Fail {
        /// The line, appended to the task's log.
        reason: String,
    },
    /// The task is over; delete its leftover executor objects.
    Delete,
}

impl Recovery {
    /// Whether this starts a new attempt.
    pub fn is_restart(&self) -> bool {
        matches!(self, Recovery::Restart { .. })
    }
}

/// The decision for `entry` given what the backend lists of its task; `nouns`: the backend's
/// words, for the FAILURE line.
///
/// A ledger at `started` means the start finished (the worker notes it after the create, a
/// replacement too), so its assignment may have been acked: partial objects then are an
/// executor lost after its start, not a start the queue redelivers, and nothing else would
/// ever end the task.
pub fn decide(entry: &Entry, objects: Objects, nouns: &Nouns) -> Recovery {
    use Objects::{Complete, None as Nothing, Partial};
    match (entry.phase, objects) {
        (Phase::Final, Complete | Partial { .. }) => Recovery::Delete,
        (Phase::Final, Nothing) | (_, Complete) | (Phase::Queued, Nothing) => Recovery::Leave,
        (Phase::Claimed | Phase::Queued, Partial { .. }) => Recovery::Leave,
        (Phase::Started, Partial { fetched: true, .. }) => fetched_and_lost(entry, objects, nouns),
        (Phase::Started, Partial { attempt, .. }) if entry.assignment.is_some() => {
            Recovery::Restart {
                leftover: Some(attempt),
            }
        }
        (Phase::Claimed | Phase::Started, Nothing) if entry.assignment.is_some() => {
            Recovery::Restart { leftover: None }
        }
        (Phase::Claimed | Phase::Started, _) => Recovery::Fail {
            reason: format!(
                "the executor of attempt {} was lost before it fetched the task, and the claim ledger holds no assignment to start it again; re-run the job",
                entry.attempt
            ),
        },
        (Phase::Fetched | Phase::Reported, _) => fetched_and_lost(entry, objects, nouns),
    }
}

/// FAILURE for an executor lost after it fetched: what it ran is unknown.
fn fetched_and_lost(entry: &Entry, objects: Objects, nouns: &Nouns) -> Recovery {
    // In the words of the entry's backend (its `Nouns`), which the reconciler passes.
    let what = match objects {
        Objects::Partial { .. } => nouns.lost_partly,
        _ => nouns.lost_whole,
    };
    Recovery::Fail {
        reason: format!(
            "the executor of attempt {} had fetched the task when {what}; what it ran and logged after its last report is lost; re-run the job",
            entry.attempt
        ),
    }
}

/// Whether `entry` is an assignment an earlier term queued that no executor took yet: the
/// new term keeps it alive at Gitea (which fails a task not updated for 10 minutes).
pub fn waits_in_the_queue(entry: &Entry, objects: Objects) -> bool {
    entry.phase == Phase::Queued && objects == Objects::None
}

#[cfg(test)]
mod tests {
    use super::{Objects, Phase, Recovery, waits_in_the_queue};
    use crate::backend_kind::{BackendKind, Nouns};
    use crate::queue::assignment::{Assignment, SealingKey};
    use crate::task::ledger::Entry;
    use crate::task_id::TaskId;

    const POD: BackendKind = BackendKind::new("pod");

    /// The words recovery gets from the entry's backend: a pod-like one's.
    const NOUNS: Nouns = Nouns {
        executor: "executor Pod",
        executors: "executors",
        source: "the apiserver",
        gone: "the executor's Pod and Secret were deleted",
        lost_partly: "its Pod was lost (its Secret was left)",
        lost_whole: "its Pod and Secret were lost",
    };

    fn decide(entry: &Entry, objects: Objects) -> Recovery {
        super::decide(entry, objects, &NOUNS)
    }

    fn entry(phase: Phase, with_assignment: bool) -> Entry {
        let e = Entry::step(TaskId::new(7), 1, POD, phase);
        if with_assignment {
            let a = Assignment::seal(&SealingKey::generate(), "7", 1, POD, vec![], b"t");
            e.with_assignment(&a.unwrap())
        } else {
            e
        }
    }

    const NONE: Objects = Objects::None;
    const COMPLETE: Objects = Objects::Complete;

    fn partial(attempt: u32, fetched: bool) -> Objects {
        Objects::Partial { attempt, fetched }
    }

    #[test]
    fn a_live_executor_or_a_queued_assignment_is_left_alone() {
        for phase in [
            Phase::Claimed,
            Phase::Queued,
            Phase::Started,
            Phase::Fetched,
        ] {
            assert_eq!(decide(&entry(phase, true), COMPLETE), Recovery::Leave);
        }
        assert_eq!(decide(&entry(Phase::Queued, true), NONE), Recovery::Leave);
    }

    #[test]
    fn a_lost_executor_is_restarted_before_it_fetched_and_failed_after() {
        let restart = Recovery::Restart { leftover: None };
        assert_eq!(decide(&entry(Phase::Started, true), NONE), restart);
        assert_eq!(decide(&entry(Phase::Claimed, true), NONE), restart);
        let Recovery::Fail { reason } = decide(&entry(Phase::Fetched, false), NONE) else {
            panic!("a fetched task without executor is failed");
        };
        assert!(reason.contains("lost"), "{reason}");
        assert!(matches!(
            decide(&entry(Phase::Started, false), NONE),
            Recovery::Fail { .. }
        ));
    }

    /// Issue 35: a Secret without its Pod after the start finished (the ledger at `started`,
    /// the assignment acked) is not redelivered by anyone: it is restarted past its attempt
    /// (a replacement's Secret may be ahead of the ledger), or failed once it had fetched.
    #[test]
    fn a_partial_executor_after_its_start_is_restarted_or_failed_never_left() {
        assert_eq!(
            decide(&entry(Phase::Started, true), partial(1, false)),
            Recovery::Restart { leftover: Some(1) }
        );
        assert_eq!(
            decide(&entry(Phase::Started, true), partial(2, false)),
            Recovery::Restart { leftover: Some(2) }
        );
        for (phase, fetched) in [
            (Phase::Started, true),
            (Phase::Fetched, false),
            (Phase::Fetched, true),
        ] {
            let Recovery::Fail { reason } = decide(&entry(phase, true), partial(1, fetched)) else {
                panic!("{phase:?}: fetched and lost is failed");
            };
            assert!(reason.contains("its Pod was lost"), "{reason}");
        }
        assert!(matches!(
            decide(&entry(Phase::Started, false), partial(1, false)),
            Recovery::Fail { .. }
        ));
    }

    #[test]
    fn a_start_cut_short_before_the_ledger_heard_of_it_waits_for_its_redelivery() {
        for phase in [Phase::Claimed, Phase::Queued] {
            assert_eq!(
                decide(&entry(phase, true), partial(1, false)),
                Recovery::Leave
            );
        }
        assert!(!waits_in_the_queue(
            &entry(Phase::Queued, true),
            partial(1, false)
        ));
        assert!(waits_in_the_queue(&entry(Phase::Queued, true), NONE));
    }

    #[test]
    fn a_final_task_keeps_no_objects() {
        for objects in [COMPLETE, partial(1, false)] {
            assert_eq!(
                decide(&entry(Phase::Final, false), objects),
                Recovery::Delete
            );
        }
        assert_eq!(decide(&entry(Phase::Final, false), NONE), Recovery::Leave);
    }
}
