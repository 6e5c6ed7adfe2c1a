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

/// The longest key accepted, in bytes: the toolkit caps a key at 512 characters.
pub const MAX_KEY: usize = 512;
/// The longest version accepted, in bytes (the toolkit's is 64 hex digits).
pub const MAX_VERSION: usize = 512;
/// Keys in one lookup (the primary key and the restore keys; the toolkit allows 10).
pub const MAX_KEYS: usize = 10;

/// A reserved upload, until its commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The id the upload was given (random; the `cacheId` its ranges and commit name).
    pub id: u64,
    /// The cache key the job saves under.
    pub key: String,
    /// The toolkit's version: a hash of the cached paths and the compression.
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
    /// Offset of its first byte in the entry.
    pub start: u64,
    /// Its length, in bytes.
    pub len: u64,
}

/// A committed entry: visible once its manifest exists, served from its parts in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The id its upload was reserved under.
    pub id: u64,
    /// The cache key it was saved under.
    pub key: String,
    /// The toolkit's version it was saved with.
    pub version: String,
    /// Its length, in bytes.
    pub size: u64,
    /// Its uploaded ranges, in order.
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
    /// Its manifest is named by its scope, key and version (`storage`), so that a second
    /// commit of the same three finds the name taken; an earlier tenantci named it by its id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_key: bool,
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

/// The entry `key`/`version` saved under `scope` already, if any (entries are immutable;
/// other refs save beside it).
pub fn existing<'e>(
    entries: &'e [Entry],
    scope: &str,
    key: &str,
    version: &str,
) -> Option<&'e Entry> {
    entries
        .iter()
        .find(|e| e.scope == scope && e.key == key && e.version == version)
}

/// `Content-Range: bytes START-END/*` (END inclusive) as a part; else the sentence saying
/// what is wrong with it. The length and the end past it are computed checked: a range
/// whose end past it does not fit 64 bits fits no reservation.
pub fn parse_content_range(value: &str) -> Result<Part, String> {
    let form = || format!("the upload's `Content-Range: {value}` is not `bytes START-END/*`");
    let range = value.trim().strip_prefix("bytes ").ok_or_else(form)?;
    let (span, _total) = range.split_once('/').ok_or_else(form)?;
    let (start, end) = span.split_once('-').ok_or_else(form)?;
    let number = |n: &str| n.trim().parse::<u64>().map_err(|_| form());
    let (start, end) = (number(start)?, number(end)?);
    if end < start {
        return Err(format!(
            "the upload's range {start}-{end} ends before it starts"
        ));
    }
    // END + 1 fitting makes END - START + 1 fit too.
    match end.checked_add(1) {
        Some(past) => Ok(Part {
            start,
            len: past - start,
        }),
        None => Err(format!(
            "the upload's range {start}-{end} ends past any size a cache entry can have; send the range of the bytes in the body"
        )),
    }
}

impl Part {
    /// The byte just past the part; None when that does not fit 64 bits (never for a part
    /// [`parse_content_range`] gave or storage holds).
    pub fn end(&self) -> Option<u64> {
        self.start.checked_add(self.len)
    }
}

/// Whether a new range overlaps one already uploaded (a retry of the same range replaces it).
pub fn overlaps(parts: &[Part], new: Part) -> bool {
    let end = |p: &Part| p.end().unwrap_or(u64::MAX);
    parts
        .iter()
        .any(|p| p.start != new.start && p.start < end(&new) && new.start < end(p))
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
        next = p
            .end()
            .ok_or_else(|| format!("the range starting at byte {} ends past 64 bits", p.start))?;
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
            by_key: true,
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
        assert_eq!(existing(&es, pr, "deps-a", "v").map(|e| e.id), Some(2));
        assert!(existing(&es, pr, "deps-b", "v").is_none());
    }

    #[test]
    fn ranges_must_tile_the_committed_size() {
        let p = |start, len| Part { start, len };
        assert_eq!(parse_content_range("bytes 0-9/*"), Ok(p(0, 10)));
        assert!(
            parse_content_range("bytes 9-0/*")
                .unwrap_err()
                .contains("before it starts")
        );
        assert!(
            parse_content_range("items 0-9/*")
                .unwrap_err()
                .contains("not `bytes")
        );
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

    /// The largest 64-bit numbers: a length or end that would wrap is refused, never wrapped
    /// (issue 45: `bytes 0-18446744073709551615/*` made a zero-byte part).
    #[test]
    fn a_range_at_the_edge_of_64_bits_is_refused_not_wrapped() {
        let max = u64::MAX;
        let p = |start, len| Part { start, len };
        let wraps = |v: &str| parse_content_range(v).unwrap_err();
        assert!(wraps(&format!("bytes 0-{max}/*")).contains("past any size"));
        assert!(wraps(&format!("bytes {max}-{max}/*")).contains("past any size"));
        assert!(wraps(&format!("bytes 1-{max}/*")).contains("past any size"));
        assert!(wraps("bytes 0-18446744073709551616/*").contains("not `bytes"));
        assert!(wraps("bytes -1-5/*").contains("not `bytes"));
        let last = max - 1;
        assert_eq!(
            parse_content_range(&format!("bytes {last}-{last}/*")),
            Ok(p(last, 1)),
            "one byte ending at the last representable end"
        );
        assert_eq!(
            parse_content_range(&format!("bytes 0-{}/*", max - 1)),
            Ok(p(0, max))
        );
        assert!(
            overlaps(&[p(last, 1)], p(0, max)),
            "the last byte is in both"
        );
        assert!(
            !overlaps(&[p(0, last)], p(last, 1)),
            "adjacent at the very end"
        );
        assert!(overlaps(&[p(5, max - 5)], p(0, max)));
        assert!(
            whole(vec![p(0, 1), p(1, max)], 1)
                .unwrap_err()
                .contains("64 bits")
        );
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
