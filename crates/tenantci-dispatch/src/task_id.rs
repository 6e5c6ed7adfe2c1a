//! A Gitea task id, as one type from the assignment to the ledger, the backends and the view.
//!
//! The lowest floor, beside `backend_kind`: every floor above keys by it. Gitea's own types
//! (`tenantci-core`'s proto and client) keep their `i64`; the conversion is at that edge
//! ([`TaskId::new`], [`TaskId::get`]). Stored and sent as the JSON number it always was.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A Gitea task id: the number Gitea gave the task. Displays, debug-prints and serializes as
/// that number (a JSON number), so ledger records, `/v1/status` and logs read as they did.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(i64);

impl TaskId {
    /// The task id Gitea gave (a proto's `Task.id`, a ledger record's number).
    pub const fn new(id: i64) -> Self {
        TaskId(id)
    }

    /// The number, for Gitea's calls and log fields (which stay numbers).
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A string that is not a task id (an assignment's `task_id` that does not parse): the one
/// error for it, whose sentence the worker poisons the delivery with and `Opened` refuses with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a Gitea task id")]
pub struct TaskIdError(pub String);

/// The bare number, as an `i64` printed: a `?task` log field or a `{:?}` of a struct holding
/// one reads as before the type.
impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for TaskId {
    type Err = TaskIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<i64>()
            .map(TaskId)
            .map_err(|_| TaskIdError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_its_string() {
        let t = TaskId::new(4711);
        assert_eq!(t.to_string(), "4711");
        assert_eq!("4711".parse::<TaskId>(), Ok(t));
        assert_eq!(t.get(), 4711);
        assert_eq!(format!("{t:?}"), "4711");
    }

    #[test]
    fn a_string_that_is_no_number_is_refused_with_the_sentence() {
        let e = "task-9".parse::<TaskId>().unwrap_err();
        assert_eq!(e.to_string(), "`task-9` is not a Gitea task id");
    }

    #[test]
    fn serializes_as_the_number() {
        assert_eq!(serde_json::to_string(&TaskId::new(12)).unwrap(), "12");
        assert_eq!(
            serde_json::from_str::<TaskId>("12").unwrap(),
            TaskId::new(12)
        );
        assert!(serde_json::from_str::<TaskId>("\"12\"").is_err());
    }
}
