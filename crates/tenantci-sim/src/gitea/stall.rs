//! The Gitea double's stall switch (`POST /admin/stall {"millis": N}`): for N ms the double
//! answers no RunnerService call, as a Gitea frozen by a database lock or SIGSTOP. A call
//! arriving meanwhile is served when the stall ends. A FetchTask is served then even when its
//! client gave up waiting (the thaw serves it, not the client's request): Gitea processes a
//! request it read whether or not the answer still has a reader, and so claims a task for a
//! runner that will never hear of it. That is the case the dispatcher's FetchTask timeout must
//! not create.
//!
//! Never used in production paths.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use tenantci_core::forge::gitea::ConnectError;
use tenantci_core::forge::gitea::proto::{FetchTaskRequest, FetchTaskResponse};

/// A FetchTask that arrived during the stall, served at the thaw.
pub struct HeldFetch {
    pub caller: i64,
    pub request: FetchTaskRequest,
    pub request_key: Option<String>,
    pub answer: oneshot::Sender<Result<FetchTaskResponse, ConnectError>>,
}

struct Stalled {
    until: Instant,
    fetches: Vec<HeldFetch>,
}

#[derive(Default)]
pub struct Stall {
    inner: Mutex<Option<Stalled>>,
}

impl Stall {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Stalled>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a stall of `duration`; returns when it ends. The caller serves
    /// [`Stall::thaw`]'s fetches then.
    pub fn start(&self, duration: Duration) -> Instant {
        let until = Instant::now() + duration;
        let mut g = self.lock();
        match g.as_mut() {
            Some(s) => s.until = s.until.max(until),
            None => {
                *g = Some(Stalled {
                    until,
                    fetches: Vec::new(),
                })
            }
        }
        until
    }

    /// Waits out a stall in progress (the stall itself, not a synchronisation).
    pub async fn wait_out(&self) {
        let until = self.lock().as_ref().map(|s| s.until);
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Holds a FetchTask while stalled: the answer comes at the thaw. None: not stalled.
    pub fn hold_fetch(
        &self,
        caller: i64,
        request: &FetchTaskRequest,
        request_key: Option<&str>,
    ) -> Option<oneshot::Receiver<Result<FetchTaskResponse, ConnectError>>> {
        let mut g = self.lock();
        let s = g.as_mut().filter(|s| Instant::now() < s.until)?;
        let (answer, rx) = oneshot::channel();
        s.fetches.push(HeldFetch {
            caller,
            request: request.clone(),
            request_key: request_key.map(str::to_string),
            answer,
        });
        Some(rx)
    }

    /// Ends the stall if its time has come; the fetches held meanwhile, to be served now.
    pub fn thaw(&self) -> Vec<HeldFetch> {
        let mut g = self.lock();
        match g.as_ref() {
            Some(s) if Instant::now() >= s.until => g.take().map(|s| s.fetches).unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}
