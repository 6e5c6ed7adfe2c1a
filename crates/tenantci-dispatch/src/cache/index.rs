//! The cache's entries and the rules over them, pure: what a reservation and a committed entry
//! record, which entry a lookup finds, whether the uploaded ranges make a whole entry.
//!
//! Matching follows GitHub's documented order (and act's cache server): for each ref the task
//! may restore from (its own first, then its pull request's base, then the default branch;
//! `grant::Scope`), for each key the job sends, in order, an entry with exactly that key, else
//! the newest entry whose key starts with it; always with the same `version` (the toolkit's
//! hash of paths and compression). The caller passes only its own repository's entries, so a
//! prefix never reaches another's.

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
    /// The ref the entry will be saved under (the reserving task's).
    #[serde(default)]
    pub scope: String,
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
    /// The ref of the task that saved it: tasks of other refs restore it only when it is their
    /// base or default branch, and save beside it, never over it. Entries written before
    /// scopes existed have none, and only a task without a ref reads them (they age out).
    #[serde(default)]
    pub scope: String,
    /// Its bytes are also in one joined object (direct downloads from a bucket).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
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

/// The entry a lookup of `keys` (in order) with `version` finds among one repository's, from
/// the refs `reads` (in order).
pub fn find<'e>(
    entries: &'e [Entry],
    reads: &[String],
    keys: &[&str],
    version: &str,
) -> Option<&'e Entry> {
    reads.iter().find_map(|scope| {
        let candidates = || {
            entries
                .iter()
                .filter(|e| e.version == version && e.scope == *scope)
        };
        keys.iter().find_map(|key| {
            candidates().find(|e| e.key == *key).or_else(|| {
                candidates()
                    .filter(|e| e.key.starts_with(key))
                    .max_by_key(|e| (e.created, e.id))
            })
        })
    })
}

/// Whether an entry `key`/`version` was saved under `scope` already (entries are immutable;
/// other refs save beside it).
pub fn exists(entries: &[Entry], scope: &str, key: &str, version: &str) -> bool {
    entries
        .iter()
        .any(|e| e.scope == scope && e.key == key && e.version == version)
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
            scope: MAIN.into(),
            joined: false,
        }
    }

    const MAIN: &str = "refs/heads/main";

    fn main_only() -> Vec<String> {
        vec![MAIN.into()]
    }

    #[test]
    fn exact_key_first_then_the_newest_prefix_of_each_key_in_order() {
        let es = [
            entry(1, "npm-linux-aaa", "v", 10),
            entry(2, "npm-linux-bbb", "v", 20),
            entry(3, "npm-linux-ccc", "w", 30),
            entry(4, "npm-", "v", 5),
        ];
        let find = |keys: &[&str], version| find(&es, &main_only(), keys, version).map(|e| e.id);
        assert_eq!(find(&["npm-linux-aaa"], "v"), Some(1));
        assert_eq!(find(&["npm-linux-zzz", "npm-linux-"], "v"), Some(2));
        assert_eq!(find(&["npm-"], "v"), Some(4));
        assert_eq!(find(&["npm-linux-ccc"], "w"), Some(3));
        assert_eq!(find(&["npm-linux-ccc"], "v"), None);
        assert_eq!(find(&["pip-"], "v"), None);
    }

    #[test]
    fn a_branch_restores_its_own_entries_first_then_its_base_s_and_never_another_branch_s() {
        let pr = "refs/pull/3/head";
        let scoped = |id, key: &str, scope: &str| Entry {
            scope: scope.into(),
            ..entry(id, key, "v", id as i64)
        };
        let es = [
            scoped(1, "deps-a", MAIN),
            scoped(2, "deps-a", pr),
            scoped(3, "deps-b", MAIN),
            scoped(4, "deps-c", "refs/heads/other"),
        ];
        let reads = vec![pr.to_string(), MAIN.to_string()];
        let found = |keys: &[&str]| find(&es, &reads, keys, "v").map(|e| e.id);
        assert_eq!(found(&["deps-a"]), Some(2), "its own ref first");
        assert_eq!(found(&["deps-b"]), Some(3), "then the default branch's");
        assert_eq!(found(&["deps-c"]), None, "never a third branch's");
        assert_eq!(found(&["deps-"]), Some(2), "a prefix in its own ref first");
        // The default branch never sees the pull request's entry.
        assert_eq!(find(&es, &main_only(), &["deps-a"], "v").unwrap().id, 1);
        assert!(exists(&es, pr, "deps-a", "v"));
        assert!(!exists(&es, pr, "deps-b", "v"));
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
