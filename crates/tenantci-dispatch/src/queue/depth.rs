//! What each backend's consumer holds, read from JetStream: the report of `queue status`
//! ([`read`]), and the queue depth the scheduler and the status API count ([`depth`],
//! [`depth_now`]).

use std::path::Path;

use async_nats::jetstream::consumer::PullConsumer;
use serde::Serialize;
use tenantci_core::{Error, Result};

use super::{STREAM, connect};
use crate::backend_kind::BackendKind;

/// `queue status -o json`.
#[derive(Debug, Serialize)]
pub struct StatusReport {
    /// The stream's name ([`STREAM`]).
    pub stream: String,
    /// One per backend asked for, in that order.
    pub consumers: Vec<ConsumerStatus>,
}

/// One backend's durable consumer, as JetStream reports it.
#[derive(Debug, Serialize)]
pub struct ConsumerStatus {
    /// Its name: the backend's.
    pub consumer: String,
    /// Assignments waiting for a free slot.
    pub pending: u64,
    /// Delivered and not yet acked.
    pub in_flight: usize,
    /// max_ack_pending.
    pub capacity: i64,
    /// Delivered more than once and not acked yet (JetStream's `num_redelivered`).
    pub redelivered: usize,
    /// Pull requests waiting at the server.
    pub waiting_pulls: usize,
}

/// A backend's queue depth, as the scheduler and the status API count it: the assignments
/// waiting for a slot and those delivered and not acked yet (being started).
pub fn depth(info: &async_nats::jetstream::consumer::Info) -> u64 {
    info.num_pending + info.num_ack_pending as u64
}

/// `backend`'s depth now: one consumer info request (None: NATS did not answer it).
pub async fn depth_now(js: &async_nats::jetstream::Context, backend: BackendKind) -> Option<u64> {
    let c: PullConsumer = js
        .get_consumer_from_stream(backend.consumer(), STREAM)
        .await
        .ok()?;
    Some(depth(c.cached_info()))
}

/// Connects as `user` and reads the consumer of each of `backends`.
pub async fn read(
    url: &str,
    user: &str,
    password_file: &Path,
    backends: &[BackendKind],
) -> Result<StatusReport> {
    let client = connect::connect(url, user, password_file).await?;
    let js = async_nats::jetstream::new(client);
    let mut consumers = Vec::new();
    for b in backends {
        let mut c: PullConsumer = js
            .get_consumer_from_stream(b.consumer(), STREAM)
            .await
            .map_err(|e| {
                Error::external(format!("NATS at {url}: cannot read the consumer `{}` of stream {STREAM}", b.consumer())).caused_by(e)
                .hint("create the topology with `tenantci queue init`; status needs ci-admin or ci-worker")
            })?;
        let info = c.info().await.map_err(|e| {
            Error::external(format!(
                "cannot read the consumer `{}` of stream {STREAM} at NATS {url}",
                b.consumer()
            ))
            .caused_by(e)
        })?;
        consumers.push(ConsumerStatus {
            consumer: b.consumer().to_string(),
            pending: info.num_pending,
            in_flight: info.num_ack_pending,
            capacity: info.config.max_ack_pending,
            redelivered: info.num_redelivered,
            waiting_pulls: info.num_waiting,
        });
    }
    Ok(StatusReport {
        stream: STREAM.to_string(),
        consumers,
    })
}
