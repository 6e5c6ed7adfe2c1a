//! A claimed task: everything the dispatcher holds about one task from the FetchTask that
//! returned it until Gitea accepted its final state. The one home of a task's state; the
//! backends, the scheduler and the facade call in here.
//!
//! - [`ledger`]: the claim ledger, a JetStream key-value entry per task: **the truth** of a
//!   task's state, the only part that survives a crash or a lost apiserver. Its phase only moves
//!   forward ([`ledger::merge`], pure).
//! - [`history`]: where a task's time went, kept beyond its life in its own bucket: one
//!   record per task, marks merged by whoever observes them ([`history::merge`], pure).
//! - [`mirror`]: the ledger as a local map the status API catches up with the writes since
//!   its last request (a view: decisions read the ledger itself).
//! - [`opened`]: the sealed assignment opened once (the Gitea task decoded, the class the
//!   scheduler picked resolved), re-opened only for a replacement's new attempt.
//! - [`spec`]: what every executor of the task gets, whatever its backend (`ExecutorSpec`:
//!   its size from the resource class, the capability, the SPIFFE ID, the cache grant), and
//!   the runner's files.
//! - [`registry`]: this leadership term's in-memory view (queued, running with its slot, its
//!   class slot, withdrawn): rebuilt from the ledger and the backends at every term.
//! - [`recovery`]: what a new term does with each ledger entry given which executor objects
//!   exist (pure); the reconciler (`backend::reconciler`) carries it out.
//! - [`report`]: what the dispatcher itself tells Gitea about a task (keep-alive, FAILURE).
//!
//! # States
//!
//! | state | ledger phase (truth) | caches of it | who moves it on |
//! |---|---|---|---|
//! | claimed | `claimed` | - | scheduler: FetchTask returned it |
//! | queued | `queued` | registry `queued` | scheduler: sealed and published |
//! | starting | `queued`, then `started` once created | the executor's objects exist, registry not yet `running` | worker: one executor per assignment, acked after |
//! | running, not fetched | `started` | registry `running` (holds a slot and its class slot) | backend: the executor runs; the reconciler's start deadline replaces it (attempt + 1) |
//! | running, fetched | `fetched` | pod: Secret annotation `tenantci.io/fetched-at`; VM: the ledger | facade: the first FetchTask hand-out |
//! | running, reported | `reported` (the sealed assignment dropped) | pod: the assignment consumed from the Secret | facade: the executor's first UpdateLog / UpdateTask |
//! | finished | `final` (with the result) | facade's finished set; the terminal marker (`tenantci.io/terminal`); registry forgets it | facade (Gitea accepted the final state) or the dispatcher's own FAILURE (`report`) |
//! | withdrawn | `final` (Gitea's CANCELLED) | registry `withdrawn` until the worker drops the assignment | keep-alive: Gitea ended a task no executor fetched |
//!
//! Where caches and the ledger disagree, the ledger wins: a new term reads it first
//! ([`recovery::decide`]), the worker drops an assignment the ledger has as final or
//! superseded, and the facade answers a replayed report from a final entry.
//!
//! # Recovery
//!
//! What happens to a task whose executor vanished is decided in one place,
//! [`recovery::decide`], from the ledger phase and what the backend still lists (nothing, a
//! partial start, a complete executor): before the executor fetched, it is started again as
//! the next attempt from the sealed assignment the ledger keeps (a slot taken first); after,
//! it is reported FAILURE (what it ran is unknown). The reconciler carries that out
//! (`backend::reconciler::lost`), and replaces executors past their start deadline
//! (`backend::reconciler::replace`, decided by `backend::lifecycle::start`).

pub mod history;
pub mod ledger;
pub mod mirror;
pub mod opened;
pub mod recovery;
pub mod registry;
pub mod report;
pub mod spec;

use serde::{Deserialize, Serialize};

use tenantci_core::duration::GoDuration;

/// How far an executor got with its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Progress {
    /// It has not called FetchTask yet.
    Unfetched,
    /// It fetched its task, and has not reported yet.
    Fetched,
    /// It reported: its assignment is consumed.
    Reported,
}

/// The `[claim]` section: what happens to a claimed task whose executor never fetches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// How long an executor may take from creation to its first FetchTask before it is
    /// replaced by a new attempt (image pull stuck, crash loop, sandbox never boots).
    #[serde(default = "defaults::start_deadline")]
    pub start_deadline: GoDuration,
    /// Attempts before the task is reported as FAILURE (1: no replacement).
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
}

impl Default for Claim {
    fn default() -> Self {
        Claim {
            start_deadline: defaults::start_deadline(),
            max_attempts: defaults::max_attempts(),
        }
    }
}

/// The section's defaults (`init` uses them for keys it has no flag for).
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// 3 attempts: one retry for a bad node, a second for bad luck; a third failure is the
    /// image or the job, and more attempts would only delay the FAILURE the user must see.
    pub fn max_attempts() -> u32 {
        3
    }
    /// 3 min: a node rental plus a cold image pull take 30-90 s, so a healthy start has
    /// twice that; a stuck one is replaced well inside Gitea's 10-minute zombie limit (the
    /// keep-alive keeps the task open meanwhile, so the limit is never the one that bites).
    pub fn start_deadline() -> GoDuration {
        Duration::from_secs(180).into()
    }
}
