//! Reaching an in-cluster dispatcher's status API from an operator's machine, without
//! `kubectl`: the scheduler Lease in the dispatcher's namespace names the leader (its holder
//! identity is the Pod's name, `manifests/dispatch/deployment.yaml`), the Pod is checked to
//! exist, and a local listener carries each connection through `pods/portforward` to the
//! Pod's loopback status port (`forward`). `dispatch status`, `explain` and `page` read
//! through it as they read a gateway host's status API.
//!
//! What the reader needs is the Role `tenantci-status-reader`
//! (`manifests/dispatch/status-reader.yaml`): get the Lease, get and list Pods, get and create
//! `pods/portforward`, in the dispatcher's namespace only. Every refusal is one sentence with
//! its fix (exit 2).

pub mod cluster;
pub mod forward;
pub mod lease;

pub use cluster::{
    DEFAULT_NAMESPACE, DEFAULT_STATUS_PORT, Dispatcher, READER_ROLE, Target, client,
};
use forward::{Forwarder, Upstream};
use tenantci_core::Result;

/// The leader found and a local address that reaches its status API.
pub struct Reached {
    /// The Pod that answers (the Lease's holder).
    pub pod: String,
    /// The local end of the forward; the status API is at its `local()` address.
    pub forwarder: Forwarder,
}

/// Finds the leader of `target` and forwards a local port to its status API.
pub async fn reach(target: &Target) -> Result<Reached> {
    let dispatcher = std::sync::Arc::new(Dispatcher::connect(target).await?);
    let pod = dispatcher.leader().await?;
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let forwarder = Forwarder::start(listen, Upstream::Pod(dispatcher, pod.clone())).await?;
    Ok(Reached { pod, forwarder })
}
