//! A client of the SPIRE Server API's SVID service, for the dispatcher (a SPIRE admin
//! workload) to mint the X509-SVID of a VM task, which cannot run a SPIRE agent. It presents
//! the caller's own SVID and accepts the server only by its SPIFFE ID (`connect`); the
//! messages are hand-written (`proto`); every answer is checked before it is handed out
//! (`answer`), so that a caller writes nothing unusable. It does not write files or decide
//! who gets an SVID: the dispatcher does.

mod answer;
pub use answer::csr;
mod connect;
pub mod proto;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rcgen::KeyPair;
use tonic::transport::{Channel, Endpoint};

use super::SpiffeId;
use super::svid::SvidSource;
use crate::{Error, Secret};
pub use proto::MINT_X509_SVID;
use proto::{MintX509SvidRequest, MintX509SvidResponse};

/// How long one call may take once connected (connecting has `connect::CONNECT_TIMEOUT`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A client of the SPIRE Server API's SVID service.
#[derive(Clone, Debug)]
pub struct ServerApi {
    address: String,
    source: Arc<dyn SvidSource>,
    server_id: SpiffeId,
    tls: Arc<rustls::ClientConfig>,
    endpoint: Endpoint,
    /// Made on first use: a tonic channel spawns its worker, which needs a Tokio runtime,
    /// and `new` should not. Shared by clones, so they share the connection.
    channel: Arc<OnceLock<Channel>>,
}

/// PEM texts ready to write as spiffe-helper files (svid.pem, svid_key.pem, svid_bundle.pem).
pub struct MintedSvid {
    /// The SPIFFE ID minted: the one asked for, checked against the certificate's URI SAN.
    pub id: SpiffeId,
    /// `svid.pem`: the chain, leaf first.
    pub chain_pem: String,
    /// `svid_key.pem`: the PKCS#8 key, made here and never sent.
    pub key_pem: Secret,
    /// `svid_bundle.pem`: the trust domain's CAs, from the caller's own SVID source.
    pub bundle_pem: String,
    /// Seconds since the Unix epoch, as the server answered.
    pub expires_at: i64,
}

impl fmt::Debug for MintedSvid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedSvid")
            .field("id", &self.id.to_string())
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Why no SVID was minted; the message is one sentence naming the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    /// Worth retrying: connect/TLS failure, timeout, gRPC Unavailable/DeadlineExceeded/
    /// Internal/Unknown/ResourceExhausted/Aborted/Cancelled.
    #[error("{0}")]
    Unavailable(String),
    /// The server refused (PermissionDenied, Unauthenticated, InvalidArgument, ...), a TLS
    /// peer was refused (the server's SVID by us, or ours by the server: both configuration),
    /// or the answer is not a usable SVID for the ID asked. Not worth retrying as is.
    #[error("{0}")]
    Refused(String),
}

impl ServerApi {
    /// `address` is HOST:PORT (SPIRE server's TCP API, default port 8081); `source` is the
    /// caller's own SVID (presented as client cert; its bundle verifies the server);
    /// `server_id` the server's SPIFFE ID. Connects lazily (no I/O here, and no Tokio runtime
    /// needed yet). Refused: an `address` that is not HOST:PORT.
    pub fn new(
        address: &str,
        source: Arc<dyn SvidSource>,
        server_id: SpiffeId,
    ) -> crate::Result<Self> {
        let uri = validate_address(address)?;
        let tls = connect::tls_config(source.clone(), server_id.clone());
        let endpoint = Endpoint::from(uri)
            .connect_timeout(connect::CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        Ok(ServerApi {
            address: address.to_string(),
            source,
            server_id,
            tls,
            endpoint,
            channel: Arc::new(OnceLock::new()),
        })
    }

    /// The channel, connecting (lazily, through our TLS connector) on first use.
    fn channel(&self) -> Channel {
        self.channel
            .get_or_init(|| {
                let (address, tls) = (self.address.clone(), self.tls.clone());
                self.endpoint
                    .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                        let (address, tls) = (address.clone(), tls.clone());
                        async move {
                            connect::connect(&address, tls)
                                .await
                                .map(hyper_util::rt::TokioIo::new)
                        }
                    }))
            })
            .clone()
    }

    /// Mints an X509-SVID for `id`: a fresh ECDSA P-256 key, a CSR whose only URI SAN is
    /// `id`, `ttl` in seconds (clamped to i32). The answer is checked: a chain for `id`
    /// with our key that chains to the caller's bundle.
    pub async fn mint_x509_svid(
        &self,
        id: &SpiffeId,
        ttl: Duration,
    ) -> Result<MintedSvid, MintError> {
        let own = self.source.current().map_err(|e| {
            MintError::Unavailable(format!(
                "no own SVID to present to the SPIRE server at {}: {}",
                self.address,
                e.render()
            ))
        })?;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| MintError::Refused(format!("cannot make a key for `{id}`: {e}")))?;
        let csr = answer::csr(id, &key)
            .map_err(|e| MintError::Refused(format!("cannot request an SVID for `{id}`: {e}")))?;
        let request = MintX509SvidRequest {
            csr,
            ttl: i32::try_from(ttl.as_secs()).unwrap_or(i32::MAX),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel());
        grpc.ready().await.map_err(|e| self.transport_error(&e))?;
        let codec = tonic_prost::ProstCodec::<MintX509SvidRequest, MintX509SvidResponse>::default();
        let path = http::uri::PathAndQuery::from_static(MINT_X509_SVID);
        let response = grpc
            .unary(tonic::Request::new(request), path, codec)
            .await
            .map_err(|status| self.status_error(id, &status))?
            .into_inner();
        answer::minted(id, &key, &own, response).map_err(|why| {
            MintError::Refused(format!(
                "the SPIRE server at {} answered the mint for `{id}` with no usable SVID: {why}",
                self.address
            ))
        })
    }

    /// One mTLS handshake and nothing else (`dispatch run`'s check at start): Ok when
    /// the server presents `server_id` and accepts our SVID at TLS level. Sends the HTTP/2
    /// preface only to hear the server's verdict on our certificate (see `connect::handshake`).
    pub async fn check(&self) -> Result<(), MintError> {
        connect::handshake(&self.address, self.tls.clone())
            .await
            .map_err(|e| self.transport_error(&e))
    }

    /// A failure below gRPC: a TLS refusal (configuration) or the network.
    fn transport_error(&self, err: &(dyn std::error::Error + 'static)) -> MintError {
        match connect::tls_refusal(err) {
            Some(tls) => MintError::Refused(format!(
                "the TLS handshake with the SPIRE server at {} was refused ({tls}); check that the server presents `{}` under the caller's trust bundle and that it trusts the caller's SVID `{}`",
                self.address,
                self.server_id,
                self.own_id()
            )),
            None => MintError::Unavailable(format!(
                "cannot reach the SPIRE server at {}: {}",
                self.address,
                connect::chain(err)
            )),
        }
    }

    fn status_error(&self, id: &SpiffeId, status: &tonic::Status) -> MintError {
        use tonic::Code;
        if connect::tls_refusal(status).is_some() {
            return self.transport_error(status);
        }
        let message = status.message();
        let said = match std::error::Error::source(status).map(connect::chain) {
            Some(cause) if !cause.contains(message) => {
                format!("{:?}: {message} ({cause})", status.code())
            }
            _ => format!("{:?}: {message}", status.code()),
        };
        let address = &self.address;
        match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Unknown
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Cancelled => MintError::Unavailable(format!(
                "the SPIRE server at {address} could not mint an SVID for `{id}` now: {said}"
            )),
            Code::PermissionDenied => MintError::Refused(format!(
                "the SPIRE server at {address} refused to mint an SVID for `{id}`: {said}; add the caller's SPIFFE ID `{}` to the server's admin_ids, or mark its registration entry admin",
                self.own_id()
            )),
            _ => MintError::Refused(format!(
                "the SPIRE server at {address} refused to mint an SVID for `{id}`: {said}"
            )),
        }
    }

    fn own_id(&self) -> String {
        self.source
            .current()
            .map(|s| s.id().to_string())
            .unwrap_or_else(|_| "(none)".into())
    }
}

/// The SPIFFE ID every SPIRE server of `trust_domain` presents (`spiffe://<td>/spire/server`).
pub fn default_server_id(trust_domain: &str) -> String {
    format!("spiffe://{trust_domain}/spire/server")
}

/// Checks that `address` is HOST:PORT, as [`ServerApi::new`] takes it (for config validation
/// before anything connects).
pub fn check_address(address: &str) -> crate::Result<()> {
    validate_address(address).map(drop)
}

/// HOST:PORT (a bracketed IPv6 host allowed) as the endpoint URI `http://HOST:PORT`: TLS is
/// our connector's, so tonic speaks plain HTTP/2 over it.
fn validate_address(address: &str) -> crate::Result<http::Uri> {
    let bad = || {
        Error::bad_input(format!(
            "the SPIRE server address `{}` is not HOST:PORT",
            crate::input::shown(address)
        ))
        .hint("give the SPIRE server's TCP API as HOST:PORT, e.g. spire-server.spire.svc:8081 (no scheme, no path)")
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = !host.is_empty()
        && !host
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '?' | '#'))
        && (host.starts_with('[') == host.ends_with(']'))
        && (host.starts_with('[') || !host.contains(':'));
    if !port_ok || !host_ok {
        return Err(bad());
    }
    http::Uri::try_from(format!("http://{address}")).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_port() {
        for good in [
            "spire-server.spire.svc:8081",
            "127.0.0.1:8081",
            "[::1]:8081",
        ] {
            assert!(validate_address(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "spire-server",
            "spire-server:",
            "spire-server:0",
            "spire-server:99999",
            "https://spire-server:8081",
            "spire-server:8081/x",
            ":8081",
            "::1:8081",
            "a b:8081",
        ] {
            let err = validate_address(bad).unwrap_err();
            assert!(
                err.message().contains("HOST:PORT"),
                "{bad}: {}",
                err.message()
            );
        }
    }

    #[test]
    fn a_minted_svid_does_not_show_its_key() {
        let minted = MintedSvid {
            id: SpiffeId::new("spiffe://example.org/a").unwrap(),
            chain_pem: String::new(),
            key_pem: Secret::new("-----BEGIN PRIVATE KEY-----SECRET"),
            bundle_pem: String::new(),
            expires_at: 1,
        };
        assert!(format!("{minted:?}").contains("spiffe://example.org/a"));
        assert!(!format!("{minted:?}").contains("SECRET"));
    }
}
