//! Which entries go, pure: every entry not restored within the age limit, then the least
//! recently used until all entries together fit the size limit. Across repositories: the
//! limit is the storage's, and a busy repository may push out an idle one's entries (never
//! read them).

use crate::cache::index::Entry;

/// An entry as eviction sees it: where it lives (its repository's directory) and its use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its repository's directory in the store ([`super::storage::repo_dir`]).
    pub repository: String,
    /// The entry's manifest: its size, parts and last use.
    pub entry: Entry,
}

/// All entries' bytes, saturated (what the metric shows): sizes come from manifests in the
/// store, which a damaged or hand-written one could make absurd (a plain sum panics in a
/// debug build).
pub fn total_size(stored: &[Stored]) -> u64 {
    stored
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.entry.size))
}

/// The entries to delete, oldest use first (times in unix milliseconds).
pub fn plan(mut stored: Vec<Stored>, now: i64, max_age_ms: i64, max_size: u64) -> Vec<Stored> {
    stored.sort_by_key(|s| (s.entry.used, s.entry.id));
    // Summed wide: no count of 64-bit sizes a store can list passes 128 bits.
    let mut total: u128 = stored.iter().map(|s| u128::from(s.entry.size)).sum();
    let mut out = Vec::new();
    for s in stored {
        let expired = now.saturating_sub(s.entry.used) > max_age_ms;
        if expired || total > u128::from(max_size) {
            total -= u128::from(s.entry.size);
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: u64, size: u64, used: i64) -> Stored {
        Stored {
            repository: "r".into(),
            entry: Entry {
                id,
                key: format!("k{id}"),
                version: "v".into(),
                size,
                parts: vec![],
                created: 0,
                used,
                scope: String::new(),
                joined: false,
                by_key: true,
            },
        }
    }

    #[test]
    fn least_recently_used_go_until_the_rest_fits_and_old_ones_always() {
        let all = vec![stored(1, 40, 300), stored(2, 40, 100), stored(3, 40, 200)];
        let ids = |v: Vec<Stored>| v.into_iter().map(|s| s.entry.id).collect::<Vec<_>>();
        assert_eq!(ids(plan(all.clone(), 400, 1000, 100)), vec![2]);
        assert_eq!(ids(plan(all.clone(), 400, 1000, 120)), Vec::<u64>::new());
        assert_eq!(ids(plan(all.clone(), 400, 250, 1000)), vec![2]);
        assert_eq!(ids(plan(all, 400, 1000, 0)), vec![2, 3, 1]);
    }

    /// Manifest sizes whose sum passes 64 bits (a damaged store): the plan still evicts down
    /// to the limit and the total shown saturates, instead of panicking the sweep.
    #[test]
    fn absurd_sizes_saturate_the_total() {
        let all = vec![
            stored(1, u64::MAX, 100),
            stored(2, u64::MAX, 200),
            stored(3, 1, 300),
        ];
        assert_eq!(total_size(&all), u64::MAX);
        let gone: Vec<u64> = plan(all, 400, 1000, 10)
            .iter()
            .map(|s| s.entry.id)
            .collect();
        assert_eq!(gone, vec![1, 2]);
    }
}
