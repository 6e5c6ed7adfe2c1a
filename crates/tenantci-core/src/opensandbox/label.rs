//! Sandbox metadata keys and values: OpenSandbox stores them as Kubernetes labels on a
//! `BatchSandbox`, so they follow the label rules (an optional DNS-subdomain prefix and `/`,
//! then a name of at most 63 characters; values at most 63 characters of the same pattern,
//! or empty), and the `opensandbox.io/` prefix is reserved for the platform.
//!
//! One definition, so tenantci refuses before a request what the API would answer with 400.

use crate::dns;

/// The prefix OpenSandbox keeps for itself.
pub const RESERVED_PREFIX: &str = "opensandbox.io";

/// Why a metadata entry is refused, as one phrase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelError {
    /// The key is not a label key; holds the key.
    Key(String),
    /// The key's prefix is `opensandbox.io`, which the platform keeps; holds the key.
    Reserved(String),
    /// The value is neither empty nor a label value.
    Value {
        /// The key the value belongs to.
        key: String,
        /// The refused value.
        value: String,
    },
}

impl std::fmt::Display for LabelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabelError::Key(k) => write!(
                f,
                "metadata key `{k}` is not a label key (optional DNS prefix and `/`, then at most 63 characters of [A-Za-z0-9-_.] starting and ending alphanumeric)"
            ),
            LabelError::Reserved(k) => {
                write!(
                    f,
                    "metadata key `{k}` uses the reserved prefix `{RESERVED_PREFIX}/`"
                )
            }
            LabelError::Value { key, value } => write!(
                f,
                "metadata value `{value}` of `{key}` is not a label value (at most 63 characters of [A-Za-z0-9-_.] starting and ending alphanumeric)"
            ),
        }
    }
}

/// The name part (and a value when non-empty): `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`,
/// at most 63 characters.
pub fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Checks one metadata entry.
pub fn check(key: &str, value: &str) -> Result<(), LabelError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !dns::is_subdomain(p)) || !is_name(name) {
        return Err(LabelError::Key(key.to_string()));
    }
    if prefix == Some(RESERVED_PREFIX) {
        return Err(LabelError::Reserved(key.to_string()));
    }
    if !value.is_empty() && !is_name(value) {
        return Err(LabelError::Value {
            key: key.to_string(),
            value: value.to_string(),
        });
    }
    Ok(())
}

/// Checks every entry; the first refusal.
pub fn check_all<'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), LabelError> {
    entries.into_iter().try_for_each(|(k, v)| check(k, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_dispatchers_keys() {
        for (k, v) in [
            ("tenantci.io/task-id", "12345"),
            ("tenantci.io/attempt", "1"),
            ("tenantci.io/dispatcher", "7"),
            ("tenantci.io/terminal", ""),
            ("plain", "A.b_c-9"),
            ("a/b", &"x".repeat(63)),
        ] {
            assert_eq!(check(k, v), Ok(()), "{k}={v}");
        }
    }

    #[test]
    fn refuses_what_the_api_refuses() {
        let key = |k: &str| check(k, "v").unwrap_err();
        assert!(matches!(key(""), LabelError::Key(_)));
        assert!(matches!(key("-a"), LabelError::Key(_)));
        assert!(matches!(key("Bad_Prefix/x"), LabelError::Key(_)));
        assert!(matches!(key("a/b/c"), LabelError::Key(_)));
        assert!(matches!(key(&"k".repeat(64)), LabelError::Key(_)));
        assert!(matches!(key("opensandbox.io/x"), LabelError::Reserved(_)));
        for bad in ["a:b", "a b", "-a", "a-", &"v".repeat(64)] {
            assert!(
                matches!(check("k", bad), Err(LabelError::Value { .. })),
                "{bad}"
            );
        }
    }
}
