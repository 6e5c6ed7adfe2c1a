//! The JetStream job queue between the Gitea dispatcher's scheduler and its backends.
//!
//! - [`topology`]: the stream `CI_RUNNER` and one durable pull consumer per backend (named
//!   after it), computed as data and applied idempotently (create or update).
//! - [`permissions`]: the nats-server `authorization` fragment for `ci-admin`, `ci-producer`
//!   and `ci-worker`, with bcrypt hashes, and the password files behind it.
//! - [`assignment`]: the message on the queue, versioned JSON with the task payload sealed by a
//!   key only the dispatcher holds.
//! - [`producer`] / [`consumer`]: publish with dedupe; pull only as many as there are free slots.
//! - [`connect`]: a client with user/password from a file and the user's own inbox prefix.
//! - [`depth`]: `queue status` and the scheduler's depth: what each backend's consumer holds.
//! - [`ledger_bucket`]: where the claim ledger lives (its entries are `task::ledger`'s).
//! - [`history_bucket`]: where the task history lives and its bounds (its records are
//!   `task::history`'s).
//!
//! Does not talk to Gitea or Kubernetes, and does not know what a task's state is (`task`).

pub mod assignment;
pub mod connect;
pub mod consumer;
pub mod depth;
pub mod history_bucket;
pub mod ledger_bucket;
pub mod permissions;
pub mod producer;
pub mod topology;

/// The stream that holds every assignment.
pub const STREAM: &str = "CI_RUNNER";
/// The subjects the stream captures.
pub const STREAM_SUBJECTS: &str = "ci.runner.>";

/// The users of the generated nats-server configuration.
pub mod users {
    /// Creates and updates the stream and consumers.
    pub const ADMIN: &str = "ci-admin";
    /// Publishes assignments, nothing else.
    pub const PRODUCER: &str = "ci-producer";
    /// Pulls and acks on the backends' consumers, nothing else.
    pub const WORKER: &str = "ci-worker";
    /// Every user, in the order the `authorization` fragment lists them.
    pub const ALL: [&str; 3] = [ADMIN, PRODUCER, WORKER];

    /// The inbox prefix a user's client must set (`_INBOX_<user>`): each user may only
    /// subscribe below its own prefix, so no user can read another's replies.
    pub fn inbox_prefix(user: &str) -> String {
        format!("_INBOX_{user}")
    }
}
