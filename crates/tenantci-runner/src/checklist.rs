//! A checklist: named checks, each `ok`, `warn`, `fail` or `skip` with a detail and, when
//! something is wrong, the fix. One shape for `check-host` and `runner check`, in JSON and on
//! the terminal, so operators read every check report the same way.

use serde::Serialize;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and fine.
    Ok,
    /// Works now, but will not for long or is unsafe; does not fail the list.
    Warn,
    /// Wrong now; fails the list, and the line carries a fix.
    Fail,
    /// Could not run: an earlier check failed or an input is missing.
    Skip,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The check's short name, e.g. `certificate`.
    pub name: String,
    /// How it ended.
    pub status: Status,
    /// What was found, for a human.
    pub detail: String,
    /// How to fix it; `None` for a check that passed or was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status,
            detail: detail.into(),
            fix: None,
        }
    }
    /// A check that passed.
    pub fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Status::Ok, detail)
    }
    /// A check that could not run; `detail` says why.
    pub fn skip(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Status::Skip, detail)
    }
    /// A check that passes now but needs attention, with the fix.
    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(name, Status::Warn, detail).with_fix(fix)
    }
    /// A check that failed, with the fix.
    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(name, Status::Fail, detail).with_fix(fix)
    }
    fn with_fix(self, fix: impl Into<String>) -> Self {
        Check {
            fix: Some(fix.into()),
            ..self
        }
    }
}

/// Whether no check failed (warnings and skips pass).
pub fn passed(checks: &[Check]) -> bool {
    !checks.iter().any(|c| c.status == Status::Fail)
}

/// How many of `checks` ended with `status`.
pub fn count(checks: &[Check], status: Status) -> usize {
    checks.iter().filter(|c| c.status == status).count()
}

/// The terminal form: one line per check, the fix indented below it.
pub fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let tag = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        out.push_str(&format!("{tag}  {:<width$}  {}\n", c.name, c.detail));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("      fix: {fix}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_fails_the_list_and_shows_its_fix() {
        let checks = vec![
            Check::ok("files", "present"),
            Check::warn("certificate", "10 days left", "renew"),
            Check::skip("gitlab", "not contacted"),
        ];
        assert!(passed(&checks));
        let mut failed = checks.clone();
        failed.push(Check::fail(
            "access",
            "may not create pods",
            "bind the group",
        ));
        assert!(!passed(&failed));
        let text = render(&failed);
        assert!(text.contains("FAIL  access       may not create pods\n      fix: bind the group"));
        assert_eq!(count(&failed, Status::Warn), 1);
    }
}
