//! The step report of an orchestration (`bootstrap runner`, `dispatch init`): one line per step
//! as it completes, and the same list in `-o json`.

use serde::Serialize;

/// One step's line.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub step: &'static str,
    pub outcome: String,
    pub detail: String,
}
