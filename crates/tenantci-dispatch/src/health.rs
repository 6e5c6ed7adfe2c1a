//! What readiness reports (`/readyz`): whether the facade is serving (ready only while it is),
//! and whether this instance leads. Set by `run`; read by the status API and by the webhook
//! receiver, which nudges the scheduler only on the leader.

use std::sync::atomic::AtomicBool;

/// Readiness, shared by `run` (which sets it), the status API and the webhook receiver (which
/// read it). `Default`: both false.
#[derive(Default)]
pub struct Health {
    /// The facade serves: set once it listens, cleared when draining. `/readyz` answers 503
    /// while false.
    pub facade_up: AtomicBool,
    /// This instance holds the scheduler lease. Reported by `/readyz` without failing it; the
    /// webhook receiver nudges the scheduler only while true.
    pub leader: AtomicBool,
}
