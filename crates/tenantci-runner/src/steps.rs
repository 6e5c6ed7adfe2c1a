//! The step report of an orchestration (`bootstrap runner`, `dispatch init`, `dispatch renew`):
//! one line per step as it completes, and the same list in `-o json`. An outcome is an
//! [`Outcome`], never a bare string, so callers compare variants and the JSON names stay one
//! table.

use std::fmt;

use serde::{Serialize, Serializer};

/// What a step (or one object of it) came to. The JSON and text name is [`Outcome::name`];
/// a planned change in a dry run reads `would <verb>` ([`StepOutcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Checked and fine; nothing to change.
    Ok,
    /// Made where there was none (an object, a runner at GitLab, a registration).
    Created,
    /// Changed to what is wanted (an object that existed and differed).
    Updated,
    /// Already as wanted.
    Unchanged,
    /// Server-side applied (some objects created or updated).
    Applied,
    /// An existing file or credential is kept as it is.
    Kept,
    /// A new credential issued.
    Minted,
    /// Moved aside, then replaced.
    Rotated,
    /// A certificate issued again from the same CA.
    Reissued,
    /// Taken away, whether or not it was there (the pause Deployment's removal).
    Removed,
    /// An object that existed was deleted.
    Deleted,
    /// Nothing there to delete (fine for an idempotent removal).
    Absent,
    /// A file written with new content.
    Written,
    /// Not run, for the reason the detail gives (a dry run, a missing input).
    Skipped,
    /// Left to gitlab-runner's own pause pods.
    Native,
    /// What an interrupted run created, verified and used.
    Reused,
    /// What an interrupted run created deleted, and created anew.
    Replaced,
}

impl Outcome {
    /// The stable name in text and JSON output (docs/cli.md).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Applied => "applied",
            Outcome::Kept => "kept",
            Outcome::Minted => "minted",
            Outcome::Rotated => "rotated",
            Outcome::Reissued => "re-issued",
            Outcome::Removed => "removed",
            Outcome::Deleted => "deleted",
            Outcome::Absent => "absent",
            Outcome::Written => "written",
            Outcome::Skipped => "skipped",
            Outcome::Native => "native",
            Outcome::Reused => "reused",
            Outcome::Replaced => "replaced",
        }
    }

    /// The verb of a change (`would <verb>` in a dry run); None for outcomes that change
    /// nothing, which read the same in a dry run.
    pub fn verb(self) -> Option<&'static str> {
        Some(match self {
            Outcome::Created => "create",
            Outcome::Updated => "update",
            Outcome::Applied => "apply",
            Outcome::Minted => "mint",
            Outcome::Rotated => "rotate",
            Outcome::Reissued => "re-issue",
            Outcome::Removed => "remove",
            Outcome::Deleted => "delete",
            Outcome::Written => "write",
            Outcome::Replaced => "replace",
            _ => return None,
        })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A step's outcome as reported: done, or (`planned`, in a dry run) what would be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome {
    /// What the step came to.
    pub outcome: Outcome,
    /// True in a dry run for a change that was only planned (shown as `would <verb>`).
    pub planned: bool,
}

impl fmt::Display for StepOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so the CLI's `{:<12}` columns line up.
        match (self.planned, self.outcome.verb()) {
            (true, Some(verb)) => f.pad(&format!("would {verb}")),
            _ => f.pad(self.outcome.name()),
        }
    }
}

impl Serialize for StepOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One step's line.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The step's name (`resolve`, `credential`, `rbac`, ...).
    pub step: &'static str,
    /// What it came to.
    pub outcome: StepOutcome,
    /// What it concerned or why, for a human (a path, a count, a reason).
    pub detail: String,
}

/// Records steps in order and shows each to `on_step` as it completes.
pub struct Steps<'a> {
    on_step: &'a mut dyn FnMut(&Step),
    all: Vec<Step>,
    dry_run: bool,
}

impl<'a> Steps<'a> {
    /// An empty record that shows each step to `on_step`; in a `dry_run` [`Steps::act`] reads
    /// `would <verb>`.
    pub fn new(on_step: &'a mut dyn FnMut(&Step), dry_run: bool) -> Self {
        Steps {
            on_step,
            all: Vec::new(),
            dry_run,
        }
    }

    /// A step that happened as reported, dry run or not (a check, a kept file).
    pub fn record(&mut self, step: &'static str, outcome: Outcome, detail: impl Into<String>) {
        self.push(step, outcome, false, detail.into());
    }

    /// A change: done in a real run, `would <verb>` in a dry run.
    pub fn act(&mut self, step: &'static str, outcome: Outcome, detail: impl Into<String>) {
        self.push(step, outcome, self.dry_run, detail.into());
    }

    fn push(&mut self, step: &'static str, outcome: Outcome, planned: bool, detail: String) {
        let s = Step {
            step,
            outcome: StepOutcome { outcome, planned },
            detail,
        };
        (self.on_step)(&s);
        self.all.push(s);
    }

    /// The steps recorded, in order.
    pub fn into_vec(self) -> Vec<Step> {
        self.all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_changes_read_would_and_the_rest_read_the_same() {
        let mut seen = Vec::new();
        let mut on_step = |s: &Step| seen.push(s.outcome.to_string());
        let mut steps = Steps::new(&mut on_step, true);
        steps.act("credential", Outcome::Minted, "");
        steps.act("rbac", Outcome::Unchanged, "");
        steps.record("resolve", Outcome::Ok, "");
        steps.act("facade-cert", Outcome::Reissued, "");
        let all = steps.into_vec();
        assert_eq!(seen, ["would mint", "unchanged", "ok", "would re-issue"]);
        let json = serde_json::to_value(&all[0]).unwrap();
        assert_eq!(json["outcome"], "would mint");
        assert_eq!(format!("{:<12}|", all[1].outcome), "unchanged   |");
    }

    #[test]
    fn names_are_stable() {
        let json = serde_json::to_string(&Outcome::Reissued).unwrap();
        assert_eq!(json, "\"re-issued\"");
    }
}
