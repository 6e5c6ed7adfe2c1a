//! What the reconciler does with one task's executor Pod and Secret, pure: the Pod's phase and
//! markers as observed, mapped to a [`Decision`].
//!
//! A Pod that ended or vanished without the terminal marker gets FAILURE; a Secret whose Pod
//! is still being created is not a vanished Pod; a phase this version does not know is kept.

use crate::backend::lifecycle::Decision;

/// One task's Pod and Secret as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// The Pod's phase (None: no Pod with that name).
    pub pod_phase: Option<String>,
    /// The Pod carries the terminal marker: Gitea accepted the final state.
    pub terminal_marker: bool,
    /// The task's Secret exists.
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

/// What the reconciler does with the task's executor: delete after the terminal marker,
/// FAILURE for a Pod that ended or vanished without it, keep otherwise.
pub fn decide(o: &PodState) -> Decision {
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

/// When [`decide`] would answer otherwise with time alone: a Secret without its Pod becomes a
/// vanished Pod once [`POD_CREATE_GRACE`] is over.
pub fn recheck(o: &PodState) -> Option<std::time::Duration> {
    match (&o.pod_phase, o.terminal_marker, o.secret_exists) {
        (None, false, true) => POD_CREATE_GRACE.checked_sub(o.secret_age?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(phase: Option<&str>, marker: bool, secret: bool) -> PodState {
        PodState {
            pod_phase: phase.map(str::to_string),
            terminal_marker: marker,
            secret_exists: secret,
            secret_age: None,
        }
    }

    #[test]
    fn a_secret_whose_pod_is_being_created_is_not_a_vanished_pod() {
        let young = PodState {
            secret_age: Some(std::time::Duration::from_millis(5)),
            ..obs(None, false, true)
        };
        assert_eq!(decide(&young), Decision::Keep);
        let old = PodState {
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
