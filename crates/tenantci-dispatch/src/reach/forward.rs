//! A local listener whose every connection is carried to the dispatcher: through
//! `pods/portforward` (kube's WebSocket client) to the leader's Pod, or straight to a status
//! address. What `dispatch status|explain` read through, and what `dispatch page` serves.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::cluster::{Dispatcher, bounded};
use tenantci_core::{Error, Result};

/// Where each local connection goes.
#[derive(Clone)]
pub enum Upstream {
    /// A fixed address: a status API this host reaches (the gateway-host install).
    Address(SocketAddr),
    /// One Pod, found once (`dispatch status`, `explain`: one answer, from the Pod named).
    Pod(Arc<Dispatcher>, String),
    /// The leader's Pod, found again for every connection (`dispatch page`: a browser left
    /// open follows a leader change).
    Leader(Arc<Dispatcher>),
}

/// The local end: its address; dropped, it stops listening and ends every relay.
pub struct Forwarder {
    local: SocketAddr,
    refusal: Arc<Mutex<Option<Error>>>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Listens on `listen` (port 0: any free port) and relays every connection to `upstream`.
    pub async fn start(listen: SocketAddr, upstream: Upstream) -> Result<Forwarder> {
        let listener = TcpListener::bind(listen).await.map_err(|e| {
            Error::bad_input(format!("cannot listen on {listen}"))
                .caused_by(e)
                .hint("give --listen a free local address, or 127.0.0.1:0 for any port")
        })?;
        let local = listener.local_addr().map_err(|e| {
            Error::external(format!("cannot read the address bound at {listen}")).caused_by(e)
        })?;
        let refusal = Arc::new(Mutex::new(None));
        let task = tokio::spawn(accept(listener, upstream, refusal.clone()));
        Ok(Forwarder {
            local,
            refusal,
            task,
        })
    }

    /// The local address to connect to.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The last refusal a relay met (the Pod's error channel, the apiserver's answer, a
    /// leader not found), taken, for the caller to say instead of "nothing answers". Recorded
    /// before the local connection closes, so a client that saw it closed finds it here.
    pub fn take_refusal(&self) -> Option<Error> {
        self.refusal.lock().expect("not poisoned").take()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream: Upstream, refusal: Arc<Mutex<Option<Error>>>) {
    let mut relays = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((conn, _)) = accepted else {
                    // Out of descriptors, say: wait rather than spin on the same error.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                };
                let (upstream, refusal) = (upstream.clone(), refusal.clone());
                relays.spawn(async move {
                    let mut conn = conn;
                    if let Err(why) = relay(&mut conn, &upstream).await {
                        tracing::debug!("{why}");
                        *refusal.lock().expect("not poisoned") = Some(why);
                    }
                    drop(conn);
                });
            }
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

/// One local connection to its upstream, to the end of both directions.
async fn relay(conn: &mut TcpStream, upstream: &Upstream) -> Result<()> {
    let (dispatcher, pod) = match upstream {
        Upstream::Address(a) => {
            let mut remote = TcpStream::connect(a).await.map_err(|e| {
                Error::bad_input(format!("no dispatcher answers at {a}")).caused_by(e)
            })?;
            let _ = tokio::io::copy_bidirectional(conn, &mut remote).await;
            return Ok(());
        }
        Upstream::Pod(d, pod) => (d, pod.clone()),
        Upstream::Leader(d) => {
            let pod = d.leader().await?;
            tracing::debug!(pod, "forwarding a connection to the leader");
            (d, pod)
        }
    };
    let port = dispatcher.status_port;
    let mut forward = dispatcher
        .pods
        .portforward(&pod, &[port])
        .await
        .map_err(|e| dispatcher.forward_refused(&pod, e))?;
    let mut remote = forward.take_stream(port).expect("the port asked for");
    let error = forward.take_error(port).expect("the port asked for");
    let copy = tokio::io::copy_bidirectional(conn, &mut remote);
    tokio::pin!(copy);
    tokio::select! {
        _ = &mut copy => {}
        message = error => match message {
            Some(m) => {
                return Err(Error::bad_input(format!(
                    "Pod {}/{pod} does not accept connections on port {port}: {}",
                    dispatcher.namespace,
                    bounded(&m)
                ))
                .hint("give --status-port the port of the dispatcher's status.listen (the manifests' 9464)"));
            }
            // The forward ended without an error: let the copy finish what it holds.
            None => { let _ = copy.await; }
        }
    }
    Ok(())
}
