//! `tenantci front connect`, on the runner's host: listens on loopback (gitlab-runner's `host`)
//! and carries each connection through the front inside an outer mutual-TLS session that
//! presents the runner's own credential and names the cluster by ALPN. The bytes inside are the
//! runner's own TLS to the apiserver, untouched. Does not check the apiserver (the runner does).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;

use super::bundle::Bundle;
use super::relay::{self, Counts, End};
use tenantci_core::{Error, Result};

/// The runner's side keeps a tunnel as long as the front does: the front's idle timeout rules.
const NO_IDLE_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a tunnel needs, built once from the bundle.
pub struct Dialer {
    connector: TlsConnector,
    front: String,
    server_name: ServerName<'static>,
    cluster: String,
}

impl Dialer {
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
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad_bundle("its certificate and key").caused_by(e))?;
        config.alpn_protocols = vec![super::alpn_for(&bundle.cluster)];
        // The front never resumes (each tunnel's certificate is checked afresh).
        config.resumption = rustls::client::Resumption::disabled();
        let server_name = ServerName::try_from(bundle.front_server_name.clone())
            .map_err(|_| bad_bundle("frontServerName"))?;
        Ok(Dialer {
            connector: TlsConnector::from(Arc::new(config)),
            front: bundle.front.clone(),
            server_name,
            cluster: bundle.cluster.clone(),
        })
    }

    /// One outer session to the front.
    pub async fn dial(&self) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.front))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = tcp.set_nodelay(true);
        tokio::time::timeout(
            CONNECT_TIMEOUT,
            self.connector.connect(self.server_name.clone(), tcp),
        )
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"))?
    }
}

fn bad_bundle(what: &str) -> Error {
    Error::bad_input(format!("the front bundle's {what} cannot be used"))
        .hint("write a new bundle with `tenantci front bundle` on the gateway host")
}

pub async fn bind(listen: SocketAddr) -> Result<TcpListener> {
    super::bundle::check_listen(listen)?;
    TcpListener::bind(listen).await.map_err(|e| {
        Error::bad_input(format!("cannot listen on {listen} for gitlab-runner"))
            .caused_by(e)
            .hint("is another process on that port? pass --listen 127.0.0.1:<free port> (and the same in config.toml's host)")
    })
}

/// Serves until `shutdown` turns true.
pub async fn serve(dialer: Dialer, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let dialer = Arc::new(dialer);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let _ = tcp.set_nodelay(true);
                conns.spawn(tunnel(dialer.clone(), tcp, shutdown.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

async fn tunnel(dialer: Arc<Dialer>, local: TcpStream, mut shutdown: watch::Receiver<bool>) {
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
    let end = relay::relay(local, outer, NO_IDLE_LIMIT, cut, counts.clone()).await;
    if end == End::Error && counts.down.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tracing::warn!(
            "front connect: the front at {} closed the tunnel for cluster `{}` before any answer: is this certificate allowed there, and not revoked? (the front's audit log says why)",
            dialer.front,
            dialer.cluster
        );
    }
    tracing::debug!(end = end.as_str(), "front connect: tunnel ended");
}
