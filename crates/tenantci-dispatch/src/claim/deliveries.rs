//! The webhook deliveries seen recently, by `X-Gitea-Delivery` id: a delivery whose id is
//! among them is a replay and is refused (409).
//!
//! Bounded: the last [`REMEMBERED`] ids, the oldest forgotten first, and ids no longer than
//! [`MAX_ID`] (Gitea's is a 36-character UUID; a longer one is not remembered, so it cannot
//! make the set hold more than its bound in bytes). Only signed deliveries are remembered,
//! so an unauthenticated sender cannot push real ids out.
//!
//! Boundary: the signature covers the body, not the id header, so this stops repeats (a proxy
//! retrying, a captured request sent again as is), not a sender who changes the id; the
//! nudge budget (`claim::nudge`) bounds what any of them costs Gitea.

use std::collections::{HashSet, VecDeque};

/// How many ids are kept: more than a busy Gitea sends in the minutes a repeat would come in.
pub const REMEMBERED: usize = 4096;
/// The longest id remembered, in bytes.
pub const MAX_ID: usize = 64;

/// The last [`REMEMBERED`] delivery ids, in the order they came.
#[derive(Debug, Default)]
pub struct RecentDeliveries {
    order: VecDeque<String>,
    seen: HashSet<String>,
}

impl RecentDeliveries {
    /// Whether `id` is new (then it is remembered); a delivery without an id, or with one too
    /// long to be Gitea's, counts as new and is not remembered.
    pub fn first_time(&mut self, id: Option<&str>) -> bool {
        let Some(id) = id
            .map(str::trim)
            .filter(|i| !i.is_empty() && i.len() <= MAX_ID)
        else {
            return true;
        };
        if self.seen.contains(id) {
            return false;
        }
        if self.order.len() == REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.order.push_back(id.to_string());
        self.seen.insert(id.to_string());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_refused_until_it_is_forgotten() {
        let mut r = RecentDeliveries::default();
        assert!(r.first_time(Some("a")));
        assert!(!r.first_time(Some("a")), "a replay");
        assert!(!r.first_time(Some(" a ")), "the same id, padded");
        for i in 0..REMEMBERED - 1 {
            assert!(r.first_time(Some(&format!("id-{i}"))));
        }
        assert!(!r.first_time(Some("a")), "still within the bound");
        assert!(r.first_time(Some("one-more")));
        assert!(r.first_time(Some("a")), "forgotten, oldest first");
        assert_eq!(r.order.len(), REMEMBERED);
        assert_eq!(r.seen.len(), REMEMBERED);
    }

    #[test]
    fn no_id_or_one_too_long_is_never_remembered() {
        let mut r = RecentDeliveries::default();
        let long = "x".repeat(MAX_ID + 1);
        for id in [None, Some(""), Some(long.as_str())] {
            assert!(r.first_time(id));
            assert!(r.first_time(id), "{id:?} again");
        }
        assert!(r.order.is_empty());
    }
}
