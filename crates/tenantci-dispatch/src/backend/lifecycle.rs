//! The decisions the reconciler carries out for one executor, whatever its backend (pure).
//! Each backend maps what it observes to a [`Decision`] (`pod::lifecycle`, `vm::lifecycle`);
//! [`start`] is the start deadline, the same for all.
//!
//! Rules: delete only after the terminal marker (Gitea accepted the final state); an executor
//! that ended or vanished without one gets FAILURE reported to Gitea first, with the reason in
//! the task log; anything whose state we cannot tell is kept and logged, never deleted blindly.

/// What the reconciler does with one executor, from what its backend observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Still working (or not started): nothing to do.
    Keep,
    /// Gitea has the final state: delete the executor.
    Delete,
    /// Report FAILURE with this log line, then delete.
    FailAndDelete {
        /// The line for the task's log: how the executor ended.
        reason: String,
    },
    /// We cannot tell: keep it and log why.
    KeepUnknown {
        /// What could not be told, for the dispatcher's log.
        reason: String,
    },
}

/// What to do with an executor that has not fetched its task (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Fetched, or still within the start deadline.
    Wait,
    /// Past the deadline: replace it by this attempt.
    Replace {
        /// The replacement's attempt: the current one plus one.
        attempt: u32,
    },
    /// Past the deadline on the last attempt: report FAILURE.
    GiveUp,
}

/// `age`: since the executor was created; `fetched`: it called FetchTask once.
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
}
