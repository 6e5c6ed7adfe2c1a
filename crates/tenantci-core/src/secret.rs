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
    let text = std::fs::read_to_string(path).map_err(|e| Error::unreadable(what, path, e))?;
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

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret::new("glrt-x")), "Secret([redacted])");
    }
}
