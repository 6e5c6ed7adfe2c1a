//! A fixed loopback address in front of a server that moves, as a Kubernetes Service is in
//! front of a restarted Pod. A test hands out the forward's address (e.g. as the facade URL
//! executors are given), starts the server on port 0 and points the forward at the address
//! the server reports; a restarted server gets a new port, its clients keep the address.
//! Plain TCP: TLS passes through, so clients still verify the server's certificate.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Forwards connections to its target; stops (with every connection) when dropped.
pub struct Forward {
    addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    task: JoinHandle<()>,
}

impl Forward {
    /// Listens on 127.0.0.1:0. Until [`Forward::point_at`], and while the target does not
    /// accept, connections are closed at once (as a Service with no ready endpoint).
    pub async fn start() -> Forward {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let target = Arc::new(Mutex::new(None));
        let current = target.clone();
        let task = tokio::spawn(async move {
            // Dropping the set (when the task is aborted) aborts every connection. An accept
            // error (fd exhaustion) ends the loop rather than spinning: clients then fail.
            let mut conns = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to: Option<SocketAddr> = *current.lock().unwrap();
                conns.spawn(async move {
                    let Some(to) = to else { return };
                    if let Ok(mut outbound) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Forward { addr, target, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// New connections go to `to`; open ones stay with the old target.
    pub fn point_at(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = Some(to);
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}
