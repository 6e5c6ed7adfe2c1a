//! The cache's entries and the rules over them, pure: what a reservation and a committed entry
//! record, which entry a lookup finds, whether the uploaded ranges make a whole entry.
//!
//! Matching follows GitHub's documented order (and act's cache server): for each key the job
//! sends, in order, an entry with exactly that key, else the newest entry whose key starts
//! with it; always with the same `version` (the toolkit's hash of paths and compression). The
//! caller passes only its own repository's entries, so a prefix never reaches another's.

use serde::{Deserialize, Serialize};

/// The toolkit caps a key at 512 characters; the version is a 64-hex hash.
pub const MAX_KEY: usize = 512;
pub const MAX_VERSION: usize = 512;
/// Keys in one lookup (the primary key and the restore keys; the toolkit allows 10).
pub const MAX_KEYS: usize = 10;

/// A reserved upload, until its commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: u64,
    pub key: String,
    pub version: String,
    /// The size announced at the reservation (the toolkit sends it), when it was.
    pub size: Option<u64>,
    /// Unix milliseconds.
    pub created: i64,
}

/// One uploaded range: the part object at `start` holds `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub start: u64,
    pub len: u64,
}

/// A committed entry: visible once its manifest exists, served from its parts in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: u64,
    pub key: String,
    pub version: String,
    pub size: u64,
    pub parts: Vec<Part>,
    /// Unix milliseconds.
    pub created: i64,
    /// Unix milliseconds of the last restore (or the commit): what eviction orders by.
    pub used: i64,
}

/// A key or version the cache refuses, with the sentence to answer.
pub fn check_key(what: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("the cache {what} is empty; send one"));
    }
    if value.len() > max {
        return Err(format!(
            "the cache {what} has {} bytes; at most {max} are accepted",
            value.len()
        ));
    }
    if value.contains(',') && what == "key" {
        return Err(
            "a cache key may not contain a comma (lookups separate keys with commas)".into(),
        );
    }
    Ok(())
}

/// The entry a lookup of `keys` (in order) with `version` finds among one repository's.
pub fn find<'e>(entries: &'e [Entry], keys: &[&str], version: &str) -> Option<&'e Entry> {
    keys.iter().find_map(|key| {
        let same_version = || entries.iter().filter(|e| e.version == version);
        same_version().find(|e| e.key == *key).or_else(|| {
            same_version()
                .filter(|e| e.key.starts_with(key))
                .max_by_key(|e| (e.created, e.id))
        })
    })
}

/// `Content-Range: bytes START-END/*` (END inclusive): the range's start and length.
pub fn parse_content_range(value: &str) -> Option<(u64, u64)> {
    let range = value.trim().strip_prefix("bytes ")?;
    let (span, _total) = range.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end): (u64, u64) = (start.trim().parse().ok()?, end.trim().parse().ok()?);
    (end >= start).then(|| (start, end - start + 1))
}

/// Whether a new range overlaps one already uploaded (a retry of the same range replaces it).
pub fn overlaps(parts: &[Part], new: Part) -> bool {
    parts.iter().any(|p| {
        p.start != new.start && p.start < new.start + new.len && new.start < p.start + p.len
    })
}

/// The parts in order when they tile `[0, size)` exactly; else the sentence saying what is
/// missing. Ranges may arrive in any order: the toolkit uploads four chunks at once.
pub fn whole(mut parts: Vec<Part>, size: u64) -> Result<Vec<Part>, String> {
    parts.sort_by_key(|p| p.start);
    let mut next = 0u64;
    for p in &parts {
        if p.start != next {
            return Err(if p.start > next {
                format!("bytes {next}-{} were never uploaded", p.start - 1)
            } else {
                format!("the range starting at byte {} overlaps another", p.start)
            });
        }
        next = p.start + p.len;
    }
    if next < size {
        return Err(format!("bytes {next}-{} were never uploaded", size - 1));
    }
    if next > size {
        return Err(format!(
            "the uploaded ranges hold {next} bytes, not the {size} committed"
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, key: &str, version: &str, created: i64) -> Entry {
        Entry {
            id,
            key: key.into(),
            version: version.into(),
            size: 1,
            parts: vec![],
            created,
            used: created,
        }
    }

    #[test]
    fn exact_key_first_then_the_newest_prefix_of_each_key_in_order() {
        let es = [
            entry(1, "npm-linux-aaa", "v", 10),
            entry(2, "npm-linux-bbb", "v", 20),
            entry(3, "npm-linux-ccc", "w", 30),
            entry(4, "npm-", "v", 5),
        ];
        assert_eq!(find(&es, &["npm-linux-aaa"], "v").unwrap().id, 1);
        assert_eq!(
            find(&es, &["npm-linux-zzz", "npm-linux-"], "v").unwrap().id,
            2
        );
        assert_eq!(find(&es, &["npm-"], "v").unwrap().id, 4);
        assert_eq!(find(&es, &["npm-linux-ccc"], "w").unwrap().id, 3);
        assert!(find(&es, &["npm-linux-ccc"], "v").is_none());
        assert!(find(&es, &["pip-"], "v").is_none());
    }

    #[test]
    fn ranges_must_tile_the_committed_size() {
        assert_eq!(parse_content_range("bytes 0-9/*"), Some((0, 10)));
        assert_eq!(parse_content_range("bytes 9-0/*"), None);
        assert_eq!(parse_content_range("items 0-9/*"), None);
        let p = |start, len| Part { start, len };
        assert_eq!(whole(vec![p(10, 5), p(0, 10)], 15).unwrap()[0], p(0, 10));
        assert!(
            whole(vec![p(0, 10)], 15)
                .unwrap_err()
                .contains("bytes 10-14")
        );
        assert!(
            whole(vec![p(0, 10)], 5)
                .unwrap_err()
                .contains("hold 10 bytes")
        );
        assert!(whole(vec![p(5, 10)], 15).unwrap_err().contains("bytes 0-4"));
        assert!(
            whole(vec![p(0, 10), p(5, 10)], 15)
                .unwrap_err()
                .contains("overlaps")
        );
        assert!(overlaps(&[p(0, 10)], p(5, 10)));
        assert!(!overlaps(&[p(0, 10)], p(10, 10)));
        assert!(!overlaps(&[p(0, 10)], p(0, 10)));
    }

    #[test]
    fn absurd_keys_are_refused() {
        check_key("key", "npm-1", MAX_KEY).unwrap();
        assert!(
            check_key("key", &"k".repeat(MAX_KEY + 1), MAX_KEY)
                .unwrap_err()
                .contains("513 bytes")
        );
        assert!(check_key("version", "", MAX_VERSION).is_err());
        assert!(check_key("key", "a,b", MAX_KEY).is_err());
    }
}
