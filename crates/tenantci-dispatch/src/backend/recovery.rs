//! What a new leadership term does with each claim-ledger entry, given whether the task's
//! executor objects exist (pure; the reconciler carries it out).
//!
//! The ledger is read first because the apiserver may have lost what the dispatcher made (its
//! state restored from an old backup, Pods and Secrets deleted while no dispatcher was
//! leading): a task the ledger has as claimed and not final, without an executor, is started
//! again when its executor never had the task, and reported FAILURE with a line saying what
//! was lost when it had. A task the ledger has as final whose objects are still there is over:
//! its objects go.

use crate::queue::Backend;
use crate::queue::ledger::{Entry, Phase};

/// What recovery does for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: the reconciler looks after a live executor, the worker after a queued
    /// assignment, and a final entry without objects is done.
    Leave,
    /// Start the next attempt from the recorded sealed assignment (if Gitea still has the
    /// task open).
    Restart,
    /// Report FAILURE at Gitea with this line.
    Fail { reason: String },
    /// The task is over; delete its leftover executor objects.
    Delete,
}

/// The decision for `entry` when its executor objects exist (`objects`) or not.
pub fn decide(entry: &Entry, objects: bool) -> Recovery {
    match (entry.phase, objects) {
        (Phase::Final, true) => Recovery::Delete,
        (Phase::Final, false) | (_, true) | (Phase::Queued, false) => Recovery::Leave,
        (Phase::Claimed | Phase::Started, false) if entry.assignment.is_some() => Recovery::Restart,
        (Phase::Claimed | Phase::Started, false) => Recovery::Fail {
            reason: format!(
                "the executor of attempt {} was lost before it fetched the task, and the claim ledger holds no assignment to start it again; re-run the job",
                entry.attempt
            ),
        },
        (Phase::Fetched | Phase::Reported, false) => Recovery::Fail {
            reason: format!(
                "the executor of attempt {} had fetched the task when {}; what it ran and logged after its last report is lost; re-run the job",
                entry.attempt,
                match entry.backend {
                    Backend::Pod =>
                        "its Pod and Secret were lost (deleted while no dispatcher was leading, or the tenant apiserver lost them)",
                    Backend::Vm =>
                        "its sandbox was lost (deleted, expired, or OpenSandbox lost it)",
                }
            ),
        },
    }
}

/// Whether `entry` is an assignment an earlier term queued that no executor took yet: the
/// new term keeps it alive at Gitea (which fails a task not updated for 10 minutes).
pub fn waits_in_the_queue(entry: &Entry, objects: bool) -> bool {
    entry.phase == Phase::Queued && !objects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::assignment::{Assignment, SealingKey};

    fn entry(phase: Phase, with_assignment: bool) -> Entry {
        let e = Entry::step(7, 1, Backend::Pod, phase);
        if with_assignment {
            let a = Assignment::seal(&SealingKey::generate(), "7", 1, Backend::Pod, vec![], b"t");
            e.with_assignment(&a.unwrap())
        } else {
            e
        }
    }

    #[test]
    fn a_live_executor_or_a_queued_assignment_is_left_alone() {
        for phase in [
            Phase::Claimed,
            Phase::Queued,
            Phase::Started,
            Phase::Fetched,
        ] {
            assert_eq!(decide(&entry(phase, true), true), Recovery::Leave);
        }
        assert_eq!(decide(&entry(Phase::Queued, true), false), Recovery::Leave);
    }

    #[test]
    fn a_lost_executor_is_restarted_before_it_fetched_and_failed_after() {
        assert_eq!(
            decide(&entry(Phase::Started, true), false),
            Recovery::Restart
        );
        assert_eq!(
            decide(&entry(Phase::Claimed, true), false),
            Recovery::Restart
        );
        let Recovery::Fail { reason } = decide(&entry(Phase::Fetched, false), false) else {
            panic!("a fetched task without executor is failed");
        };
        assert!(reason.contains("lost"), "{reason}");
        assert!(matches!(
            decide(&entry(Phase::Started, false), false),
            Recovery::Fail { .. }
        ));
    }

    #[test]
    fn a_final_task_keeps_no_objects() {
        assert_eq!(decide(&entry(Phase::Final, false), true), Recovery::Delete);
        assert_eq!(decide(&entry(Phase::Final, false), false), Recovery::Leave);
    }
}
