//! What the reconciler does with one VM sandbox, pure: the decisions of every backend
//! (`backend::lifecycle::Decision`), read from the sandbox's state and metadata.
//!
//! Delete only after the terminal marker (Gitea accepted the final state); a sandbox that
//! failed or was terminated without one gets FAILURE reported first, with the API's reason in
//! the task log; a state this version does not know is kept and logged, never deleted blindly.

use crate::backend::lifecycle::Decision;
use crate::backend::vm::desired;
use tenantci_core::opensandbox::{Sandbox, SandboxState};

/// The reconciler's decision for one sandbox: delete after the terminal marker, FAILURE for a
/// sandbox failed or terminated without it, keep a state this version does not know.
pub fn decide(s: &Sandbox) -> Decision {
    if desired::is_terminal(s) {
        return Decision::Delete;
    }
    let why = || {
        let reason = s.status.reason.as_deref().unwrap_or("no reason given");
        match s.status.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason.to_string(),
        }
    };
    match &s.status.state {
        SandboxState::Pending
        | SandboxState::Running
        | SandboxState::Pausing
        | SandboxState::Paused
        | SandboxState::Resuming
        | SandboxState::Stopping => Decision::Keep,
        SandboxState::Failed => Decision::FailAndDelete {
            reason: format!(
                "the VM sandbox {} failed ({}) before the task reported a final state",
                s.id,
                why()
            ),
        },
        SandboxState::Terminated => Decision::FailAndDelete {
            reason: format!(
                "the VM sandbox {} was terminated ({}) before the task reported a final state",
                s.id,
                why()
            ),
        },
        SandboxState::Other(state) => Decision::KeepUnknown {
            reason: format!(
                "the VM sandbox {} is in state `{state}`, which this tenantci version does not know; its task state is unknown, so it is kept",
                s.id
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_id::TaskId;

    fn sandbox(state: &str, terminal: bool) -> Sandbox {
        let mut metadata = desired::metadata(TaskId::new(9), 1, 7);
        if terminal {
            metadata.insert(desired::TERMINAL_KEY.into(), "true".into());
        }
        serde_json::from_value(serde_json::json!({
            "id": "sb-1",
            "status": {"state": state, "reason": "runtime_error", "message": "the VM crashed"},
            "metadata": metadata,
        }))
        .unwrap()
    }

    #[test]
    fn the_terminal_marker_deletes_whatever_the_state() {
        for state in ["Running", "Failed", "Hibernating"] {
            assert_eq!(decide(&sandbox(state, true)), Decision::Delete, "{state}");
        }
    }

    #[test]
    fn failed_or_terminated_without_a_final_state_is_a_failure_with_the_reason() {
        let Decision::FailAndDelete { reason } = decide(&sandbox("Failed", false)) else {
            panic!("a failed sandbox fails its task");
        };
        assert!(reason.contains("runtime_error: the VM crashed"), "{reason}");
        assert!(matches!(
            decide(&sandbox("Terminated", false)),
            Decision::FailAndDelete { .. }
        ));
    }

    #[test]
    fn live_states_are_kept_and_unknown_ones_logged() {
        for state in ["Pending", "Running", "Paused", "Stopping"] {
            assert_eq!(decide(&sandbox(state, false)), Decision::Keep, "{state}");
        }
        assert!(matches!(
            decide(&sandbox("Hibernating", false)),
            Decision::KeepUnknown { .. }
        ));
    }
}
