//! `tenantci front serve`: one public port, many clusters. Per connection, in this order: the
//! rate and handshake bounds (the source address's, then the port's), the mutual-TLS handshake
//! against the named cluster's ClientCA with the allow-list and deny-list inside it
//! (`handshake`), the tunnel caps, then the cluster's apiserver (its address resolved through
//! the gateway, kept for seconds, looked up again when it fails), then the relay. Nothing opens
//! a connection to an apiserver before the handshake has admitted the client. One audit line
//! (target `tenantci::front::audit`) per tunnel, whatever its end, and per refusal until
//! refusals pass a rate (`audit`). The rules are one value swapped whole on a change
//! (`rules`, `reload`); open tunnels are checked against each new one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;

use super::admit::Client;
use super::audit::Auditor;
use super::config::FrontConfig;
use super::deny::{self, DenyList};
use super::forward::Superseded;
use super::handshake::refusal_reason;
use super::limits::{PerSubject, Rate, Slots, Source, Sources};
use super::live::{self, Registry};
use super::metrics::Metrics;
use super::relay::{self, Counts, End};
use super::reload::{self, Fingerprint, Reload};
use super::rules::Rules;
use super::status::Status;
use super::upstream::{Addresses, Upstream};
use tenantci_core::gateway::layout::StateDir;
use tenantci_core::gateway::resolve::Resolver;
use tenantci_core::{Error, Result};

/// How often the deny-list file is re-read: "closed within seconds".
const DENY_POLL: std::time::Duration = std::time::Duration::from_secs(1);

struct Front {
    /// The rules in force (allow-lists, limits, ClientCAs, serving pair, deny-list): read once
    /// per connection, and by each open tunnel at every change.
    rules: watch::Receiver<Arc<Rules>>,
    reload: watch::Receiver<Reload>,
    resolver: Resolver,
    deny_health: watch::Receiver<deny::ReadHealth>,
    metrics: Arc<Metrics>,
    /// One line per tunnel; refusals past a rate summarised.
    audit: Arc<Auditor>,
    tunnels: Slots,
    handshakes: Slots,
    subjects: Mutex<PerSubject>,
    rate: Mutex<Rate>,
    /// The per-source bounds, checked before the port's `rate` and `handshakes`.
    sources: Mutex<Sources>,
    /// The Clusters' apiserver addresses, each kept for [`ADDRESS_TTL`].
    addresses: Mutex<Addresses>,
    /// Serials renewed through this front, refused for new tunnels after the overlap.
    superseded: Mutex<Superseded>,
    /// Open tunnels and admitted credentials, for `front status`.
    registry: Mutex<Registry>,
}

/// The bound listeners, before anything is served: a busy address fails the start.
pub struct Bound {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    /// The public port's bound address (the port resolved when the config gave 0).
    pub addr: SocketAddr,
    /// The metrics listener's bound address, when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
}

/// Binds `listen` and, when set, `metrics_listen`; a busy address is bad input.
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

/// A front whose certificates, ClientCAs, deny-list and gateway have been checked, with its
/// status socket bound.
pub struct Opened {
    front: Arc<Front>,
    status: UnixListener,
    status_path: PathBuf,
}

/// Checks everything the front needs before anything is served (the caller prints its ready
/// line after this); `path` is where `config` was read, followed for live changes, and where
/// the status socket goes beside ([`live::socket_path`]).
pub async fn open(path: &Path, config: FrontConfig) -> Result<Opened> {
    let front = Arc::new(open_front(path, config).await?);
    let status_path = live::socket_path(path);
    let status = live::bind(&status_path).await?;
    Ok(Opened {
        front,
        status,
        status_path,
    })
}

/// A lock that outlives a panic elsewhere: every critical section leaves consistent counts.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves until `shutdown` turns true; open tunnels are cut then, each with its audit line.
pub async fn serve(opened: Opened, bound: Bound, shutdown: watch::Receiver<bool>) {
    let front = opened.front;
    if let Some(l) = bound.metrics {
        let app = super::metrics::router(front.metrics.clone());
        tokio::spawn(async move { axum::serve(l, app).await });
    }
    let (of, addrs) = (front.clone(), (bound.addr, bound.metrics_addr));
    let answer = live::answer(
        opened.status,
        opened.status_path,
        move || serde_json::to_vec(&status_of(&of, addrs.0, addrs.1)).unwrap_or_default(),
        shutdown.clone(),
    );
    tokio::spawn(answer);
    track_deny_list(&front);
    tokio::spawn(front.audit.clone().summarise());
    accept_loop(front, bound.listener, shutdown).await;
}

async fn open_front(path: &std::path::Path, config: FrontConfig) -> Result<Front> {
    for said in config.limits.clamped() {
        tracing::warn!("front: {said}");
    }
    // Missing or damaged at start: no start (revocation fails closed).
    let initial = DenyList::load(config.deny_list_path())?;
    warn_unserved_entries(&config, &initial);
    let watched = deny::watch(config.deny_list_path().to_path_buf(), initial, DENY_POLL);
    let (deny, deny_health) = (watched.list, watched.health);
    let resolver = Resolver::open(&StateDir::new(&config.state_dir)).await?;
    let metrics = Arc::new(Metrics::default());
    // Looked at before the files are read: a change while they are read is seen at the first
    // poll, never lost.
    let seen = Fingerprint::of(&reload::files(path, &config));
    let limits = config.limits.clone();
    let rules = Rules::read(config, deny.borrow().clone())?;
    let live = reload::follow(path.to_path_buf(), rules, seen, deny, metrics.clone())?;
    let (per_second, max_pending) = limits.per_source();
    let now = Instant::now();
    Ok(Front {
        sources: Mutex::new(Sources::new(per_second, max_pending, now)),
        addresses: Mutex::new(Addresses::new(ADDRESS_TTL)),
        superseded: Mutex::new(Superseded::default()),
        tunnels: Slots::default(),
        handshakes: Slots::default(),
        rate: Mutex::new(Rate::new(limits.new_per_second, now)),
        subjects: Mutex::new(PerSubject::default()),
        registry: Mutex::new(Registry::default()),
        audit: Auditor::new(metrics.clone()),
        rules: live.rules,
        reload: live.reload,
        resolver,
        deny_health,
        metrics,
    })
}

/// An entry naming a cluster this front does not serve matches nothing: most likely a typo
/// that leaves the certificate it meant admitted.
fn warn_unserved_entries(config: &FrontConfig, list: &DenyList) {
    for e in list.entries() {
        if let Some(c) = e.cluster.filter(|c| config.cluster(c).is_none()) {
            tracing::warn!(
                "front: the deny-list {} names cluster `{c}` (serial {}), which this front does not serve: that entry refuses nothing. Fix the cluster name, or use `tenantci front revoke --cert`",
                config.deny_list_path().display(),
                e.serial
            );
        }
    }
}

fn track_deny_list(front: &Arc<Front>) {
    let mut rx = front.rules.clone();
    let metrics = front.metrics.clone();
    tokio::spawn(async move {
        loop {
            metrics.set_denied(rx.borrow_and_update().deny().len());
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    let mut health = front.deny_health.clone();
    let metrics = front.metrics.clone();
    tokio::spawn(async move {
        loop {
            let stale = matches!(*health.borrow_and_update(), deny::ReadHealth::Stale(_));
            metrics.set_deny_list_stale(stale);
            if health.changed().await.is_err() {
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
                let Some(slot) = admit_new(&front, peer) else { continue };
                conns.spawn(connection(front.clone(), tcp, peer, slot, shutdown.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Each tunnel sees the shutdown and ends with its audit line.
    while conns.join_next().await.is_some() {}
}

/// The rate and handshake bounds, the source's then the port's, before any TLS work: a
/// refused socket is just closed.
fn admit_new(front: &Arc<Front>, peer: SocketAddr) -> Option<HandshakeSlot> {
    let (source, now) = (Source::of(peer.ip()), Instant::now());
    let limits = front.rules.borrow().config().limits.clone();
    let (per_second, max_pending) = limits.per_source();
    let mut sources = lock(&front.sources);
    sources.retune(per_second, max_pending);
    let admitted = sources.admit(source, now, || {
        let mut rate = lock(&front.rate);
        rate.retune(limits.new_per_second);
        if !rate.admit(now) {
            return Err("rate_limited");
        }
        if front.handshakes.try_take(limits.max_handshakes) {
            Ok(())
        } else {
            Err("handshakes_full")
        }
    });
    drop(sources);
    match admitted {
        Ok(()) => {
            front.metrics.pending().inc();
            Some(HandshakeSlot {
                front: front.clone(),
                source,
            })
        }
        Err(reason) => {
            front.audit.refused(peer, "", None, reason);
            None
        }
    }
}

/// A handshake's place under the port's bound and its source's, given back when dropped.
struct HandshakeSlot {
    front: Arc<Front>,
    source: Source,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.front.handshakes.give_back();
        self.front.metrics.pending().dec();
        lock(&self.front.sources).release(self.source, Instant::now());
    }
}

async fn connection(
    front: Arc<Front>,
    tcp: TcpStream,
    peer: SocketAddr,
    handshake_slot: HandshakeSlot,
    shutdown: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let timeout = front.rules.borrow().config().limits.handshake_timeout.get();
    let shaken = tokio::time::timeout(timeout, handshake(&front, tcp)).await;
    drop(handshake_slot);
    let (cluster, tls) = match shaken {
        Err(_) => return front.audit.refused(peer, "", None, "handshake_timeout"),
        Ok(Err((cluster, reason, client))) => {
            return front.audit.refused(peer, &cluster, client.as_ref(), reason);
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
        return front.audit.refused(peer, &cluster, None, "bad_certificate");
    };
    if lock(&front.superseded).refuses(&cluster, &client.serial, Instant::now()) {
        return front
            .audit
            .refused(peer, &cluster, Some(&client), "superseded");
    }
    front.metrics.client_cert(&cluster, &client);
    if crate::is_renewal(tls.get_ref().1.alpn_protocol()) {
        return renewal(&front, tls, peer, &cluster, &client).await;
    }
    let _caps = match take_caps(&front, &client) {
        Ok(c) => c,
        Err(reason) => {
            return front.audit.refused(peer, &cluster, Some(&client), reason);
        }
    };
    let upstream = match upstream(&front, &cluster).await {
        Ok(u) => u,
        Err(reason) => {
            return front.audit.refused(peer, &cluster, Some(&client), reason);
        }
    };
    front.metrics.connection(&cluster, "tunnel");
    front.metrics.tunnel_opened(&cluster);
    let counts = Arc::new(Counts::default());
    let id = lock(&front.registry).open(&cluster, &client, peer, counts.clone());
    let cut = cut_when(front.rules.clone(), &cluster, &client, shutdown);
    let idle = front.rules.borrow().config().limits.idle_timeout.get();
    let end = relay::relay(tls, upstream, idle, cut, counts.clone()).await;
    let (up, down) = (
        counts.up.load(std::sync::atomic::Ordering::Relaxed),
        counts.down.load(std::sync::atomic::Ordering::Relaxed),
    );
    lock(&front.registry).close(id);
    front.metrics.tunnel_closed(&cluster, up, down);
    front
        .audit
        .tunnel(peer, &cluster, &client, &counts, end.as_str());
}

/// A renewal instead of a tunnel: the signer asked (`forward`), the presented serial
/// superseded once a certificate is signed, one audit line.
async fn renewal(
    front: &Front,
    mut tls: TlsStream<TcpStream>,
    peer: SocketAddr,
    cluster: &str,
    client: &Client,
) {
    let started = Instant::now();
    let Some(der) = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
    else {
        return;
    };
    // The rules in force now (a reload may change them while the signer is asked).
    let renewal = front.rules.borrow().config().renewal.clone();
    let (end, signed) =
        super::forward::renewal(&mut tls, cluster, &der, &renewal.signer_socket).await;
    if signed {
        let overlap = renewal.overlap.get();
        let forget = renewal.max_lifetime.get().saturating_add(overlap);
        let now = Instant::now();
        lock(&front.superseded).renewed(cluster, &client.serial, now, overlap, forget);
    }
    front.metrics.connection(cluster, &end);
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    front.audit.renewal(peer, cluster, client, ms, &end);
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
    // The rules of this moment, for the whole handshake: a change meanwhile is met by the
    // tunnel's own check as soon as it opens.
    let picked = front.rules.borrow().pick(&start.client_hello());
    let Some((cluster, config)) = picked else {
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
    front: &'a Front,
    subject: String,
}

impl Drop for Caps<'_> {
    fn drop(&mut self) {
        self.front.tunnels.give_back();
        let mut subjects = self
            .front
            .subjects
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        subjects.give_back(&self.subject);
    }
}

fn take_caps<'a>(front: &'a Front, client: &Client) -> std::result::Result<Caps<'a>, &'static str> {
    let limits = front.rules.borrow().config().limits.clone();
    if !front.tunnels.try_take(limits.max_connections) {
        return Err("connections_full");
    }
    let subject = client.subject();
    if !lock(&front.subjects).take(&subject, limits.max_per_subject) {
        front.tunnels.give_back();
        return Err("subject_full");
    }
    Ok(Caps { front, subject })
}

/// How long a Cluster's resolved address is used before it is looked up again: a lookup is a
/// call to the gateway's admin apiserver, too slow and too costly for every tunnel.
const ADDRESS_TTL: Duration = Duration::from_secs(10);
/// An apiserver that accepts nothing in this long is not waited on any longer.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a tunnel waits for the gateway to name its Cluster's address.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster's apiserver, at its cached address; when that fails, looked up again once (its
/// leased port may have moved) and tried there if it did move.
async fn upstream(front: &Front, cluster: &str) -> std::result::Result<TcpStream, &'static str> {
    let cached = lock(&front.addresses).get(cluster, Instant::now());
    let addr = match &cached {
        Some(a) => a.clone(),
        None => resolve(front, cluster).await?,
    };
    let failed = match dial(cluster, &addr).await {
        Ok(tcp) => return Ok(tcp),
        Err(reason) => reason,
    };
    lock(&front.addresses).forget(cluster, &addr);
    if cached.is_none() {
        return Err(failed);
    }
    let fresh = resolve(front, cluster).await?;
    let retried = if fresh == addr {
        Err(failed)
    } else {
        dial(cluster, &fresh).await
    };
    if retried.is_err() {
        lock(&front.addresses).forget(cluster, &fresh);
    }
    retried
}

/// The Cluster's `status.url` through the gateway, kept for [`ADDRESS_TTL`].
async fn resolve(front: &Front, cluster: &str) -> std::result::Result<Upstream, &'static str> {
    // Bounded as the connect is: an admitted tunnel holds its caps while it waits.
    let lookup = front.resolver.resolve(cluster);
    let resolved = match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(r) => r.map_err(|e| e.message().to_string()),
        Err(_) => Err(format!("no answer within {RESOLVE_TIMEOUT:?}")),
    }
    .map_err(|why| {
        tracing::warn!("front: cannot resolve cluster `{cluster}` through the gateway: {why}; the connection is closed");
        "upstream_unresolved"
    })?;
    let addr = Upstream::from_url(&resolved.url).ok_or_else(|| {
        tracing::warn!("front: cluster `{cluster}`'s status.url `{}` names no host and port; the connection is closed", resolved.url);
        "upstream_unresolved"
    })?;
    lock(&front.addresses).put(cluster, addr.clone(), Instant::now());
    Ok(addr)
}

async fn dial(cluster: &str, addr: &Upstream) -> std::result::Result<TcpStream, &'static str> {
    let connect = TcpStream::connect((addr.host.as_str(), addr.port));
    let tcp = match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, connect).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => {
            tracing::warn!(
                "front: cannot connect to cluster `{cluster}`'s apiserver at {addr}: {e}; the connection is closed"
            );
            return Err("upstream_unreachable");
        }
        Err(_) => {
            tracing::warn!(
                "front: cluster `{cluster}`'s apiserver at {addr} did not accept within {UPSTREAM_CONNECT_TIMEOUT:?}; the connection is closed"
            );
            return Err("upstream_timeout");
        }
    };
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// Resolves when the rules in force no longer admit `client` to `cluster` (its serial went on
/// the deny-list, or its subject or cluster left the config) or at shutdown.
async fn cut_when(
    mut rules: watch::Receiver<Arc<Rules>>,
    cluster: &str,
    client: &Client,
    mut shutdown: watch::Receiver<bool>,
) -> End {
    loop {
        let verdict = rules.borrow_and_update().admits(cluster, client);
        if let Err(refusal) = verdict {
            return match refusal {
                super::admit::Refusal::Revoked => End::Revoked,
                _ => End::NotAllowed,
            };
        }
        tokio::select! {
            changed = rules.changed() => if changed.is_err() { std::future::pending::<()>().await },
            _ = shutdown.changed() => return End::Shutdown,
        }
    }
}

/// What `front status` shows, read from the front now.
fn status_of(front: &Front, listen: SocketAddr, metrics: Option<SocketAddr>) -> Status {
    use super::status::{CertStatus, ClusterStatus, Denied, DenyListStatus};
    let rules = front.rules.borrow().clone();
    let now = time::OffsetDateTime::now_utc();
    let (tunnels, next_expiry) = {
        let registry = lock(&front.registry);
        (registry.tunnels(now), registry.next_expiry(now))
    };
    let problem = match &*front.deny_health.borrow() {
        deny::ReadHealth::Current => None,
        deny::ReadHealth::Stale(why) => Some(why.clone()),
    };
    let config = rules.config();
    Status {
        version: super::status::VERSION,
        listen: listen.to_string(),
        metrics_listen: metrics.map(|a| a.to_string()),
        serving_cert: CertStatus {
            subject: rules.serving_cert().subject.clone(),
            not_after: tenantci_core::pki::inspect::rfc3339(rules.serving_cert().not_after),
        },
        clusters: config
            .clusters
            .iter()
            .map(|c| ClusterStatus {
                name: c.name.clone(),
                allowed: c
                    .allow
                    .iter()
                    .map(|s| format!("CN={}, O={}", s.common_name, s.organization))
                    .collect(),
            })
            .collect(),
        deny_list: DenyListStatus {
            path: config.deny_list_path().display().to_string(),
            problem,
        },
        denied: rules
            .deny()
            .entries()
            .map(|e| Denied {
                cluster: e.cluster.map(str::to_string),
                serial: e.serial.into(),
                note: e.note.into(),
            })
            .collect(),
        subjects: Registry::subjects(&tunnels),
        tunnels,
        next_expiry,
        reload: front.reload.borrow().clone(),
    }
}
