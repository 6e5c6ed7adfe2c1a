//! The one error type commands return, and its mapping to the exit codes of docs/cli.md.
//!
//! Every error carries a message (one sentence naming the input that is wrong or the system
//! that failed), where there is one the underlying cause as its [`std::error::Error::source`]
//! (never formatted into the message), and, where we know one, a hint saying how to fix it.
//! `main` prints [`Error::render`] once, cargo-style, and exits with [`Error::exit_code`]:
//!
//! ```text
//! error: cannot read the kubeconfig `/x/y`
//!   caused by: No such file or directory (os error 2)
//! help: pass --kubeconfig naming a kubeconfig file
//! ```
//!
//! `Display` is the message alone (the cause is the source, as std expects); `{:#}` is the
//! message and its causes on one line (`message: cause: cause`), for logs and check results.

use std::fmt;
use std::path::Path;

/// Exit codes are a contract (docs/cli.md); keep them in this one place.
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
    /// The process exit code for this kind (1, 2 or 3; see [`exit_code`]).
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

/// `std::result::Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`, no hint and no cause.
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

    /// The underlying cause, returned by [`std::error::Error::source`] and printed by
    /// [`Error::render`] as `caused by: ...` (with its own causes).
    pub fn caused_by(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// A file could not be read: bad input (the user named it), the OS reason as the cause.
    pub fn unreadable(what: &str, path: &Path, err: std::io::Error) -> Self {
        Error::bad_input(format!("cannot read {what} `{}`", path.display()))
            .caused_by(err)
            .hint("check the path and that this user may read it")
    }

    /// A file could not be written: the host refused, which is bad input (the path) too.
    pub fn unwritable(what: &str, path: &Path, err: std::io::Error) -> Self {
        Error::bad_input(format!("cannot write {what} `{}`", path.display()))
            .caused_by(err)
            .hint("check that the directory exists, is writable by this user, and has free space")
    }

    /// What went wrong, which decides the exit code.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The process exit code of this error's kind.
    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }

    /// The one-sentence message, without causes or hint (what `Display` prints).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How to fix it, as set by [`Error::hint`]; `None` when no fix is known.
    pub fn hint_text(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The causes worth printing, outermost first: the source chain, skipping a cause whose
    /// text is empty or already contained in the message or in a cause printed before it (a
    /// wrapper that formats its source, or an error wrapping an `Error` with the same message).
    pub fn causes(&self) -> Vec<String> {
        let mut shown: Vec<String> = Vec::new();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            let text = cause.to_string();
            let text = text.trim();
            let repeated = self.message.contains(text) || shown.iter().any(|s| s.contains(text));
            if !text.is_empty() && !repeated {
                shown.push(text.to_string());
            }
            next = cause.source();
        }
        shown
    }

    /// The text `main` prints on stderr: `error: <message>`, one `  caused by: <cause>` line
    /// per [`Error::causes`], then `help: <hint>`.
    pub fn render(&self) -> String {
        let mut out = format!("error: {}", self.message);
        for cause in self.causes() {
            out.push_str("\n  caused by: ");
            out.push_str(&cause.replace('\n', "\n    "));
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("\nhelp: {hint}"));
        }
        out
    }
}

impl fmt::Display for Error {
    /// The message; with `{:#}`, followed by the causes of [`Error::causes`] (`msg: a: b`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if f.alternate() {
            for cause in self.causes() {
                write!(f, ": {cause}")?;
            }
        }
        Ok(())
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

/// `err` and its causes on one line, `: `-joined, skipping a cause whose text is already shown
/// (a wrapper that formats its source): for log fields and refusal sentences, where an HTTP or
/// gRPC client's own message names only the URL and the reason is a cause or two down.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let shown = e.to_string();
        if !shown.is_empty() && !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        next = e.source();
    }
    text
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

    /// A cause that formats its own source, as thiserror enums with `{source}` do.
    #[derive(Debug)]
    struct Wrapper(&'static str, std::io::Error);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}: {}", self.0, self.1)
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn render_prints_message_cause_and_hint() {
        let e = Error::external("cannot reach the tenant apiserver at https://127.0.0.1:1")
            .caused_by(std::io::Error::other("connection refused"))
            .hint("is the gateway up?");
        assert_eq!(
            e.render(),
            "error: cannot reach the tenant apiserver at https://127.0.0.1:1\n  caused by: connection refused\nhelp: is the gateway up?"
        );
        assert_eq!(
            e.to_string(),
            "cannot reach the tenant apiserver at https://127.0.0.1:1"
        );
    }

    #[test]
    fn render_prints_a_two_level_chain_outermost_first() {
        let inner = Error::external("the apiserver answered 503")
            .caused_by(std::io::Error::other("upstream connect error"));
        let e = Error::external("cannot apply Namespace `ci`")
            .caused_by(inner)
            .hint("retry when the apiserver is up");
        assert_eq!(
            e.render(),
            "error: cannot apply Namespace `ci`\n  caused by: the apiserver answered 503\n  caused by: upstream connect error\nhelp: retry when the apiserver is up"
        );
        assert_eq!(
            format!("{e:#}"),
            "cannot apply Namespace `ci`: the apiserver answered 503: upstream connect error"
        );
    }

    #[test]
    fn a_cause_already_printed_is_not_printed_twice() {
        // In the message: the cause adds nothing.
        let e = Error::bad_input("cannot read `/x`: permission denied")
            .caused_by(std::io::Error::other("permission denied"));
        assert_eq!(e.render(), "error: cannot read `/x`: permission denied");
        // In the cause before it: the wrapper already shows its source.
        let e = Error::external("cannot create the stream")
            .caused_by(Wrapper("NATS answered", std::io::Error::other("timed out")));
        assert_eq!(
            e.render(),
            "error: cannot create the stream\n  caused by: NATS answered: timed out"
        );
        // An `Error` re-wrapped with its own message: only its cause is new.
        let inner = Error::unreadable("the CA key", Path::new("/k"), std::io::Error::other("gone"));
        let e = Error::bad_input(inner.message().to_string()).caused_by(inner);
        assert_eq!(
            e.render(),
            "error: cannot read the CA key `/k`\n  caused by: gone"
        );
    }

    #[test]
    fn file_helpers_keep_the_os_reason_as_the_source() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = Error::unreadable("the kubeconfig", Path::new("/x/y"), io);
        assert_eq!(e.message(), "cannot read the kubeconfig `/x/y`");
        assert_eq!(e.kind(), ErrorKind::BadInput);
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "entity not found");
        assert_eq!(
            e.render(),
            "error: cannot read the kubeconfig `/x/y`\n  caused by: entity not found\nhelp: check the path and that this user may read it"
        );
    }
}
