//! The queue's JetStream topology: stream `CI_RUNNER` on `ci.runner.>`, one durable pull
//! consumer per backend, and the claim ledger's bucket (`ledger_bucket`), with the stream's
//! replica count.
//!
//! Each backend's consumer is named after it and filtered on its subject, so the topology
//! serves whichever backends the caller lists ([`TopologySpec::capacities`]) without naming
//! one.
//!
//! [`desired_stream`] and [`desired_consumer`] compute the configs as data (pure, unit-tested);
//! [`apply`] creates what is missing and updates what differs, so a re-run is a no-op and a
//! capacity change only updates that consumer's `max_ack_pending`.
//!
//! Invariants: work-queue retention (an acked message is deleted), file storage, discard-new
//! when full (the producer sees the error; nothing is dropped silently), explicit acks, and
//! `max_ack_pending` = the backend's capacity, so the server never has more than `capacity`
//! unacked deliveries out for a backend.

use std::time::Duration;

use async_nats::jetstream::{
    self,
    consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull},
    stream::{self, DiscardPolicy, RetentionPolicy, StorageType},
};
use serde::Serialize;

use super::history_bucket::{self, HistorySettings};
use super::{STREAM, STREAM_SUBJECTS, ledger_bucket};
use crate::backend_kind::BackendKind;

/// The knobs of the topology; everything else is fixed by design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySpec {
    /// Every backend's consumer, in order, with its capacity (its `max_ack_pending`); the
    /// first is the one whose live `max_deliver` a dispatcher keeps.
    pub capacities: Vec<(BackendKind, u32)>,
    /// Stream replicas: 1 on one server, 3 on a three-node NATS cluster.
    pub replicas: usize,
    /// How long a delivery may stay unacked (without progress) before it is redelivered.
    pub ack_wait: Duration,
    /// Deliveries of one message before the server gives up on it; -1: unlimited (the default:
    /// a transient failure costs latency, never the task; see docs/runbooks/nats-queue.md).
    pub max_deliver: i64,
    /// Window in which a re-published `Nats-Msg-Id` is dropped as a duplicate (>= 2 min).
    pub duplicate_window: Duration,
    /// Messages the stream may hold; at the bound a publish fails (discard-new).
    pub max_messages: i64,
    /// Bytes the stream may hold; at the bound a publish fails (discard-new).
    pub max_bytes: i64,
    /// Largest single assignment accepted.
    pub max_message_size: i32,
    /// The task history's bounds (the dispatcher's `[history]`; `queue init`'s flags).
    pub history: HistorySettings,
}

/// `max_deliver` for "redeliver until it succeeds" (JetStream's -1). Poison is terminated by
/// the worker at once, so only transient failures are retried, with backoff up to a minute.
pub const UNLIMITED_DELIVERIES: i64 = -1;

/// The smallest duplicate window accepted: a producer retrying a timed-out publish must land
/// inside it.
pub const MIN_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

impl Default for TopologySpec {
    fn default() -> Self {
        TopologySpec {
            capacities: Vec::new(),
            replicas: 1,
            ack_wait: Duration::from_secs(30),
            max_deliver: UNLIMITED_DELIVERIES,
            duplicate_window: MIN_DUPLICATE_WINDOW,
            max_messages: 100_000,
            max_bytes: 256 * 1024 * 1024,
            max_message_size: 1024 * 1024,
            history: HistorySettings::default(),
        }
    }
}

impl TopologySpec {
    /// Checks the spec before anything is sent to the server; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        if self.capacities.is_empty() {
            return Err(InvalidSpec::NoBackend);
        }
        if self.capacities.iter().any(|(_, c)| *c == 0) {
            return Err(InvalidSpec::Capacity);
        }
        if !(1..=5).contains(&self.replicas) {
            return Err(InvalidSpec::Replicas(self.replicas));
        }
        if self.ack_wait < Duration::from_millis(100) {
            return Err(InvalidSpec::AckWait);
        }
        if self.max_deliver < 1 && self.max_deliver != UNLIMITED_DELIVERIES {
            return Err(InvalidSpec::MaxDeliver);
        }
        if self.duplicate_window < MIN_DUPLICATE_WINDOW {
            return Err(InvalidSpec::DuplicateWindow);
        }
        if self.max_messages < 1 || self.max_bytes < 1 || self.max_message_size < 1 {
            return Err(InvalidSpec::Bounds);
        }
        self.history.validate().map_err(|_| InvalidSpec::History)?;
        Ok(())
    }

    /// `backend`'s capacity (0: the spec does not name it).
    pub fn capacity(&self, backend: BackendKind) -> u32 {
        self.capacities
            .iter()
            .find(|(b, _)| *b == backend)
            .map_or(0, |(_, c)| *c)
    }

    /// The backends, in order.
    pub fn backends(&self) -> impl Iterator<Item = BackendKind> + '_ {
        self.capacities.iter().map(|(b, _)| *b)
    }
}

/// The field of a [`TopologySpec`] that [`TopologySpec::validate`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpec {
    /// `capacities` is empty.
    #[error("the topology names no backend")]
    NoBackend,
    /// A backend's capacity is 0.
    #[error("a backend capacity must be at least 1")]
    Capacity,
    /// `replicas` is outside 1..=5 (the value given).
    #[error("replicas must be between 1 and 5, not {0}")]
    Replicas(usize),
    /// `ack_wait` is under 100 ms.
    #[error("ack_wait must be at least 100ms")]
    AckWait,
    /// `max_deliver` is below 1 and not -1 ([`UNLIMITED_DELIVERIES`]).
    #[error("max_deliver must be at least 1, or -1 for unlimited")]
    MaxDeliver,
    /// `duplicate_window` is under [`MIN_DUPLICATE_WINDOW`].
    #[error("the duplicate window must be at least 2m")]
    DuplicateWindow,
    /// A stream bound (`max_messages`, `max_bytes`, `max_message_size`) is below 1.
    #[error("the stream bounds must be positive")]
    Bounds,
    /// The history's bounds are out of range (`HistorySettings::validate` says which).
    #[error("the history must be kept at least 24h and for 1 to 1000000 tasks")]
    History,
}

/// `spec` with what `queue init` chose and a dispatcher must not undo: the replica count,
/// the stream's bounds and duplicate window (from the live stream), and `max_deliver` (from
/// the live consumer of the spec's first backend). The dispatcher's own settings (capacities,
/// ack_wait) stay as given. Nothing live: `spec` as it is.
pub fn keeping_init_choices(
    spec: TopologySpec,
    stream: Option<&stream::Config>,
    max_deliver: Option<i64>,
) -> TopologySpec {
    let mut spec = spec;
    if let Some(s) = stream {
        spec.replicas = s.num_replicas.max(1);
        spec.duplicate_window = s.duplicate_window.max(MIN_DUPLICATE_WINDOW);
        spec.max_messages = s.max_messages;
        spec.max_bytes = s.max_bytes;
        spec.max_message_size = s.max_message_size;
    }
    if let Some(m) = max_deliver {
        spec.max_deliver = m;
    }
    spec
}

/// The stream config for `spec`.
pub fn desired_stream(spec: &TopologySpec) -> stream::Config {
    stream::Config {
        name: STREAM.to_string(),
        description: Some("tenantci assignments (work queue)".to_string()),
        subjects: vec![STREAM_SUBJECTS.to_string()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        discard: DiscardPolicy::New,
        duplicate_window: spec.duplicate_window,
        max_messages: spec.max_messages,
        max_bytes: spec.max_bytes,
        max_message_size: spec.max_message_size,
        max_messages_per_subject: -1,
        max_consumers: -1,
        num_replicas: spec.replicas,
        deny_delete: false,
        deny_purge: false,
        ..Default::default()
    }
}

/// The durable pull consumer config for `backend`.
pub fn desired_consumer(spec: &TopologySpec, backend: BackendKind) -> pull::Config {
    pull::Config {
        durable_name: Some(backend.consumer().to_string()),
        name: Some(backend.consumer().to_string()),
        description: Some(format!("tenantci {backend} backend")),
        filter_subject: backend.subject().to_string(),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        replay_policy: ReplayPolicy::Instant,
        ack_wait: spec.ack_wait,
        max_deliver: spec.max_deliver,
        max_ack_pending: i64::from(spec.capacity(backend)),
        ..Default::default()
    }
}

/// The managed fields of the stream that differ between `desired` and the server's `actual`.
/// Fields we do not manage (server defaults) are ignored.
pub fn stream_drift(desired: &stream::Config, actual: &stream::Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut check = |name, same: bool| {
        if !same {
            out.push(name)
        }
    };
    check("subjects", desired.subjects == actual.subjects);
    check("retention", desired.retention == actual.retention);
    check("storage", desired.storage == actual.storage);
    check("discard", desired.discard == actual.discard);
    check(
        "duplicate_window",
        desired.duplicate_window == actual.duplicate_window,
    );
    check("max_msgs", desired.max_messages == actual.max_messages);
    check("max_bytes", desired.max_bytes == actual.max_bytes);
    check(
        "max_msg_size",
        desired.max_message_size == actual.max_message_size,
    );
    check("num_replicas", desired.num_replicas == actual.num_replicas);
    check("description", desired.description == actual.description);
    out
}

/// The managed fields of a consumer that differ between `desired` and the server's `actual`.
pub fn consumer_drift(
    desired: &pull::Config,
    actual: &async_nats::jetstream::consumer::Config,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut check = |name, same: bool| {
        if !same {
            out.push(name)
        }
    };
    check(
        "filter_subject",
        desired.filter_subject == actual.filter_subject,
    );
    check("ack_policy", desired.ack_policy == actual.ack_policy);
    check("ack_wait", desired.ack_wait == actual.ack_wait);
    check("max_deliver", desired.max_deliver == actual.max_deliver);
    check(
        "max_ack_pending",
        desired.max_ack_pending == actual.max_ack_pending,
    );
    check("description", desired.description == actual.description);
    out
}

/// What [`apply`] did to one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Change {
    /// It did not exist; it was created.
    Created,
    /// Managed fields differed; it was updated.
    Updated {
        /// The fields that differed, as [`stream_drift`], [`consumer_drift`] or
        /// [`ledger_drift`] name them.
        fields: Vec<String>,
    },
    /// It matched already; nothing was sent.
    Unchanged,
}

/// The result of [`apply`]; printed by `tenantci queue init -o json`.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    /// The stream's name ([`STREAM`]).
    pub stream: String,
    /// What was done to the stream.
    pub stream_change: Change,
    /// Each backend's consumer, in the spec's order.
    pub consumers: Vec<ConsumerChange>,
    /// The claim ledger's key-value bucket.
    pub ledger: String,
    /// What was done to the bucket's stream.
    pub ledger_change: Change,
    /// The task history's key-value bucket.
    pub history: String,
    /// What was done to the history bucket's stream.
    pub history_change: Change,
}

/// What [`apply`] did to one backend's durable consumer.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerChange {
    /// Its name: the backend's.
    pub consumer: String,
    /// Its capacity, set as `max_ack_pending`.
    pub capacity: u32,
    /// What was done to it.
    pub change: Change,
}

/// Errors from [`apply`].
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The spec was refused before anything was sent.
    #[error("invalid topology: {0}")]
    Invalid(#[from] InvalidSpec),
    /// `object` names what was asked for (`stream CI_RUNNER`, `consumer pod`): data shown to
    /// the operator, not a cause.
    #[error("cannot {action} the JetStream {object}: {source}")]
    Server {
        /// What was being done: `read`, `create`, `update`, `create or update`.
        action: &'static str,
        /// What it was done to.
        object: String,
        /// The failed request's error.
        #[source]
        source: ServerError,
    },
}

/// What a JetStream request of [`apply`] or [`live_configs`] failed with, typed by the call
/// (each async-nats error has its `kind()`, with the server's API error and code where it
/// answered one).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Looking the stream up.
    #[error(transparent)]
    GetStream(#[from] jetstream::context::GetStreamError),
    /// Reading a stream's info.
    #[error(transparent)]
    StreamInfo(#[from] stream::InfoError),
    /// Creating or updating a stream (async-nats has one error type for both).
    #[error(transparent)]
    CreateStream(#[from] jetstream::context::CreateStreamError),
    /// Reading or creating a consumer.
    #[error(transparent)]
    Consumer(#[from] stream::ConsumerError),
    /// Reading a consumer's info.
    #[error(transparent)]
    ConsumerInfo(#[from] jetstream::context::ConsumerInfoError),
}

fn server_err<E: Into<ServerError>>(
    action: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(E) -> ApplyError {
    let object = object.into();
    move |source| ApplyError::Server {
        action,
        object,
        source: source.into(),
    }
}

/// Connects to `url` as `user` and applies `spec` (`queue init`).
pub async fn apply_at(
    url: &str,
    user: &str,
    password_file: &std::path::Path,
    spec: &TopologySpec,
) -> tenantci_core::Result<ApplyReport> {
    let client = super::connect::connect(url, user, password_file).await?;
    let js = jetstream::new(client);
    apply(&js, spec).await.map_err(|e| {
        tenantci_core::Error::external(format!("cannot apply the queue topology at NATS {url}"))
            .caused_by(e)
            .hint(
            "run it as ci-admin with JetStream enabled; with --replicas N the cluster needs N servers",
        )
    })
}

/// The live stream config and the `reference` consumer's max_deliver; None where not created
/// yet. Any other error (no leader during an election, a timeout) is an error: guessing
/// "absent" then would overwrite what `queue init` chose.
pub async fn live_configs(
    js: &jetstream::Context,
    reference: BackendKind,
) -> Result<(Option<stream::Config>, Option<i64>), ApplyError> {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::context::GetStreamErrorKind;
    use async_nats::jetstream::stream::ConsumerErrorKind;
    let stream = match js.get_stream(STREAM).await {
        Ok(s) => Some(s.cached_info().config.clone()),
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            return Ok((None, None));
        }
        Err(e) => return Err(server_err("read", format!("stream {STREAM}"))(e)),
    };
    let consumer = match js
        .get_consumer_from_stream::<pull::Config, _, _>(reference.consumer(), STREAM)
        .await
    {
        Ok(c) => Some(c.cached_info().config.max_deliver),
        Err(e) if matches!(e.kind(), ConsumerErrorKind::JetStream(j) if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND) => {
            None
        }
        Err(e) => {
            let object = format!("consumer {}", reference.consumer());
            return Err(server_err("read", object)(e));
        }
    };
    Ok((stream, consumer))
}

/// Creates or updates the stream, every backend's consumer, the claim ledger's bucket and the
/// task history's bucket to match `spec` (needs `ci-admin`).
pub async fn apply(
    js: &jetstream::Context,
    spec: &TopologySpec,
) -> Result<ApplyReport, ApplyError> {
    spec.validate()?;
    let stream_change = apply_stream(
        js,
        desired_stream(spec),
        format!("stream {STREAM}"),
        stream_drift,
    )
    .await?;
    let mut consumers = Vec::new();
    for backend in spec.backends() {
        let want = desired_consumer(spec, backend);
        let change = match js
            .get_consumer_from_stream::<pull::Config, _, _>(backend.consumer(), STREAM)
            .await
        {
            Ok(mut existing) => {
                let info = existing.info().await.map_err(server_err(
                    "read",
                    format!("consumer {}", backend.consumer()),
                ))?;
                let drift = consumer_drift(&want, &info.config);
                if drift.is_empty() {
                    Change::Unchanged
                } else {
                    create_consumer(js, want, backend).await?;
                    Change::Updated {
                        fields: drift.into_iter().map(String::from).collect(),
                    }
                }
            }
            Err(e)
                if matches!(e.kind(), jetstream::stream::ConsumerErrorKind::JetStream(ref j)
                    if j.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND) =>
            {
                create_consumer(js, want, backend).await?;
                Change::Created
            }
            Err(e) => {
                return Err(server_err(
                    "read",
                    format!("consumer {}", backend.consumer()),
                )(e));
            }
        };
        consumers.push(ConsumerChange {
            consumer: backend.consumer().to_string(),
            capacity: spec.capacity(backend),
            change,
        });
    }
    Ok(ApplyReport {
        stream: STREAM.to_string(),
        stream_change,
        consumers,
        ledger: ledger_bucket::BUCKET.to_string(),
        ledger_change: apply_stream(
            js,
            ledger_bucket::desired_bucket(spec.replicas, spec.max_message_size, spec.max_bytes),
            format!("claim ledger {}", ledger_bucket::BUCKET),
            ledger_drift,
        )
        .await?,
        history: history_bucket::BUCKET.to_string(),
        history_change: apply_stream(
            js,
            history_bucket::desired_bucket(spec.replicas, &spec.history),
            format!("task history {}", history_bucket::BUCKET),
            history_bucket::drift,
        )
        .await?,
    })
}

/// The managed fields of the ledger's stream that differ from `desired`.
pub fn ledger_drift(desired: &stream::Config, actual: &stream::Config) -> Vec<&'static str> {
    [
        ("max_age", desired.max_age == actual.max_age),
        ("num_replicas", desired.num_replicas == actual.num_replicas),
        (
            "max_msg_size",
            desired.max_message_size == actual.max_message_size,
        ),
        ("max_bytes", desired.max_bytes == actual.max_bytes),
        (
            "history",
            desired.max_messages_per_subject == actual.max_messages_per_subject,
        ),
    ]
    .into_iter()
    .filter_map(|(field, same)| (!same).then_some(field))
    .collect()
}

/// Creates the stream `desired` names, or updates it when `drift` finds managed fields that
/// differ (the queue's stream, the claim ledger's bucket).
async fn apply_stream(
    js: &jetstream::Context,
    desired: stream::Config,
    object: String,
    drift: fn(&stream::Config, &stream::Config) -> Vec<&'static str>,
) -> Result<Change, ApplyError> {
    match js.get_stream(desired.name.clone()).await {
        Ok(mut existing) => {
            let info = existing
                .info()
                .await
                .map_err(server_err("read", object.clone()))?;
            let drift = drift(&desired, &info.config);
            if drift.is_empty() {
                return Ok(Change::Unchanged);
            }
            js.update_stream(desired)
                .await
                .map_err(server_err("update", object))?;
            Ok(Change::Updated {
                fields: drift.into_iter().map(String::from).collect(),
            })
        }
        Err(e)
            if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(ref j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
        {
            js.create_stream(desired)
                .await
                .map_err(server_err("create", object))?;
            Ok(Change::Created)
        }
        Err(e) => Err(server_err("read", object)(e)),
    }
}

async fn create_consumer(
    js: &jetstream::Context,
    config: pull::Config,
    backend: BackendKind,
) -> Result<(), ApplyError> {
    js.create_consumer_on_stream(config, STREAM)
        .await
        .map(|_| ())
        .map_err(server_err(
            "create or update",
            format!("consumer {}", backend.consumer()),
        ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dispatcher_keeps_the_bounds_and_deliveries_queue_init_chose() {
        let chosen = TopologySpec {
            replicas: 3,
            max_deliver: 5,
            max_messages: 10,
            max_bytes: 4096,
            max_message_size: 2048,
            duplicate_window: Duration::from_secs(600),
            ..TopologySpec::default()
        };
        let dispatcher = TopologySpec {
            capacities: vec![(BackendKind::new("pod"), 9)],
            ack_wait: Duration::from_secs(7),
            ..TopologySpec::default()
        };
        let live_stream = desired_stream(&chosen);
        let live_consumer = desired_consumer(&chosen, BackendKind::new("pod"));
        let kept = keeping_init_choices(
            dispatcher.clone(),
            Some(&live_stream),
            Some(live_consumer.max_deliver),
        );
        assert_eq!(
            kept,
            TopologySpec {
                capacities: vec![(BackendKind::new("pod"), 9)],
                ack_wait: Duration::from_secs(7),
                ..chosen
            }
        );
        assert_eq!(
            keeping_init_choices(dispatcher.clone(), None, None),
            dispatcher
        );
    }

    use super::*;
    use async_nats::jetstream::consumer::IntoConsumerConfig;

    #[test]
    fn stream_is_a_bounded_file_work_queue_with_discard_new() {
        let s = desired_stream(&TopologySpec::default());
        assert_eq!(s.name, "CI_RUNNER");
        assert_eq!(s.subjects, vec!["ci.runner.>"]);
        assert_eq!(s.retention, RetentionPolicy::WorkQueue);
        assert_eq!(s.storage, StorageType::File);
        assert_eq!(s.discard, DiscardPolicy::New);
        assert!(s.duplicate_window >= Duration::from_secs(120));
        assert!(s.max_messages > 0 && s.max_bytes > 0);
        assert_eq!(s.num_replicas, 1);
    }

    #[test]
    fn consumers_filter_their_subject_and_cap_in_flight_at_capacity() {
        let spec = TopologySpec {
            capacities: vec![(BackendKind::new("pod"), 4), (BackendKind::new("vm"), 1)],
            ..Default::default()
        };
        let pod = desired_consumer(&spec, BackendKind::new("pod"));
        assert_eq!(pod.durable_name.as_deref(), Some("pod"));
        assert_eq!(pod.filter_subject, "ci.runner.pod");
        assert_eq!(pod.ack_policy, AckPolicy::Explicit);
        assert_eq!(pod.max_ack_pending, 4);
        let vm = desired_consumer(&spec, BackendKind::new("vm"));
        assert_eq!(vm.filter_subject, "ci.runner.vm");
        assert_eq!(vm.max_ack_pending, 1);
    }

    #[test]
    fn a_capacity_change_is_drift_in_max_ack_pending_only() {
        let old = TopologySpec::default();
        let new = TopologySpec {
            capacities: vec![(BackendKind::new("pod"), 8)],
            ..old.clone()
        };
        let actual = desired_consumer(&old, BackendKind::new("pod")).into_consumer_config();
        assert_eq!(
            consumer_drift(&desired_consumer(&new, BackendKind::new("pod")), &actual),
            vec!["max_ack_pending"]
        );
        assert!(
            consumer_drift(&desired_consumer(&old, BackendKind::new("pod")), &actual).is_empty()
        );
        assert!(stream_drift(&desired_stream(&new), &desired_stream(&old)).is_empty());
    }

    #[test]
    fn replicas_are_drift_of_the_stream() {
        let three = TopologySpec {
            replicas: 3,
            ..Default::default()
        };
        assert_eq!(
            stream_drift(
                &desired_stream(&three),
                &desired_stream(&TopologySpec::default())
            ),
            vec!["num_replicas"]
        );
    }

    #[test]
    fn replicas_are_drift_of_the_claim_ledger_too() {
        let one = ledger_bucket::desired_bucket(1, 1024, 1 << 20);
        let three = ledger_bucket::desired_bucket(3, 1024, 1 << 20);
        assert!(ledger_drift(&one, &one).is_empty());
        assert_eq!(ledger_drift(&three, &one), vec!["num_replicas"]);
    }

    #[test]
    fn validate_names_the_bad_field() {
        // The default spec with two backends: the queue's floor does not know which exist.
        let spec = || TopologySpec {
            capacities: vec![(BackendKind::new("pod"), 4), (BackendKind::new("vm"), 1)],
            ..TopologySpec::default()
        };
        let bad = |f: fn(&mut TopologySpec)| {
            let mut s = spec();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert!(bad(|s| s.capacities = vec![(BackendKind::new("pod"), 0)]).contains("capacity"));
        assert!(bad(|s| s.capacities.clear()).contains("no backend"));
        assert!(bad(|s| s.replicas = 0).contains("replicas"));
        assert!(bad(|s| s.duplicate_window = Duration::from_secs(60)).contains("duplicate"));
        assert!(bad(|s| s.max_deliver = 0).contains("max_deliver"));
        spec().validate().unwrap();
    }
}
