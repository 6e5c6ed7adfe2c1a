//! The SPIRE Server API's transport: TCP, then SPIFFE mTLS with our own rustls config
//! (`spiffe::tls::client_config`: our SVID as client certificate, the server accepted only by
//! its SPIFFE ID), ALPN `h2` because grpc-go servers refuse a TLS connection without it.
//! tonic sees the finished TLS stream as plain HTTP/2. Also: whether a failure was a TLS
//! refusal (a configuration error, not worth retrying) or the network (worth retrying).

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::spiffe::tls::SERVER_NAME;

/// How long TCP connect plus the TLS handshake may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The rustls config for the SPIRE server: SPIFFE mTLS plus ALPN `h2`.
pub(super) fn tls_config(
    source: Arc<dyn crate::spiffe::SvidSource>,
    server_id: crate::spiffe::SpiffeId,
) -> Arc<ClientConfig> {
    let mut config = crate::spiffe::tls::client_config(source, server_id);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// TCP connect (no Nagle: gRPC frames are small and latency-bound) and the TLS handshake,
/// together bounded by [`CONNECT_TIMEOUT`].
pub(super) async fn connect(
    address: &str,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let handshake = async {
        let tcp = TcpStream::connect(address).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(SERVER_NAME)
            .expect("SERVER_NAME is a DNS name")
            .to_owned();
        TlsConnector::from(config).connect(name, tcp).await
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no TLS connection within {}s", CONNECT_TIMEOUT.as_secs()),
            )
        })?
}

/// The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// Connects and waits for the server's first HTTP/2 bytes. In TLS 1.3 the client finishes
/// its handshake before the server has checked the client certificate: only the server's
/// answer (its SETTINGS, or an alert) tells whether it accepted our SVID.
pub(super) async fn handshake(address: &str, config: Arc<ClientConfig>) -> std::io::Result<()> {
    let mut tls = connect(address, config).await?;
    let answer = async {
        tls.write_all(H2_PREFACE).await?;
        tls.flush().await?;
        let mut first = [0u8; 1];
        match tls.read(&mut first).await? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection without an HTTP/2 answer",
            )),
            _ => Ok(()),
        }
    };
    let result = tokio::time::timeout(CONNECT_TIMEOUT, answer)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no HTTP/2 answer within {}s", CONNECT_TIMEOUT.as_secs()),
            )
        })?;
    let _ = tls.shutdown().await;
    result
}

/// What the TLS layer said, if the failure was a TLS refusal: ours of the server's
/// certificate, or the server's alert refusing ours.
///
/// `io::Error::source` skips the error it wraps, so each `io::Error` is looked into with
/// `get_ref`. A refusal that arrives after the handshake (TLS 1.3: the server checks the
/// client certificate after the client has finished) reaches us through h2, which keeps an
/// I/O error only as its kind and text (to stay `Clone`): that one is known by rustls' wording.
pub(super) fn tls_refusal(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(match tls {
                // Our SPIFFE ID check's reason, rather than its Debug wrapping.
                rustls::Error::InvalidCertificate(rustls::CertificateError::Other(why)) => {
                    format!("invalid peer certificate: {}", why.0)
                }
                other => other.to_string(),
            });
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(found) = io.get_ref().and_then(|inner| tls_refusal(inner)) {
                return Some(found);
            }
            let text = io.to_string();
            if io.kind() == std::io::ErrorKind::InvalidData
                && text.starts_with("received fatal alert")
            {
                return Some(text);
            }
        }
        next = e.source();
    }
    None
}

pub(super) use crate::error::one_line as chain;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn tls_refusals_are_told_from_the_network() {
        let ours = Error::new(
            ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(
            tls_refusal(&ours)
                .unwrap()
                .contains("invalid peer certificate")
        );
        // As h2 passes an alert on: kind and text only.
        let theirs = Error::new(ErrorKind::InvalidData, "received fatal alert: UnknownCA");
        assert_eq!(
            tls_refusal(&theirs).as_deref(),
            Some("received fatal alert: UnknownCA")
        );
        let network = Error::new(ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(tls_refusal(&network), None);
    }
}
