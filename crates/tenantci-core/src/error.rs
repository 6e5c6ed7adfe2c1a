//! The one error type commands return, and its mapping to the exit codes of DESIGN.md.
//!
//! Every error carries a message (one sentence naming the input that is wrong or the system
//! that failed) and, where we know one, a hint saying how to fix it. `main` prints both once,
//! cargo-style (`error: ...` / `help: ...`), and exits with [`Error::exit_code`].

use std::fmt;
use std::path::Path;

/// Exit codes are a contract (DESIGN.md, docs/cli.md); keep them in this one place.
pub mod exit_code {
    /// The command did what it was asked.
    pub const SUCCESS: i32 = 0;
    /// A check or verification ran and failed (check-host, verify).
    pub const CHECK_FAILED: i32 = 1;
    /// Bad input: usage, an invalid value, or a refused policy. Nothing was changed.
    pub const BAD_INPUT: i32 = 2;
    /// An external system failed: apiserver, NATS or forge unreachable or answering 5xx.
    pub const EXTERNAL: i32 = 3;
}

/// What went wrong, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// A check or verification failed (exit 1).
    CheckFailed,
    /// The input was wrong or refused by policy (exit 2).
    BadInput,
    /// A system we depend on failed (exit 3).
    External,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::CheckFailed => exit_code::CHECK_FAILED,
            ErrorKind::BadInput => exit_code::BAD_INPUT,
            ErrorKind::External => exit_code::EXTERNAL,
        }
    }
}

/// A command failure: kind, message, optional fix, optional cause.
pub struct Error {
    kind: ErrorKind,
    message: String,
    hint: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            hint: None,
            source: None,
        }
    }

    /// Bad input or a refused policy (exit 2).
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadInput, message)
    }

    /// An external system failed (exit 3).
    pub fn external(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::External, message)
    }

    /// A check or verification failed (exit 1).
    pub fn check_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::CheckFailed, message)
    }

    /// How to fix it; printed as `help: ...`.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The underlying cause; printed after the message as `(cause)`.
    pub fn source(mut self, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// A file could not be read: bad input (the user named it), with the OS reason.
    pub fn unreadable(what: &str, path: &Path, err: std::io::Error) -> Self {
        Error::bad_input(format!("cannot read {what} `{}`: {err}", path.display()))
            .hint("check the path and that this user may read it")
    }

    /// A file could not be written: the host refused, which is bad input (the path) too.
    pub fn unwritable(what: &str, path: &Path, err: std::io::Error) -> Self {
        Error::bad_input(format!("cannot write {what} `{}`: {err}", path.display()))
            .hint("check that the directory exists, is writable by this user, and has free space")
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn hint_text(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The text `main` prints on stderr.
    pub fn render(&self) -> String {
        let mut out = format!("error: {}", self.message);
        if let Some(source) = &self.source {
            let cause = source.to_string();
            if !cause.is_empty() && !self.message.contains(&cause) {
                out.push_str(&format!(" ({cause})"));
            }
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("\nhelp: {hint}"));
        }
        out
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.render())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_the_documented_exit_codes() {
        assert_eq!(Error::check_failed("x").exit_code(), 1);
        assert_eq!(Error::bad_input("x").exit_code(), 2);
        assert_eq!(Error::external("x").exit_code(), 3);
    }

    #[test]
    fn render_prints_message_cause_and_hint() {
        let e = Error::external("cannot reach the tenant apiserver at https://127.0.0.1:1")
            .source(std::io::Error::other("connection refused"))
            .hint("is the gateway up?");
        assert_eq!(
            e.render(),
            "error: cannot reach the tenant apiserver at https://127.0.0.1:1 (connection refused)\nhelp: is the gateway up?"
        );
    }
}
