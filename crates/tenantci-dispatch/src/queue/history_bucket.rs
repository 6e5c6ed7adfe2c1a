//! The task history's bucket (`CI_HISTORY`): a JetStream key-value bucket with one record per
//! task (`task.<id>`, one revision kept), bounded by age and by count; the bounds are the
//! config's `[history]` section ([`HistorySettings`]). What a record holds and how it is
//! written is the task's (`task::history`); this is only where it lives and how big it may
//! grow. At the count bound the oldest record goes (discard-old): the newest tasks matter.

use std::time::Duration;

use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use serde::{Deserialize, Serialize};
use tenantci_core::duration::GoDuration;

/// The bucket's name; its stream is `KV_CI_HISTORY`, its subjects `$KV.CI_HISTORY.>`.
pub const BUCKET: &str = "CI_HISTORY";
/// The largest record accepted: a record is a few hundred bytes (ids, names, nine times).
pub const MAX_RECORD: i32 = 8 * 1024;

/// The stream behind the bucket.
pub fn stream_name() -> String {
    format!("KV_{BUCKET}")
}

/// The subjects a record is written to (`$KV.CI_HISTORY.task.<id>`).
pub fn subjects() -> String {
    format!("$KV.{BUCKET}.>")
}

/// The `[history]` section: how long and how many finished tasks' histories are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySettings {
    /// A record is dropped this long after its last write; absent: 168h (a week).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<GoDuration>,
    /// At most this many tasks' records, the oldest dropped first; absent: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tasks: Option<i64>,
}

/// `max_age` when absent.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// `max_tasks` when absent.
pub const DEFAULT_MAX_TASKS: i64 = 10_000;
/// The largest `max_tasks` accepted (a million records of ~0.5 KiB: ~0.5 GiB on disk).
pub const MAX_TASKS_LIMIT: i64 = 1_000_000;

impl HistorySettings {
    /// Neither bound is set (the config then writes no `[history]`).
    pub fn is_default(&self) -> bool {
        *self == HistorySettings::default()
    }

    /// `max_age`, or its default.
    pub fn max_age(&self) -> Duration {
        self.max_age
            .as_ref()
            .map_or(DEFAULT_MAX_AGE, GoDuration::get)
    }

    /// `max_tasks`, or its default.
    pub fn max_tasks(&self) -> i64 {
        self.max_tasks.unwrap_or(DEFAULT_MAX_TASKS)
    }

    /// The bounds are usable: one sentence naming the key and the accepted range otherwise.
    pub fn validate(&self) -> Result<(), String> {
        // A record's age counts from its last write, so an age shorter than a job runs could
        // drop a running task's earlier marks; a day outlasts the forges' job timeouts.
        if self.max_age() < Duration::from_secs(24 * 3600) {
            return Err(format!(
                "has history.max_age = `{}`; keep a task's history at least 24h, longer than any job runs (for example `168h`)",
                self.max_age.as_ref().map_or("", GoDuration::as_str)
            ));
        }
        if !(1..=MAX_TASKS_LIMIT).contains(&self.max_tasks()) {
            return Err(format!(
                "has history.max_tasks = {}; it must be between 1 and {MAX_TASKS_LIMIT}",
                self.max_tasks()
            ));
        }
        Ok(())
    }
}

/// The bucket's stream for `replicas` and `bounds` (pure). Made directly, as the claim
/// ledger's bucket is (`ledger_bucket::desired_bucket` says why).
pub fn desired_bucket(replicas: usize, bounds: &HistorySettings) -> stream::Config {
    stream::Config {
        name: stream_name(),
        description: Some("tenantci task history: one record per task".to_string()),
        subjects: vec![subjects()],
        max_messages_per_subject: 1,
        max_messages: bounds.max_tasks(),
        max_bytes: -1,
        max_age: bounds.max_age(),
        max_message_size: MAX_RECORD,
        storage: StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: true,
        num_replicas: replicas,
        discard: DiscardPolicy::Old,
        ..Default::default()
    }
}

/// The managed fields of the bucket's stream that differ from `desired`.
pub fn drift(desired: &stream::Config, actual: &stream::Config) -> Vec<&'static str> {
    [
        ("max_age", desired.max_age == actual.max_age),
        ("max_msgs", desired.max_messages == actual.max_messages),
        ("num_replicas", desired.num_replicas == actual.num_replicas),
    ]
    .into_iter()
    .filter_map(|(field, same)| (!same).then_some(field))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_keeps_one_record_per_task_within_the_configured_bounds() {
        let bounds = HistorySettings {
            max_age: Some("2h".parse().unwrap()),
            max_tasks: Some(50),
        };
        let b = desired_bucket(3, &bounds);
        assert_eq!(b.name, "KV_CI_HISTORY");
        assert_eq!(b.max_messages_per_subject, 1);
        assert_eq!(b.max_messages, 50);
        assert_eq!(b.max_age, Duration::from_secs(7200));
        assert_eq!(b.discard, DiscardPolicy::Old, "the newest tasks are kept");
        assert_eq!(
            drift(&b, &desired_bucket(3, &HistorySettings::default())),
            vec!["max_age", "max_msgs"]
        );
    }

    #[test]
    fn bounds_out_of_range_are_one_sentence_naming_the_key() {
        let d = HistorySettings::default();
        assert!(d.validate().is_ok());
        assert_eq!(
            (d.max_age(), d.max_tasks()),
            (DEFAULT_MAX_AGE, DEFAULT_MAX_TASKS)
        );
        let e = HistorySettings {
            max_tasks: Some(0),
            ..d.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("history.max_tasks = 0"), "{e}");
        let e = HistorySettings {
            max_age: Some("10s".parse().unwrap()),
            ..d
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("history.max_age = `10s`"), "{e}");
    }
}
