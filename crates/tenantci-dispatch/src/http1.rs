//! Serves a router over plain HTTP/1.1 with every wait bounded: the one server of the
//! executor proxy (the runner speaks HTTP/1.1 to `http://127.0.0.1`) and of the webhook
//! receiver (`claim::webhook`: Gitea posts deliveries over plain HTTP).
//!
//! Why not `axum::serve`: it reads request headers without a deadline, and its graceful
//! shutdown waits for every open connection to end. A client holding half-sent headers then
//! kept the proxy alive after SIGTERM for the Pod's whole grace period (issue 35: 50 such
//! connections, 45 s). Here a connection that does not finish its headers within
//! `header_read_timeout` is closed (the same deadline ends a kept-alive connection that sits
//! idle), and after `shutdown` resolves the listener closes at once, in-flight requests get
//! `grace` to finish, and whatever is still open then is dropped. At most `max_connections`
//! are open at once: at the bound the server stops accepting until one ends (the kernel's
//! backlog holds newcomers), so a flood of slow clients costs a bounded number of tasks and
//! file descriptors, and each of them is gone within the header-read timeout (issue 45: the
//! webhook receiver kept 100 half-header connections open for as long as the client liked).
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
use tokio::sync::Semaphore;

/// The bounds of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long a client may take to send one request's headers (or keep a connection idle).
    pub header_read_timeout: Duration,
    /// After shutdown: how long in-flight requests may take before the server stops anyway.
    pub grace: Duration,
    /// Connections open at once; at the bound, accepting waits until one ends.
    pub max_connections: usize,
}

/// How the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection ended within the grace.
    Drained,
    /// The grace ran out; this many connections were still open and are dropped.
    GraceExpired {
        /// Connections still open when the grace ran out.
        open: usize,
    },
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
    let slots = std::sync::Arc::new(Semaphore::new(bounds.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let (slot, accepted) = tokio::select! {
            // A slot first, then the accept: at the bound nothing is taken off the backlog.
            accepted = async {
                let slot = slots.clone().acquire_owned().await.expect("never closed");
                (slot, listener.accept().await)
            } => accepted,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, listen = ?listener.local_addr().ok(), "cannot accept a connection; accepting again in 100 ms");
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
            drop(slot);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    /// A deadlock guard, never a measurement.
    const GUARD: Duration = Duration::from_secs(30);

    async fn server(bounds: Bounds) -> (SocketAddr, oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve(listener, app, bounds, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    /// A whole request on its own connection; the answer's bytes.
    async fn get(addr: SocketAddr) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// A client that sends half its headers and then nothing.
    async fn half_headers(addr: SocketAddr) -> TcpStream {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        tcp
    }

    /// The server closes `tcp` (EOF or a reset): what the client observes.
    async fn closed_by_the_server(mut tcp: TcpStream) {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(GUARD, tcp.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "the server never closed the stalled connection"
        );
    }

    #[tokio::test]
    async fn half_sent_headers_are_closed_and_other_clients_are_served_meanwhile() {
        let (addr, _stop) = server(Bounds {
            header_read_timeout: Duration::from_millis(300),
            grace: Duration::from_secs(1),
            max_connections: 64,
        })
        .await;
        let mut stalled = Vec::new();
        for _ in 0..20 {
            stalled.push(half_headers(addr).await);
        }
        assert!(get(addr).await.starts_with("HTTP/1.1 200"));
        for tcp in stalled {
            closed_by_the_server(tcp).await;
        }
    }

    #[tokio::test]
    async fn at_the_bound_a_newcomer_waits_until_a_connection_ends() {
        let (addr, _stop) = server(Bounds {
            header_read_timeout: Duration::from_secs(3600),
            grace: Duration::from_secs(1),
            max_connections: 1,
        })
        .await;
        let holder = half_headers(addr).await;
        let newcomer = tokio::spawn(get(addr));
        // An observation window, not a synchronisation: while the holder keeps the only
        // slot, no answer may arrive however long one waits; a server without the bound
        // answers within a millisecond.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!newcomer.is_finished(), "served past the connection bound");
        drop(holder);
        let answer = tokio::time::timeout(GUARD, newcomer)
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
