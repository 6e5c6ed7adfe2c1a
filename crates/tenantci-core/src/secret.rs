//! A secret string (a token, a key, a task secret): never shown by `Debug`, and with no
//! `Display`, so it cannot reach a log line or an error message by accident.

use std::fmt;
use std::path::Path;

use crate::{Error, Result};

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
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
/// errors. An empty file is refused with `if_empty` as the fix, where the caller knows one.
/// One reader for every secret file, so they all trim and refuse alike.
pub fn read_file(what: &str, path: &Path, if_empty: Option<&str>) -> Result<String> {
    let text = read_bounded(what, path)?;
    let text = text.trim();
    if text.is_empty() {
        let err = Error::bad_input(format!("{what} `{}` is empty", path.display()));
        return Err(match if_empty {
            Some(hint) => err.hint(hint),
            None => err,
        });
    }
    Ok(text.to_string())
}

/// Largest secret file read: tokens and passwords are far below it; a path pointing at
/// something else (a log, a device) is refused instead of read into memory.
pub const MAX_SECRET_FILE: u64 = 64 * 1024;

/// A regular file's text, at most [`MAX_SECRET_FILE`] bytes.
fn read_bounded(what: &str, path: &Path) -> Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| Error::unreadable(what, path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::unreadable(what, path, e))?;
    if !meta.is_file() {
        return Err(
            Error::bad_input(format!("{what} `{}` is not a regular file", path.display()))
                .hint("pass the file that holds the secret"),
        );
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::unreadable(what, path, e))?;
    if bytes.len() as u64 > MAX_SECRET_FILE {
        return Err(Error::bad_input(format!(
            "{what} `{}` is larger than {} KiB",
            path.display(),
            MAX_SECRET_FILE / 1024
        ))
        .hint("pass the file that holds only the secret"));
    }
    String::from_utf8(bytes).map_err(|_| {
        Error::bad_input(format!("{what} `{}` is not UTF-8 text", path.display()))
            .hint("pass the file that holds the secret as text")
    })
}

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
            err.message().contains("larger than 64 KiB"),
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
        assert!(super::read_file("the secret", &empty, None).is_err());
    }

    #[test]
    fn debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret::new("glrt-x")), "Secret([redacted])");
    }
}
