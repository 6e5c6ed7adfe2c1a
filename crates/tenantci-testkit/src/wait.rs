//! Waiting for a condition that has no event to wait on: poll it, bounded by [`DEADLINE`].
//!
//! The bound is a deadlock guard, never a timing assertion: a test that needs longer on a slow
//! machine is not wrong. Where an event exists (a ready line, a channel, a watch), wait for
//! the event instead.

use std::future::Future;
use std::time::{Duration, Instant};

/// Bounds every wait in the tests and benchmarks.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Pause between two polls.
const POLL: Duration = Duration::from_millis(25);

/// Polls `f` until it yields `Some`; panics naming `what` after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for code outside an async runtime (starting a process, in a sync test).
pub fn eventually_blocking<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(POLL);
    }
}
