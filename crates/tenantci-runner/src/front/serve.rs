//! `tenantci front serve`: one public port, many clusters. Per connection, in this order: the
//! rate and handshake bounds, the mutual-TLS handshake against the named cluster's ClientCA
//! with the allow-list and deny-list inside it (`handshake`), the tunnel caps, then the
//! cluster's apiserver URL resolved from the gateway at that moment, then the relay. Nothing
//! opens a connection to an apiserver before the handshake has admitted the client. One audit
//! line (target `tenantci::front::audit`) per connection, whatever its end.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;

use super::admit::Client;
use super::config::FrontConfig;
use super::deny::{self, DenyList};
use super::handshake::{Configs, refusal_reason};
use super::limits::{PerSubject, Rate};
use super::metrics::Metrics;
use super::relay::{self, Counts, End};
use tenantci_core::gateway::layout::StateDir;
use tenantci_core::gateway::resolve::Resolver;
use tenantci_core::{Error, Result};

/// How often the deny-list file is re-read: "closed within seconds".
const DENY_POLL: std::time::Duration = std::time::Duration::from_secs(1);

struct Front {
    config: FrontConfig,
    configs: Configs,
    resolver: Resolver,
    deny: watch::Receiver<Arc<DenyList>>,
    metrics: Arc<Metrics>,
    tunnels: Arc<Semaphore>,
    handshakes: Arc<Semaphore>,
    subjects: Mutex<PerSubject>,
    rate: Mutex<Rate>,
}

/// The bound listeners, before anything is served: a busy address fails the start.
pub struct Bound {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
}

pub async fn bind(config: &FrontConfig) -> Result<Bound> {
    let listener = bind_one("the front", config.listen).await?;
    let metrics = match config.metrics_listen {
        Some(a) => Some(bind_one("the front's metrics", a).await?),
        None => None,
    };
    Ok(Bound {
        addr: local(&listener)?,
        metrics_addr: metrics.as_ref().map(local).transpose()?,
        listener,
        metrics,
    })
}

async fn bind_one(what: &str, addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        Error::bad_input(format!("cannot listen for {what} on {addr}"))
            .caused_by(e)
            .hint("is another process on that port? change `listen`/`metrics_listen` in the front config")
    })
}

fn local(l: &TcpListener) -> Result<SocketAddr> {
    l.local_addr()
        .map_err(|e| Error::external("cannot read the front's listening address").caused_by(e))
}

/// A front whose certificates, ClientCAs, deny-list and gateway have been checked.
pub struct Opened(Arc<Front>);

/// Checks everything the front needs before anything is served (the caller prints its ready
/// line after this).
pub async fn open(config: FrontConfig) -> Result<Opened> {
    Ok(Opened(Arc::new(open_front(config).await?)))
}

/// Serves until `shutdown` turns true; open tunnels are cut then, each with its audit line.
pub async fn serve(opened: Opened, bound: Bound, shutdown: watch::Receiver<bool>) {
    let front = opened.0;
    if let Some(l) = bound.metrics {
        let app = super::metrics::router(front.metrics.clone());
        tokio::spawn(async move { axum::serve(l, app).await });
    }
    track_deny_list(&front);
    accept_loop(front, bound.listener, shutdown).await;
}

async fn open_front(config: FrontConfig) -> Result<Front> {
    let initial = DenyList::load(config.deny_list_path())?;
    let deny = deny::watch(config.deny_list_path().to_path_buf(), initial, DENY_POLL);
    let configs = Configs::build(&config, deny.clone())?;
    let resolver = Resolver::open(&StateDir::new(&config.state_dir)).await?;
    let metrics = Arc::new(Metrics::default());
    if let Ok(info) = super::status::serving_cert(&config) {
        metrics.set_cert_expiry(info.not_after.unix_timestamp());
    }
    let limits = &config.limits;
    Ok(Front {
        tunnels: Arc::new(Semaphore::new(limits.max_connections as usize)),
        handshakes: Arc::new(Semaphore::new(limits.max_handshakes as usize)),
        rate: Mutex::new(Rate::new(limits.new_per_second, Instant::now())),
        subjects: Mutex::new(PerSubject::default()),
        config,
        configs,
        resolver,
        deny,
        metrics,
    })
}

fn track_deny_list(front: &Arc<Front>) {
    let mut rx = front.deny.clone();
    let metrics = front.metrics.clone();
    tokio::spawn(async move {
        loop {
            metrics.set_denied(rx.borrow_and_update().len());
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}

async fn accept_loop(
    front: Arc<Front>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else { continue };
                let Some(permit) = admit_new(&front, peer) else { continue };
                conns.spawn(connection(front.clone(), tcp, peer, permit, shutdown.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Each tunnel sees the shutdown and ends with its audit line.
    while conns.join_next().await.is_some() {}
}

/// The rate and the handshake bound, before any TLS work: a refused socket is just closed.
fn admit_new(front: &Front, peer: SocketAddr) -> Option<OwnedSemaphorePermit> {
    let refused = if !front
        .rate
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .admit(Instant::now())
    {
        "rate_limited"
    } else {
        match front.handshakes.clone().try_acquire_owned() {
            Ok(p) => {
                front.metrics.pending().inc();
                return Some(p);
            }
            Err(_) => "handshakes_full",
        }
    };
    Audit::refused(&front.metrics, peer, "", None, refused);
    None
}

/// One audit line per connection.
struct Audit<'a> {
    peer: SocketAddr,
    cluster: &'a str,
    client: Option<&'a Client>,
}

impl Audit<'_> {
    fn refused(
        metrics: &Metrics,
        peer: SocketAddr,
        cluster: &str,
        client: Option<&Client>,
        reason: &str,
    ) {
        metrics.connection(cluster, reason);
        Audit {
            peer,
            cluster,
            client,
        }
        .line(0, 0, 0, reason);
    }

    fn line(&self, up: u64, down: u64, ms: u128, end: &str) {
        let subject = self.client.map(Client::subject).unwrap_or_default();
        let serial = self.client.map(|c| c.serial.as_str()).unwrap_or("");
        tracing::info!(
            target: "tenantci::front::audit",
            cluster = self.cluster,
            subject = subject.as_str(),
            serial,
            peer = %self.peer,
            bytes_up = up,
            bytes_down = down,
            duration_ms = ms as u64,
            end,
            "front connection"
        );
    }
}

async fn connection(
    front: Arc<Front>,
    tcp: TcpStream,
    peer: SocketAddr,
    handshake_permit: OwnedSemaphorePermit,
    shutdown: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let timeout = front.config.limits.handshake_timeout.get();
    let shaken = tokio::time::timeout(timeout, handshake(&front, tcp)).await;
    drop(handshake_permit);
    front.metrics.pending().dec();
    let (cluster, tls) = match shaken {
        Err(_) => return Audit::refused(&front.metrics, peer, "", None, "handshake_timeout"),
        Ok(Err((cluster, reason, client))) => {
            return Audit::refused(&front.metrics, peer, &cluster, client.as_ref(), reason);
        }
        Ok(Ok(v)) => v,
    };
    let Some(client) = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| Client::from_der(c).ok())
    else {
        return Audit::refused(&front.metrics, peer, &cluster, None, "bad_certificate");
    };
    let audit = Audit {
        peer,
        cluster: &cluster,
        client: Some(&client),
    };
    let _caps = match take_caps(&front, &client) {
        Ok(c) => c,
        Err(reason) => {
            return Audit::refused(&front.metrics, peer, &cluster, Some(&client), reason);
        }
    };
    let upstream = match upstream(&front, &cluster).await {
        Ok(u) => u,
        Err(reason) => {
            return Audit::refused(&front.metrics, peer, &cluster, Some(&client), reason);
        }
    };
    front.metrics.connection(&cluster, "tunnel");
    front.metrics.tunnel_opened(&cluster);
    let counts = Arc::new(Counts::default());
    let cut = cut_when(front.deny.clone(), client.serial.clone(), shutdown);
    let end = relay::relay(
        tls,
        upstream,
        front.config.limits.idle_timeout.get(),
        cut,
        counts.clone(),
    )
    .await;
    let (up, down) = (
        counts.up.load(std::sync::atomic::Ordering::Relaxed),
        counts.down.load(std::sync::atomic::Ordering::Relaxed),
    );
    front.metrics.tunnel_closed(&cluster, up, down);
    audit.line(up, down, counts.duration().as_millis(), end.as_str());
}

type Refusal = (String, &'static str, Option<Client>);

async fn handshake(
    front: &Front,
    tcp: TcpStream,
) -> std::result::Result<(String, TlsStream<TcpStream>), Refusal> {
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
    let start = acceptor
        .await
        .map_err(|_| (String::new(), "handshake_failed", None))?;
    let Some((cluster, config)) = front.configs.pick(&start.client_hello()) else {
        return Err((String::new(), "unknown_cluster", None));
    };
    match start.into_stream(config).await {
        Ok(tls) => Ok((cluster, tls)),
        Err(e) => {
            let (reason, client) = refusal_reason(&e);
            Err((cluster, reason, client))
        }
    }
}

/// A tunnel's place under both caps, given back when dropped.
struct Caps<'a> {
    _total: OwnedSemaphorePermit,
    front: &'a Front,
    subject: String,
}

impl Drop for Caps<'_> {
    fn drop(&mut self) {
        let mut subjects = self
            .front
            .subjects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        subjects.give_back(&self.subject);
    }
}

fn take_caps<'a>(front: &'a Front, client: &Client) -> std::result::Result<Caps<'a>, &'static str> {
    let total = front
        .tunnels
        .clone()
        .try_acquire_owned()
        .map_err(|_| "connections_full")?;
    let subject = client.subject();
    let max = front.config.limits.max_per_subject;
    if !front
        .subjects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take(&subject, max)
    {
        return Err("subject_full");
    }
    Ok(Caps {
        _total: total,
        front,
        subject,
    })
}

/// The cluster's apiserver now: its leased port may have changed since the last connection.
async fn upstream(front: &Front, cluster: &str) -> std::result::Result<TcpStream, &'static str> {
    let resolved = front.resolver.resolve(cluster).await.map_err(|e| {
        tracing::warn!("front: cannot resolve cluster `{cluster}` through the gateway: {}; the connection is closed", e.message());
        "upstream_unresolved"
    })?;
    let uri: http::Uri = resolved.url.parse().map_err(|_| "upstream_unresolved")?;
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return Err("upstream_unresolved");
    };
    let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port)).await.map_err(|e| {
        tracing::warn!("front: cannot connect to cluster `{cluster}`'s apiserver at {}: {e}; the connection is closed", resolved.url);
        "upstream_unreachable"
    })?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// Resolves when `serial` lands on the deny-list (the tunnel is revoked) or at shutdown.
async fn cut_when(
    mut deny: watch::Receiver<Arc<DenyList>>,
    serial: String,
    mut shutdown: watch::Receiver<bool>,
) -> End {
    loop {
        if deny.borrow_and_update().contains(&serial) {
            return End::Revoked;
        }
        tokio::select! {
            changed = deny.changed() => if changed.is_err() { std::future::pending::<()>().await },
            _ = shutdown.changed() => return End::Shutdown,
        }
    }
}
