//! A barrier for runner creations: while held, each `POST /api/v4/user/runners` is counted
//! on arrival and answered only once the test releases them, so a test can line up two
//! writers at the exact moment one has asked GitLab to create a runner.

use tokio::sync::watch;

/// Shared by the double's handler and the test; clones see the same barrier.
#[derive(Debug, Clone)]
pub struct CreateHold {
    /// Creation requests that reached the barrier so far.
    arrived: watch::Sender<usize>,
    released: watch::Sender<bool>,
}

impl Default for CreateHold {
    fn default() -> Self {
        CreateHold {
            arrived: watch::Sender::new(0),
            released: watch::Sender::new(false),
        }
    }
}

impl CreateHold {
    /// Counts of arrived creation requests, to wait on with `wait_for` / `changed`.
    pub fn arrivals(&self) -> watch::Receiver<usize> {
        self.arrived.subscribe()
    }

    /// Lets every held request (and every later one) through.
    pub fn release(&self) {
        self.released.send_replace(true);
    }

    /// The handler's side: counted, then parked until [`CreateHold::release`].
    pub(super) async fn pass(&self) {
        self.arrived.send_modify(|n| *n += 1);
        let mut released = self.released.subscribe();
        let _ = released.wait_for(|open| *open).await;
    }
}
