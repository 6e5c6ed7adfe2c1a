//! The JetStream job queue between the Gitea dispatcher's scheduler and its backends.
//!
//! - [`topology`]: the stream `CI_RUNNER` and the durable pull consumers `pod` / `vm`, computed
//!   as data and applied idempotently (create or update).
//! - [`permissions`]: the nats-server `authorization` fragment for `ci-admin`, `ci-producer`
//!   and `ci-worker`, with bcrypt hashes, and the password files behind it.
//! - [`assignment`]: the message on the queue, versioned JSON with the task payload sealed by a
//!   key only the dispatcher holds.
//! - [`producer`] / [`consumer`]: publish with dedupe; pull only as many as there are free slots.
//! - [`connect`]: a client with user/password from a file and the user's own inbox prefix.
//! - [`status`]: `queue status`, what each backend's consumer holds.
//! - [`ledger_bucket`]: where the claim ledger lives (its entries are `task::ledger`'s).
//!
//! Does not talk to Gitea or Kubernetes, and does not know what a task's state is (`task`).

pub mod assignment;
pub mod connect;
pub mod consumer;
pub mod ledger_bucket;
pub mod permissions;
pub mod producer;
pub mod status;
pub mod topology;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The stream that holds every assignment.
pub const STREAM: &str = "CI_RUNNER";
/// The subjects the stream captures.
pub const STREAM_SUBJECTS: &str = "ci.runner.>";

/// Where an assignment runs; each backend has its own subject, durable consumer and capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A Kubernetes executor Pod on the tenant cluster.
    Pod,
    /// A VM sandbox.
    Vm,
}

impl BackendKind {
    pub const ALL: [BackendKind; 2] = [BackendKind::Pod, BackendKind::Vm];

    /// The durable consumer name (`pod` / `vm`).
    pub fn consumer(self) -> &'static str {
        match self {
            BackendKind::Pod => "pod",
            BackendKind::Vm => "vm",
        }
    }

    /// What turns this backend on, for the sentence that refuses a job asking for it.
    pub fn turned_on_by(self) -> &'static str {
        match self {
            BackendKind::Pod => "it is always on",
            BackendKind::Vm => "no `--opensandbox-url` at `dispatch init`",
        }
    }

    /// The subject assignments for this backend are published on.
    pub fn subject(self) -> &'static str {
        match self {
            BackendKind::Pod => "ci.runner.pod",
            BackendKind::Vm => "ci.runner.vm",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.consumer())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pod" => Ok(BackendKind::Pod),
            "vm" => Ok(BackendKind::Vm),
            other => Err(format!(
                "unknown backend `{other}` (expected `pod` or `vm`)"
            )),
        }
    }
}

/// The users of the generated nats-server configuration.
pub mod users {
    /// Creates and updates the stream and consumers.
    pub const ADMIN: &str = "ci-admin";
    /// Publishes assignments, nothing else.
    pub const PRODUCER: &str = "ci-producer";
    /// Pulls and acks on the two consumers, nothing else.
    pub const WORKER: &str = "ci-worker";
    pub const ALL: [&str; 3] = [ADMIN, PRODUCER, WORKER];

    /// The inbox prefix a user's client must set (`_INBOX_<user>`): each user may only
    /// subscribe below its own prefix, so no user can read another's replies.
    pub fn inbox_prefix(user: &str) -> String {
        format!("_INBOX_{user}")
    }
}
