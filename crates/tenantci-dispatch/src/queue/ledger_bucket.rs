//! The claim ledger's bucket as the queue's topology creates it and its permissions name it: a
//! JetStream key-value bucket (its stream `KV_CI_CLAIMS`). What an entry holds and how it is
//! written is the task's (`task::ledger`); this is only where it lives.

use std::time::Duration;

use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};

/// The bucket's name; its stream is `KV_CI_CLAIMS`, its subjects `$KV.CI_CLAIMS.>`.
pub const BUCKET: &str = "CI_CLAIMS";
/// How long an entry lives after its last write (24 h; why: `task::ledger`'s header).
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Room for an entry's own fields around the largest assignment the queue takes.
pub const ENTRY_OVERHEAD: i32 = 64 * 1024;
/// The stream behind the bucket.
pub fn stream_name() -> String {
    format!("KV_{BUCKET}")
}
/// The subjects an entry is written to (`$KV.CI_CLAIMS.task.<id>`).
pub fn subjects() -> String {
    format!("$KV.{BUCKET}.>")
}
/// The bucket's stream for `replicas`, the queue's largest assignment and byte bound (pure).
/// The stream a JetStream key-value bucket is (what `nats kv add` creates), made directly:
/// async-nats' bucket creation first asks for account limits in a shape nats-server 2.9 does
/// not answer with.
pub fn desired_bucket(replicas: usize, max_assignment: i32, max_bytes: i64) -> stream::Config {
    stream::Config {
        name: stream_name(),
        description: Some("tenantci claim ledger: one entry per claimed task".to_string()),
        subjects: vec![subjects()],
        max_messages_per_subject: 1,
        max_messages: -1,
        max_bytes,
        max_age: RETENTION,
        max_message_size: max_assignment.saturating_add(ENTRY_OVERHEAD),
        storage: StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: true,
        num_replicas: replicas,
        discard: DiscardPolicy::New,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_keeps_one_revision_for_the_retention_with_the_queues_replicas() {
        let b = desired_bucket(3, 1024 * 1024, 1 << 28);
        assert_eq!(b.name, "KV_CI_CLAIMS");
        assert_eq!(b.subjects, vec!["$KV.CI_CLAIMS.>"]);
        assert_eq!(b.max_messages_per_subject, 1, "one revision per key");
        assert_eq!(b.max_age, RETENTION);
        assert_eq!(b.num_replicas, 3);
        assert!(b.max_message_size > 1024 * 1024);
        assert!(b.allow_direct, "entries are read with direct get");
    }
}
