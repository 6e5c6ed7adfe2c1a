//! `tenantci front connect`, on the runner's host: listens on loopback (gitlab-runner's `host`)
//! and carries each connection through the front inside an outer mutual-TLS session that
//! presents the runner's own credential and names the cluster by ALPN. The bytes inside are the
//! runner's own TLS to the apiserver, untouched. Does not check the apiserver (the runner does).
//! Any local process can connect, so the local side has its own cap and idle timeout: a stray
//! process cannot spend the runner's per-subject cap at the front.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use super::bundle::Bundle;
use super::relay::{self, Counts, End};
use tenantci_core::{Error, Result};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The local side's bounds (`--max-connections`, `--idle-timeout`), independent of the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// Local connections open at once, each one tunnel; more are closed at once.
    pub max_connections: u32,
    /// A tunnel with no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

/// A quarter of the front's default `max_per_subject`: a runner host's share, with room for
/// others carrying the same subject.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64;
/// As the front's default `idle_timeout`: above the apiserver's watch timeout.
pub const DEFAULT_IDLE_TIMEOUT: &str = "1h";

/// What a tunnel needs, built once from the bundle.
pub struct Dialer {
    connector: TlsConnector,
    /// The same session, asking for a renewal (`renewal`) rather than a tunnel.
    renewal: TlsConnector,
    front: String,
    server_name: ServerName<'static>,
    cluster: String,
}

impl Dialer {
    /// The client config from the bundle: TLS 1.3 only, the front's CA as the only root, the
    /// runner's certificate and key, the cluster's ALPN, no resumption. Fails (bad input) on a
    /// bundle whose PEM or names cannot be used.
    pub fn new(bundle: &Bundle) -> Result<Self> {
        tenantci_core::tls::ensure_crypto_provider();
        let roots_pem = tenantci_core::tls::parse_ca_bundle(
            "the bundle's front CA",
            std::path::Path::new("frontCa"),
            bundle.front_ca.as_bytes(),
        )?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(roots_pem);
        let chain = CertificateDer::pem_slice_iter(bundle.cert.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| bad_bundle("its certificate").caused_by(e))?;
        let key = PrivateKeyDer::from_pem_slice(bundle.key.expose().as_bytes())
            .map_err(|_| bad_bundle("its key"))?;
        // TLS 1.3 only, as the front: under 1.2 the runner's certificate would cross in clear.
        let mut config =
            rustls::ClientConfig::builder_with_protocol_versions(super::handshake::TLS13_ONLY)
                .with_root_certificates(roots)
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad_bundle("its certificate and key").caused_by(e))?;
        // The front never resumes (each tunnel's certificate is checked afresh).
        config.resumption = rustls::client::Resumption::disabled();
        let mut renewal = config.clone();
        config.alpn_protocols = vec![super::alpn_for(&bundle.cluster)];
        renewal.alpn_protocols = vec![super::renew_alpn_for(&bundle.cluster)];
        let server_name = ServerName::try_from(bundle.front_server_name.clone())
            .map_err(|_| bad_bundle("frontServerName"))?;
        Ok(Dialer {
            connector: TlsConnector::from(Arc::new(config)),
            renewal: TlsConnector::from(Arc::new(renewal)),
            front: bundle.front.clone(),
            server_name,
            cluster: bundle.cluster.clone(),
        })
    }

    /// One outer session to the front.
    pub async fn dial(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        self.dial_with(&self.connector).await
    }

    /// One outer session asking for a renewal of this certificate.
    pub async fn dial_renewal(
        &self,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        self.dial_with(&self.renewal).await
    }

    async fn dial_with(
        &self,
        connector: &TlsConnector,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.front))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = tcp.set_nodelay(true);
        tokio::time::timeout(
            CONNECT_TIMEOUT,
            connector.connect(self.server_name.clone(), tcp),
        )
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"))?
    }
}

fn bad_bundle(what: &str) -> Error {
    Error::bad_input(format!("the front bundle's {what} cannot be used"))
        .hint("write a new bundle with `tenantci front bundle` on the gateway host")
}

/// Binds the local listener; refuses an address that is not loopback (as the bundle does).
pub async fn bind(listen: SocketAddr) -> Result<TcpListener> {
    super::bundle::check_listen(listen)?;
    TcpListener::bind(listen).await.map_err(|e| {
        Error::bad_input(format!("cannot listen on {listen} for gitlab-runner"))
            .caused_by(e)
            .hint("is another process on that port? pass --listen 127.0.0.1:<free port> (and the same in config.toml's host)")
    })
}

/// Serves until `shutdown` turns true; each tunnel dials with the latest of `dialers` (a
/// renewal sends a new one).
pub async fn serve(
    dialers: watch::Receiver<Arc<Dialer>>,
    listener: TcpListener,
    local: Local,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(local.max_connections as usize));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else { continue };
                // Beyond the cap the local connection is dropped (closed) before any dial.
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(
                        "front connect: {} local connections are open, as many as --max-connections allows; the one from {peer} is closed (raise --max-connections if gitlab-runner needs more)",
                        local.max_connections
                    );
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let idle = local.idle_timeout;
                let dialer = dialers.borrow().clone();
                conns.spawn(tunnel(dialer, tcp, idle, slot, shutdown.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

async fn tunnel(
    dialer: Arc<Dialer>,
    local: TcpStream,
    idle: Duration,
    _slot: OwnedSemaphorePermit,
    mut shutdown: watch::Receiver<bool>,
) {
    let outer = match dialer.dial().await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(
                "front connect: cannot open a tunnel to the front at {} for cluster `{}`: {e}; the local connection is closed (a refused certificate shows as an alert: see the front's audit log)",
                dialer.front,
                dialer.cluster
            );
            return;
        }
    };
    let cut = async move {
        let _ = shutdown.changed().await;
        End::Shutdown
    };
    let counts = Arc::new(Counts::default());
    let end = relay::relay(local, outer, idle, cut, counts.clone()).await;
    if end == End::Error && counts.down.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tracing::warn!(
            "front connect: the front at {} closed the tunnel for cluster `{}` before any answer: is this certificate allowed there, and not revoked? (the front's audit log says why)",
            dialer.front,
            dialer.cluster
        );
    }
    tracing::debug!(end = end.as_str(), "front connect: tunnel ended");
}
