//! What readiness reports (`/readyz`): the facade is serving, and this instance leads. Set by
//! `run` and the webhook receiver, read by the status API.

use std::sync::atomic::AtomicBool;

#[derive(Default)]
pub struct Health {
    pub facade_up: AtomicBool,
    pub leader: AtomicBool,
}
