//! A secret string (a token, a key, a task secret): never shown by `Debug`, and with no
//! `Display`, so it cannot reach a log line or an error message by accident.

use std::fmt;
use std::path::Path;

use crate::{Error, Result};

/// A secret string; `Debug` prints `Secret([redacted])` and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself; call only where it is sent or written to a 0600 file.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The trimmed contents of a file holding a secret (a token, a password), `what` naming it in
/// errors. An empty file is refused with `if_empty` as the fix where the caller knows a better
/// one than "put the secret into it". One reader for every secret file, so they all trim,
/// bound and refuse alike: a regular file (not a FIFO or a device), at most
/// [`MAX_SECRET_FILE`] bytes, one line.
pub fn read_file(what: &str, path: &Path, if_empty: Option<&str>) -> Result<String> {
    let text = crate::input::read_text(what, path, MAX_SECRET_FILE)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(
            Error::bad_input(format!("{what} `{}` is empty", path.display())).hint(
                if_empty
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("put the secret into {what}, on one line")),
            ),
        );
    }
    if text.contains(['\n', '\r']) {
        return Err(Error::bad_input(format!(
            "{what} `{}` holds more than one line",
            path.display()
        ))
        .hint(format!("{what} holds the secret alone, on one line")));
    }
    Ok(text.to_string())
}

/// Largest secret file read: tokens and passwords are far below it (GitLab's and Gitea's
/// tokens are under 100 characters); a path naming something else is refused, not stored.
pub const MAX_SECRET_FILE: u64 = 4 * 1024;

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn secret_files_are_trimmed_bounded_and_regular() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "s3cret\n").unwrap();
        assert_eq!(super::read_file("the secret", &ok, None).unwrap(), "s3cret");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; super::MAX_SECRET_FILE as usize + 1]).unwrap();
        let err = super::read_file("the secret", &big, None).unwrap_err();
        assert!(
            err.message().contains("larger than 4 KiB"),
            "{}",
            err.message()
        );
        let err = super::read_file("the secret", dir.path(), None).unwrap_err();
        assert!(
            err.message().contains("not a regular file"),
            "{}",
            err.message()
        );
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = super::read_file("the secret", &empty, None).unwrap_err();
        assert!(err.hint_text().is_some(), "an empty file has a fix");
        let two = dir.path().join("two");
        std::fs::write(&two, "a\nb\n").unwrap();
        assert!(super::read_file("the secret", &two, None).is_err());
    }

    #[test]
    fn debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret::new("glrt-x")), "Secret([redacted])");
    }
}
