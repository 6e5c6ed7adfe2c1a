//! Serves a router over plain HTTP/1.1 with every wait bounded: the executor proxy's server
//! (the runner speaks HTTP/1.1 to `http://127.0.0.1`).
//!
//! Why not `axum::serve`: it reads request headers without a deadline, and its graceful
//! shutdown waits for every open connection to end. A client holding half-sent headers then
//! kept the proxy alive after SIGTERM for the Pod's whole grace period (issue 35: 50 such
//! connections, 45 s). Here a connection that does not finish its headers within
//! `header_read_timeout` is closed (the same deadline ends a kept-alive connection that sits
//! idle), and after `shutdown` resolves the listener closes at once, in-flight requests get
//! `grace` to finish, and whatever is still open then is dropped.
//!
//! Boundary: no TLS, no routing; the caller's router does the work.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// The bounds of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long a client may take to send one request's headers (or keep a connection idle).
    pub header_read_timeout: Duration,
    /// After shutdown: how long in-flight requests may take before the server stops anyway.
    pub grace: Duration,
}

/// How the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection ended within the grace.
    Drained,
    /// The grace ran out; this many connections were still open and are dropped.
    GraceExpired { open: usize },
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains within `bounds.grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) -> Stopped {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut open = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Small request, small answer: without TCP_NODELAY, Nagle's algorithm holds a
        // response tail until the runner's delayed ACK (~40 ms on Linux).
        let _ = tcp.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        open.spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
        while open.try_join_next().is_some() {}
    }
    drop(listener);
    match tokio::time::timeout(bounds.grace, graceful.shutdown()).await {
        Ok(()) => Stopped::Drained,
        Err(_) => {
            while open.try_join_next().is_some() {}
            let left = open.len();
            open.abort_all();
            Stopped::GraceExpired { open: left }
        }
    }
}
