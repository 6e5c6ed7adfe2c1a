//! Records a newer release wrote, reported (the rule is `tenantci_core::record_version`'s):
//! each record once per process, as one count of
//! `tenantci_dispatch_records_from_newer_release_total{kind}` and one warning that says what
//! to do. The record itself is the caller's to leave as it is. Process-wide, since every
//! reader (recovery, the observer's watch, the mirror, the facade) may meet the same record
//! again and again and the operator needs to hear of it once.

use std::collections::BTreeSet;
use std::sync::{LazyLock, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tenantci_core::record_version::Newer;

/// The counter's labels: `kind`.
pub type ByKind = Vec<(String, String)>;

static COUNTED: LazyLock<Family<ByKind, Counter>> = LazyLock::new(Family::default);
static SEEN: LazyLock<Mutex<BTreeSet<(&'static str, String)>>> = LazyLock::new(Mutex::default);

/// The counter, for the process's registry (`metrics`): a clone shares the counts.
pub fn counter() -> Family<ByKind, Counter> {
    COUNTED.clone()
}

/// Reports `newer`, the record at `at` (its key, or `Secret <namespace>/<name>`): counted and
/// logged the first time this process meets it; nothing after that. Returns whether this was
/// the first time.
pub fn report(newer: &Newer, at: &str) -> bool {
    let first = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert((newer.kind, at.to_string()));
    if first {
        COUNTED
            .get_or_create(&vec![("kind".to_string(), newer.kind.to_string())])
            .inc();
        tracing::warn!(kind = newer.kind, record = at, found = %newer.found, "{newer}; every other task goes on");
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantci_core::record_version::Kind;

    #[test]
    fn each_record_is_reported_once() {
        let k = Kind::new("newer_records_test", 1);
        let newer = k.check(Some(2)).unwrap_err();
        let count = || {
            COUNTED
                .get_or_create(&vec![("kind".into(), "newer_records_test".into())])
                .get()
        };
        assert!(report(&newer, "task.1"));
        assert!(!report(&newer, "task.1"), "once per record");
        assert!(report(&newer, "task.2"));
        assert_eq!(count(), 2);
    }
}
