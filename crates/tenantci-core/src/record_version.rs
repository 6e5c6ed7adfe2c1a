//! The one rule for reading a stored record's version (docs/architecture.md, "Version
//! skew"): every record and message that can outlive a process carries the version of its
//! format; a record without one is version 1 (what releases before the field wrote); a release
//! reads every version up to its own and writes one the previous release reads; a record of a
//! newer version is [`Newer`]: left as it is (never rewritten, never deleted), reported, and
//! never read with this release's meaning.
//!
//! Each record's home names its [`Kind`] (its name and the version this release reads up
//! to); this is only the check, so the rule is written once. Reporting a [`Newer`] (a metric,
//! one log line per record) is the reading process's.

use serde::Deserialize;

/// The version of a record that carries none: what releases before the field wrote.
pub const UNVERSIONED: u32 = 1;

/// One kind of stored record: its name (a metric label and words in a log line), the
/// highest version this release reads (and the one it writes) and, for a JSON record, the
/// field that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// Short, stable, `snake_case`: `claim_ledger`, `executor_objects`.
    pub name: &'static str,
    /// The version this release writes and the highest it reads.
    pub current: u32,
    /// The JSON field holding it ([`Field`]).
    pub field: Field,
}

/// The field of a JSON record that holds its version (named before the rule was written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `version` (the claim ledger, the task history, the pending record).
    Version,
    /// `v` (the queue's assignment).
    V,
    /// `format` (the cache's manifests, whose `version` is the toolkit's).
    Format,
}

/// A record written by a newer release than this one: left as it is and reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this {kind} record has format version {found}, written by a newer tenantci release (this one reads up to version {reads}); it is left as it is: upgrade this process to the release that wrote it"
)]
pub struct Newer {
    /// The record's kind ([`Kind::name`]).
    pub kind: &'static str,
    /// The version it carries, as stored.
    pub found: String,
    /// The highest version this release reads.
    pub reads: u32,
}

/// A JSON record's possible version fields (every other field is skipped unread).
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    version: Option<serde_json::Value>,
    #[serde(default)]
    v: Option<serde_json::Value>,
    #[serde(default)]
    format: Option<serde_json::Value>,
}

impl Kind {
    /// A kind named `name` whose current version is `current`, held in `version`.
    pub const fn new(name: &'static str, current: u32) -> Kind {
        Kind {
            name,
            current,
            field: Field::Version,
        }
    }

    /// This kind, its version held in `field`.
    pub const fn in_field(self, field: Field) -> Kind {
        Kind { field, ..self }
    }

    /// The version a record carries (`None`: none, so [`UNVERSIONED`]) if this release reads
    /// it, else [`Newer`].
    pub fn check(self, found: Option<u64>) -> Result<u32, Newer> {
        let v = found.unwrap_or(u64::from(UNVERSIONED));
        match u32::try_from(v) {
            Ok(v) if v <= self.current => Ok(v),
            _ => Err(self.newer(v.to_string())),
        }
    }

    /// [`Kind::check`] of a JSON record's version field; the outer error: not a JSON object.
    /// A version that is not a whole number is a format this release does not know.
    pub fn check_json(self, bytes: &[u8]) -> Result<Result<u32, Newer>, serde_json::Error> {
        let probe: Probe = serde_json::from_slice(bytes)?;
        let found = match self.field {
            Field::Version => probe.version,
            Field::V => probe.v,
            Field::Format => probe.format,
        };
        Ok(match found {
            None => self.check(None),
            Some(v) => match v.as_u64() {
                Some(n) => self.check(Some(n)),
                None => Err(self.newer(v.to_string())),
            },
        })
    }

    /// [`Kind::check`] of a version held as text (an annotation, a label); text that is not a
    /// number is a format this release does not know, so [`Newer`] as well.
    pub fn check_text(self, found: Option<&str>) -> Result<u32, Newer> {
        match found {
            None => self.check(None),
            Some(t) => match t.parse::<u64>() {
                Ok(v) => self.check(Some(v)),
                Err(_) => Err(self.newer(t.to_string())),
            },
        }
    }

    /// The current version as text (for an annotation).
    pub fn current_text(self) -> String {
        self.current.to_string()
    }

    fn newer(self, found: String) -> Newer {
        Newer {
            kind: self.name,
            found,
            reads: self.current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Kind = Kind::new("claim_ledger", 2);

    #[test]
    fn absent_is_version_1_and_every_version_up_to_the_current_reads() {
        assert_eq!(K.check(None), Ok(1));
        assert_eq!(K.check(Some(1)), Ok(1));
        assert_eq!(K.check(Some(2)), Ok(2));
        let e = K.check(Some(3)).unwrap_err();
        assert_eq!((e.found.as_str(), e.reads), ("3", 2));
        assert!(e.to_string().contains("upgrade this process"), "{e}");
        assert!(K.check(Some(u64::MAX)).is_err(), "no wrap-around");
    }

    #[test]
    fn json_reads_the_kinds_field_and_text_refuses_what_is_not_a_number() {
        assert_eq!(K.check_json(br#"{"task":1}"#).unwrap(), Ok(1));
        assert_eq!(K.check_json(br#"{"version":2,"x":[1]}"#).unwrap(), Ok(2));
        assert!(K.check_json(br#"{"version":9}"#).unwrap().is_err());
        assert!(K.check_json(b"not json").is_err());
        let e = K.check_json(br#"{"version":"2"}"#).unwrap().unwrap_err();
        assert_eq!(e.found, r#""2""#, "not a number: not this release's");
        let v = K.in_field(Field::V);
        assert_eq!(v.check_json(br#"{"v":2,"version":"x"}"#).unwrap(), Ok(2));
        let f = K.in_field(Field::Format);
        assert_eq!(
            f.check_json(br#"{"version":"toolkit-hash"}"#).unwrap(),
            Ok(1)
        );
        assert!(f.check_json(br#"{"format":3}"#).unwrap().is_err());
        assert_eq!(K.check_text(None), Ok(1));
        assert_eq!(K.check_text(Some("2")), Ok(2));
        assert_eq!(K.check_text(Some("2b")).unwrap_err().found, "2b");
    }
}
