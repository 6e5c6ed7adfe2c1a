//! HTTPS in front of a plain-HTTP double (the Gitea double serves HTTP only), as a reverse
//! proxy terminating TLS in front of Gitea does: a certificate for 127.0.0.1 and localhost
//! from a fresh private CA, whose PEM the test hands to the client under test (`--gitea-ca`).
//! Bytes pass through unchanged after the handshake (HTTP/1.1 by ALPN).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use tenantci_core::pki::{CertificateAuthority, issue};

/// Terminates TLS and forwards to its target; stops (with every connection) when dropped.
pub struct TlsFront {
    addr: SocketAddr,
    /// The CA that signed the front's certificate.
    pub ca_pem: String,
    task: JoinHandle<()>,
}

impl TlsFront {
    /// Listens on 127.0.0.1:0 in front of `target`.
    pub async fn start(target: SocketAddr) -> TlsFront {
        tenantci_core::tls::ensure_crypto_provider();
        let day = std::time::Duration::from_secs(86_400);
        let ca = CertificateAuthority::generate("tls-front-ca", day).unwrap();
        let sans = ["127.0.0.1".to_string(), "localhost".to_string()];
        let leaf = issue::server_cert(&ca, "tls-front", &sans, day).unwrap();
        let certs = rustls_pemfile::certs(&mut leaf.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls_pemfile::private_key(&mut leaf.key_pem.as_bytes())
            .unwrap()
            .unwrap();
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    // A client that does not trust the CA ends the handshake: nothing to do.
                    let Ok(mut tls) = acceptor.accept(inbound).await else {
                        return;
                    };
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut outbound).await;
                    }
                });
                while conns.try_join_next().is_some() {}
            }
        });
        TlsFront {
            addr,
            ca_pem: ca.cert_pem().to_string(),
            task,
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
