//! A forge double's HTTP server on a bound listener, stopped gracefully or aborted: one
//! implementation for the Gitea and OpenSandbox doubles.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A serving router. Dropping it without [`Served::shutdown`] aborts the server.
pub struct Served {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Served {
    /// Serves `app` on `listener`; `what` names the double in a log line if serving fails.
    pub fn spawn(listener: TcpListener, app: Router, what: &'static str) -> Served {
        Self::counting(listener, app, what, Arc::default())
    }

    /// As [`Served::spawn`], counting the TCP connections accepted in `accepted` (a client's
    /// cost a benchmark reads: one per call without keep-alive, a few with it).
    pub fn counting(
        listener: TcpListener,
        app: Router,
        what: &'static str,
        accepted: Arc<AtomicU64>,
    ) -> Served {
        let (stop, stopped) = oneshot::channel::<()>();
        let listener = listener.tap_io(move |_| {
            accepted.fetch_add(1, Ordering::Relaxed);
        });
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "{what} stopped with an error");
            }
        });
        Served {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops serving: in-flight requests get a moment to finish, then every connection is
    /// dropped (a client's idle keep-alive connection must not keep the simulator alive).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
