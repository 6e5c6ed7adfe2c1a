//! Where `dispatch status`, `explain` and `page` find the dispatcher's status API: a config's
//! status.listen or an address on this host, or an in-cluster dispatcher through a kubeconfig
//! (the Lease's leader, through `pods/portforward`: `tenantci_dispatch::reach`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use std::sync::Arc;

use tenantci_core::{Error, Result};
use tenantci_dispatch::config::Config;
use tenantci_dispatch::leader::LEASE_NAME;
use tenantci_dispatch::reach::forward::{Forwarder, Upstream};
use tenantci_dispatch::reach::{
    self, DEFAULT_NAMESPACE, DEFAULT_STATUS_PORT, Dispatcher, Reached, Target,
};
use tenantci_dispatch::run::status_api::{fetch, fetch_history};
use tenantci_dispatch::view::Status;
use tenantci_dispatch::view::history::HistoryDoc;

/// Where the dispatcher's status API is.
#[derive(Debug, Args)]
#[command(next_help_heading = "Dispatcher")]
pub struct Reach {
    /// The dispatcher's config: its status.listen (with the same environment overrides) is
    /// asked, on this host.
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// The status API's address (HOST:PORT) instead of a config's, e.g. the local end of a
    /// port-forward.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "config")]
    pub status_address: Option<SocketAddr>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The in-cluster dispatcher: without --config and --status-address, the leader of the
/// dispatcher's namespace is found from its Lease and reached through a port-forward
/// (`pods/portforward`; the Role `tenantci-status-reader` grants what it needs).
#[derive(Debug, Args)]
#[command(next_help_heading = "In-cluster dispatcher")]
pub struct ClusterArgs {
    /// The cluster's kubeconfig. Without --config and --status-address the in-cluster
    /// dispatcher is reached through it (default: KUBECONFIG, else ~/.kube/config);
    /// `explain` also reads a waiting executor Pod's Events with it.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use. Default: its current context.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["config", "status_address"])]
    pub context: Option<String>,
    /// The dispatcher's namespace: its Lease `dynamic-runner-scheduler` names the leader's
    /// Pod.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The status API's port inside the dispatcher's Pod (the port of its status.listen).
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_STATUS_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    pub status_port: u16,
}

/// A status API reached: an address, and the Pod behind it when in the cluster.
pub struct Opened {
    /// Where to ask.
    pub address: SocketAddr,
    /// The in-cluster leader and the forward to it (kept open while this lives).
    pub pod: Option<Reached>,
    namespace: String,
}

impl Opened {
    /// `NAMESPACE/POD` of the Pod that answers, in the cluster.
    pub fn pod_name(&self) -> Option<String> {
        self.pod
            .as_ref()
            .map(|r| format!("{}/{}", self.namespace, r.pod))
    }
}

impl Reach {
    /// The in-cluster target of the flags.
    pub fn target(&self) -> Target {
        Target {
            kubeconfig: self.cluster.kubeconfig.clone(),
            context: self.cluster.context.clone(),
            namespace: self.cluster.namespace.clone(),
            status_port: self.cluster.status_port,
        }
    }

    /// The status API's address on this host (a config's or the one given); None in the
    /// cluster.
    pub fn local_address(&self) -> Result<Option<SocketAddr>> {
        match (&self.status_address, &self.config) {
            (Some(a), _) => Ok(Some(*a)),
            (None, Some(c)) => Ok(Some(Config::load(c)?.status.listen)),
            (None, None) => Ok(None),
        }
    }

    /// Reaches the status API: on this host, or the in-cluster leader through a port-forward.
    pub async fn open(&self) -> Result<Opened> {
        if let Some(address) = self.local_address()? {
            return Ok(Opened {
                address,
                pod: None,
                namespace: String::new(),
            });
        }
        let reached = reach::reach(&self.target()).await?;
        Ok(Opened {
            address: reached.forwarder.local(),
            pod: Some(reached),
            namespace: self.cluster.namespace.clone(),
        })
    }

    /// `/v1/status`, from a newly found leader each call; in the cluster, says which Pod
    /// answered.
    pub async fn fetch(&self, json: bool) -> Result<Status> {
        let opened = self.open().await?;
        let status = opened.status().await?;
        opened.announce(json);
        Ok(status)
    }
}

impl Opened {
    /// `/v1/status`.
    pub async fn status(&self) -> Result<Status> {
        fetch(self.address)
            .await
            .map_err(|e| self.refused_inside(e))
    }

    /// `/v1/history` with `query`.
    pub async fn history(&self, query: &[(&str, String)]) -> Result<HistoryDoc> {
        fetch_history(self.address, query)
            .await
            .map_err(|e| self.refused_inside(e))
    }

    /// In the cluster, which Pod answered (on stderr with `-o json`, so stdout stays the
    /// document).
    pub fn announce(&self, json: bool) {
        if let Some(pod) = self.pod_name() {
            let line = format!("answered by Pod {pod} (the holder of Lease {LEASE_NAME})");
            if json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        }
    }

    /// A refusal met inside the forward says more than "nothing answers".
    fn refused_inside(&self, e: Error) -> Error {
        match self.pod.as_ref().and_then(|r| r.forwarder.take_refusal()) {
            Some(refusal) => refusal,
            None => e,
        }
    }
}

#[derive(Debug, Args)]
pub struct PageArgs {
    /// The local address to serve the page on: loopback only (whoever reaches it reads the
    /// status with your access). Port 0: any free port; the URL is printed.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub reach: Reach,
}

/// `dispatch page`: a local address whose every connection goes to the status API, the
/// in-cluster leader's (found again per connection) or the one on this host; until SIGINT or
/// SIGTERM.
pub async fn page(a: &PageArgs) -> Result<i32> {
    if !a.listen.ip().is_loopback() {
        return Err(Error::bad_input(format!(
            "--listen {} is not a loopback address: whoever reaches the page reads the dispatcher's status with your access",
            a.listen
        ))
        .hint("listen on 127.0.0.1 (the default) and open the page on this machine"));
    }
    let (upstream, what) = match a.reach.local_address()? {
        Some(address) => (
            Upstream::Address(address),
            format!("the dispatcher at {address}"),
        ),
        None => {
            let dispatcher = Arc::new(Dispatcher::connect(&a.reach.target()).await?);
            // Found once now, so a wrong namespace or a missing grant is exit 2 before serving.
            let pod = dispatcher.leader().await?;
            let what = format!(
                "the leader of namespace {} (now Pod {pod}; each connection goes to the Lease's holder at that time)",
                dispatcher.namespace
            );
            (Upstream::Leader(dispatcher), what)
        }
    };
    let forwarder = Forwarder::start(a.listen, upstream).await?;
    println!("http://{}/", forwarder.local());
    eprintln!("serving the status page of {what}; stop with Ctrl-C");
    wait_for_stop().await;
    drop(forwarder);
    Ok(0)
}

async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
