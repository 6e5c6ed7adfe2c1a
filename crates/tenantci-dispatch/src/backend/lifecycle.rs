//! What the lifecycle reconciler does with one task's executor objects. Pure: the reconciler
//! observes the Pod and Secret, asks `decide`, and carries the decision out.
//!
//! Rules: delete only after the terminal marker (Gitea accepted the final state); a Pod that
//! ended or vanished without one gets FAILURE reported to Gitea first, with the reason in the
//! task log; anything whose state we cannot tell is kept and logged, never deleted blindly.

/// The Pod as observed (None: no Pod with that name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub pod_phase: Option<String>,
    pub terminal_marker: bool,
    pub secret_exists: bool,
    /// Since the Secret was created (None: unknown, taken as old).
    pub secret_age: Option<std::time::Duration>,
}

/// The worker creates the Secret, then the Pod; a reconciler pass that lists between the two
/// (or lists Pods before a pair created meanwhile) sees a Secret without its Pod. That is a
/// vanished Pod only once the Secret is older than this (the two creates are milliseconds
/// apart, seconds on a loaded host): without it, a loaded host failed a healthy task. A Pod
/// that never comes is the start deadline's business (minutes), not this.
pub const POD_CREATE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Still working (or not started): nothing to do.
    Keep,
    /// Gitea has the final state: delete the Pod and the Secret.
    Delete,
    /// Report FAILURE with this log line, then delete.
    FailAndDelete { reason: String },
    /// We cannot tell: keep it and log why.
    KeepUnknown { reason: String },
}

pub fn decide(o: &Observed) -> Decision {
    if o.terminal_marker {
        return Decision::Delete;
    }
    match o.pod_phase.as_deref() {
        None if o.secret_exists && o.secret_age.is_some_and(|a| a < POD_CREATE_GRACE) => {
            Decision::Keep
        }
        None if o.secret_exists => Decision::FailAndDelete {
            reason: "the executor Pod vanished before the task reported a final state".into(),
        },
        None => Decision::Keep,
        Some("Pending") | Some("Running") => Decision::Keep,
        Some(phase @ ("Succeeded" | "Failed")) => Decision::FailAndDelete {
            reason: format!(
                "the executor Pod ended (phase {phase}) without reporting a final state"
            ),
        },
        Some(other) => Decision::KeepUnknown {
            reason: format!(
                "the executor Pod is in phase `{other}`; its task state is unknown, so it is kept"
            ),
        },
    }
}

/// What to do with an executor that has not fetched its task (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Fetched, or still within the start deadline.
    Wait,
    /// Past the deadline: replace it by this attempt.
    Replace { attempt: u32 },
    /// Past the deadline on the last attempt: report FAILURE.
    GiveUp,
}

/// `age`: since the executor's objects were created; `fetched`: it called FetchTask once.
pub fn start(
    fetched: bool,
    age: std::time::Duration,
    attempt: u32,
    deadline: std::time::Duration,
    max_attempts: u32,
) -> Start {
    if fetched || age < deadline {
        Start::Wait
    } else if attempt < max_attempts {
        Start::Replace {
            attempt: attempt + 1,
        }
    } else {
        Start::GiveUp
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_slow_start_is_replaced_until_the_last_attempt() {
        use super::{Start, start};
        use std::time::Duration;
        let (s, d) = (Duration::from_secs, Duration::from_secs(180));
        assert_eq!(start(false, s(179), 1, d, 3), Start::Wait);
        assert_eq!(start(true, s(999), 1, d, 3), Start::Wait, "fetched");
        assert_eq!(start(false, s(180), 1, d, 3), Start::Replace { attempt: 2 });
        assert_eq!(start(false, s(180), 2, d, 3), Start::Replace { attempt: 3 });
        assert_eq!(start(false, s(180), 3, d, 3), Start::GiveUp);
        assert_eq!(start(false, s(180), 1, d, 1), Start::GiveUp, "no retry");
    }

    use super::*;

    fn obs(phase: Option<&str>, marker: bool, secret: bool) -> Observed {
        Observed {
            pod_phase: phase.map(str::to_string),
            terminal_marker: marker,
            secret_exists: secret,
            secret_age: None,
        }
    }

    #[test]
    fn a_secret_whose_pod_is_being_created_is_not_a_vanished_pod() {
        let young = Observed {
            secret_age: Some(std::time::Duration::from_millis(5)),
            ..obs(None, false, true)
        };
        assert_eq!(decide(&young), Decision::Keep);
        let old = Observed {
            secret_age: Some(POD_CREATE_GRACE),
            ..young
        };
        assert!(matches!(decide(&old), Decision::FailAndDelete { .. }));
    }

    #[test]
    fn decisions_follow_the_rules() {
        assert_eq!(
            decide(&obs(Some("Succeeded"), true, true)),
            Decision::Delete
        );
        assert_eq!(decide(&obs(None, true, true)), Decision::Delete);
        assert_eq!(decide(&obs(Some("Running"), false, true)), Decision::Keep);
        assert_eq!(decide(&obs(Some("Pending"), false, true)), Decision::Keep);
        assert!(matches!(
            decide(&obs(Some("Failed"), false, true)),
            Decision::FailAndDelete { .. }
        ));
        assert!(matches!(
            decide(&obs(Some("Succeeded"), false, true)),
            Decision::FailAndDelete { .. }
        ));
        assert!(matches!(
            decide(&obs(None, false, true)),
            Decision::FailAndDelete { .. }
        ));
        assert!(matches!(
            decide(&obs(Some("Unknown"), false, true)),
            Decision::KeepUnknown { .. }
        ));
        assert_eq!(decide(&obs(None, false, false)), Decision::Keep);
    }
}
