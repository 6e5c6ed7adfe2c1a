//! Publishes assignments (as `ci-producer`): `Nats-Msg-Id` = task id + attempt, the PubAck
//! awaited, a timed-out publish retried with the same Msg-Id (the stream's duplicate window
//! makes the retry safe), and a duplicate reported as such rather than hidden.
//!
//! A full stream (discard-new) is [`PublishError::Full`]: the caller must not treat the task as
//! queued (for Gitea: do not claim more until the queue drains).

use std::time::Duration;

use async_nats::jetstream::{
    self,
    context::{PublishError as NatsPublishError, PublishErrorKind},
    message::PublishMessage,
};

use super::assignment::Assignment;

/// How a publish ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The stream stored it.
    Stored {
        /// The stream sequence it was stored at.
        sequence: u64,
    },
    /// The same task id + attempt was already in the stream inside the duplicate window; the
    /// stream kept the first copy (its sequence).
    Duplicate {
        /// The first copy's stream sequence.
        sequence: u64,
    },
}

/// Why an assignment was not stored. Each variant keeps what async-nats answered as its source
/// ([`PublishError::nats`]): its [`PublishErrorKind`], and for a refusal the JetStream API
/// error with its code ([`PublishError::api_error`]).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The stream is at a bound (discard-new).
    #[error(
        "the queue is full ({}); the assignment `{msg_id}` was not stored",
        server_words(source)
    )]
    Full {
        /// The assignment's Msg-Id ([`Assignment::msg_id`]).
        msg_id: String,
        /// What async-nats answered.
        #[source]
        source: NatsPublishError,
    },
    /// Nothing captured the subject: the stream is missing, or (in a cluster) its raft group is
    /// electing a leader.
    #[error("the stream CI_RUNNER does not exist; the assignment `{msg_id}` was not stored")]
    NoStream {
        /// The assignment's Msg-Id ([`Assignment::msg_id`]).
        msg_id: String,
        /// What async-nats answered (stream not found).
        #[source]
        source: NatsPublishError,
    },
    /// Every attempt timed out; the source is the last one's error.
    #[error("no PubAck for the assignment `{msg_id}` after {attempts} attempts")]
    TimedOut {
        /// The assignment's Msg-Id ([`Assignment::msg_id`]).
        msg_id: String,
        /// Attempts made, each timed out.
        attempts: u32,
        /// The last attempt's timeout.
        #[source]
        source: NatsPublishError,
    },
    /// JetStream refused it for another reason (its words are in the message); publishing it again
    /// will not help.
    #[error(
        "JetStream refused the assignment `{msg_id}`: {}",
        server_words(source)
    )]
    Rejected {
        /// The assignment's Msg-Id ([`Assignment::msg_id`]).
        msg_id: String,
        /// What async-nats answered, the server's API error inside.
        #[source]
        source: NatsPublishError,
    },
}

impl PublishError {
    /// Whether publishing the same assignment again later may succeed. A cluster answers "no
    /// responders" (which async-nats reports as stream-not-found) while a stream's raft group
    /// elects a new leader after a server died, and a full stream drains as backends work:
    /// neither says the task cannot be queued. A refusal with a reason does.
    pub fn is_transient(&self) -> bool {
        !matches!(self, PublishError::Rejected { .. })
    }

    /// What async-nats answered (the last attempt's, for [`PublishError::TimedOut`]).
    pub fn nats(&self) -> &NatsPublishError {
        match self {
            PublishError::Full { source, .. }
            | PublishError::NoStream { source, .. }
            | PublishError::TimedOut { source, .. }
            | PublishError::Rejected { source, .. } => source,
        }
    }

    /// async-nats's kind of the failure.
    pub fn kind(&self) -> PublishErrorKind {
        self.nats().kind()
    }

    /// The JetStream API error the server answered with (its code: `error_code()`), when it
    /// answered one.
    pub fn api_error(&self) -> Option<&jetstream::Error> {
        api_error(self.nats())
    }

    /// The tenantci error (exit 3, with a hint) for a command to return.
    pub fn into_error(self) -> tenantci_core::Error {
        let hint = match &self {
            PublishError::Full { .. } => {
                "wait for the backends to drain the queue, or raise the stream bounds with `tenantci queue init`"
            }
            PublishError::NoStream { .. } => "create it with `tenantci queue init`",
            _ => "check that nats-server is up and JetStream is enabled",
        };
        tenantci_core::Error::external(self.to_string()).hint(hint)
    }
}

/// Publishes assignments with dedupe and bounded retries.
#[derive(Clone)]
pub struct Producer {
    js: jetstream::Context,
    attempts: u32,
}

impl Producer {
    /// Default PubAck timeout per attempt.
    pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default attempts (first try + retries on timeout).
    pub const ATTEMPTS: u32 = 3;

    /// A producer with the defaults [`Self::ACK_TIMEOUT`] and [`Self::ATTEMPTS`].
    pub fn new(client: async_nats::Client) -> Self {
        Self::with_timeout(client, Self::ACK_TIMEOUT, Self::ATTEMPTS)
    }

    /// A producer that waits `ack_timeout` for each PubAck and tries at most `attempts` times (at
    /// least once).
    pub fn with_timeout(client: async_nats::Client, ack_timeout: Duration, attempts: u32) -> Self {
        let js = jetstream::ContextBuilder::new()
            .timeout(ack_timeout)
            .ack_timeout(ack_timeout)
            .build(client);
        Producer {
            js,
            attempts: attempts.max(1),
        }
    }

    /// Publishes `a` on its backend's subject and waits for the stream to store it.
    pub async fn publish(&self, a: &Assignment) -> Result<Published, PublishError> {
        let msg_id = a.msg_id();
        let payload = bytes::Bytes::from(a.to_json());
        let mut last = None;
        for attempt in 1..=self.attempts {
            let sent = self
                .js
                .send_publish(
                    a.backend.subject(),
                    PublishMessage::build()
                        .payload(payload.clone())
                        .message_id(msg_id.as_str()),
                )
                .await;
            let result = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match result {
                Ok(ack) if ack.duplicate => {
                    tracing::info!(
                        msg_id,
                        sequence = ack.sequence,
                        "assignment was already queued (duplicate)"
                    );
                    return Ok(Published::Duplicate {
                        sequence: ack.sequence,
                    });
                }
                Ok(ack) => {
                    return Ok(Published::Stored {
                        sequence: ack.sequence,
                    });
                }
                Err(e) if e.kind() == PublishErrorKind::TimedOut => {
                    tracing::warn!(
                        msg_id,
                        attempt,
                        "no PubAck in time; publishing again with the same Msg-Id"
                    );
                    last = Some(e);
                    continue;
                }
                Err(source) if source.kind() == PublishErrorKind::StreamNotFound => {
                    return Err(PublishError::NoStream { msg_id, source });
                }
                Err(source) if is_full(&server_words(&source)) => {
                    return Err(PublishError::Full { msg_id, source });
                }
                Err(source) => return Err(PublishError::Rejected { msg_id, source }),
            }
        }
        Err(PublishError::TimedOut {
            msg_id,
            attempts: self.attempts,
            source: last.expect("at least one attempt, each timed out"),
        })
    }
}

/// The JetStream API error inside an async-nats publish error, when the server answered one.
fn api_error(e: &NatsPublishError) -> Option<&jetstream::Error> {
    std::error::Error::source(e)?.downcast_ref()
}

/// The server's own words for a failed publish: its API error (description, status and error
/// code) when it answered one, else what async-nats says.
fn server_words(e: &NatsPublishError) -> String {
    std::error::Error::source(e)
        .map(|s| s.to_string())
        .unwrap_or_else(|| e.to_string())
}

/// Whether a JetStream publish error means the stream hit a bound with discard-new. Read from
/// the server's words ([`server_words`]), the one place that says which bound: nats-server
/// answers a bound reached with its generic store-failed error code (10077), the code of
/// other store failures too.
fn is_full(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("maximum messages exceeded")
        || t.contains("maximum bytes exceeded")
        || t.contains("insufficient resources")
        || t.contains("resource limits exceeded")
}

#[cfg(test)]
mod tests {
    #[test]
    fn recognises_discard_new_errors() {
        assert!(super::is_full("maximum messages exceeded (10077)"));
        assert!(super::is_full("Maximum Bytes Exceeded"));
        assert!(!super::is_full("stream not found"));
    }
}
