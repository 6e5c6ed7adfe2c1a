//! rustls configs for SPIFFE mTLS, fed by an [`SvidSource`] so that every handshake presents
//! the current SVID and verifies against the current bundle (rotation needs no restart).
//!
//! - [`server_config`]: presents the SVID and REQUIRES a client SVID that chains to the trust
//!   domain's bundle and names an ID in that trust domain; [`peer_id`] gives the caller the
//!   client's SPIFFE ID per connection, for its own per-request authorization (over HTTP:
//!   the [`PeerId`] request extension the facade transport adds).
//! - [`client_config`]: presents the SVID and accepts the server only when its SVID chains to
//!   the bundle and names exactly the expected SPIFFE ID. DNS names and IP addresses are not
//!   checked: the URI SAN is the server's identity.
//!
//! Why not `spiffe-rustls`: its builders take the `spiffe` crate's concrete `X509Source`
//! (the Workload API only), and `--spiffe-source files:DIR` must feed the same configs. The
//! verifiers here are thin: the chain checks are rustls' own webpki ones
//! (`WebPkiClientVerifier`, `verify_server_cert_signed_by_trust_anchor`, with the installed
//! provider's algorithms); only the SPIFFE ID check on top is ours.

use std::sync::Arc;

use ::spiffe::{SpiffeId, TrustDomain};
use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    ServerConfig, SignatureScheme,
};

use super::svid::SvidSource;
use super::svid::id_of;

/// The TLS server name a client sends: any fixed name, since the server is verified by its
/// SPIFFE ID. `.invalid` so that it can never be mistaken for a resolvable host.
pub const SERVER_NAME: &str = "spiffe.invalid";

/// A server config presenting `source`'s SVID and requiring a client SVID of `trust_domain`.
pub fn server_config(source: Arc<dyn SvidSource>, trust_domain: TrustDomain) -> ServerConfig {
    crate::tls::ensure_crypto_provider();
    ServerConfig::builder()
        .with_client_cert_verifier(Arc::new(ClientSvidVerifier {
            source: source.clone(),
            trust_domain,
            provider: provider(),
        }))
        .with_cert_resolver(Arc::new(CurrentSvid(source)))
}

/// A client config presenting `source`'s SVID and accepting only a server whose SVID is `expected`.
pub fn client_config(source: Arc<dyn SvidSource>, expected: SpiffeId) -> ClientConfig {
    crate::tls::ensure_crypto_provider();
    ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ServerSvidVerifier {
            source: source.clone(),
            expected,
            provider: provider(),
        }))
        .with_client_cert_resolver(Arc::new(CurrentSvid(source)))
}

/// The SPIFFE ID of the peer of an established connection (`tokio_rustls`' `get_ref().1`).
/// With [`server_config`] every accepted connection has one.
pub fn peer_id(conn: &rustls::CommonState) -> Option<SpiffeId> {
    conn.peer_certificates()?.first().and_then(id_of)
}

/// The client's SPIFFE ID as an HTTP request extension: the facade transport
/// (`forge::gitea::facade::spawn_router`) adds it to every request of a connection accepted
/// with [`server_config`], so a handler authorizes per request with `Extension<PeerId>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerId(pub SpiffeId);

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .expect("ensure_crypto_provider installed one")
        .clone()
}

fn refused(why: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        SpiffeRefusal(why),
    ))))
}

/// Why a peer's SVID was refused beyond the chain checks (wrong trust domain or ID).
#[derive(Debug)]
struct SpiffeRefusal(String);

impl std::fmt::Display for SpiffeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpiffeRefusal {}

/// Hands out the source's current SVID, as server certificate and as client certificate.
#[derive(Debug)]
struct CurrentSvid(Arc<dyn SvidSource>);

impl CurrentSvid {
    fn key(&self) -> Option<Arc<CertifiedKey>> {
        match self.0.current() {
            Ok(svid) => Some(svid.certified_key().clone()),
            Err(e) => {
                tracing::warn!(error = %e.render(), "no X509-SVID to present from the SVID source: this TLS handshake has no certificate of ours and fails; the next one asks the source again");
                None
            }
        }
    }
}

impl ResolvesServerCert for CurrentSvid {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.key()
    }
}

impl ResolvesClientCert for CurrentSvid {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.key()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[derive(Debug)]
struct ClientSvidVerifier {
    source: Arc<dyn SvidSource>,
    trust_domain: TrustDomain,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientSvidVerifier {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // No hints: the bundle rotates and a borrowed list cannot follow it; SVID clients
    // present their one SVID whatever the hints say.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let svid = self
            .source
            .current()
            .map_err(|e| rustls::Error::General(e.render()))?;
        // Built per handshake from the current bundle (a few roots): cheap next to the
        // handshake, and a rotated bundle is used at once.
        let webpki = WebPkiClientVerifier::builder_with_provider(
            svid.roots().clone(),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| rustls::Error::General(format!("client verifier: {e}")))?;
        webpki.verify_client_cert(end_entity, intermediates, now)?;
        let id = id_of(end_entity)
            .ok_or_else(|| refused("the client certificate carries no SPIFFE ID".into()))?;
        if !id.is_member_of(&self.trust_domain) {
            return Err(refused(format!(
                "the client SVID `{id}` is not of the trust domain `{}`",
                self.trust_domain
            )));
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        signatures(&self.provider).tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        signatures(&self.provider).tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        signatures(&self.provider).schemes()
    }
}

/// The handshake-signature checks both verifiers make: the provider's algorithms, as rustls'
/// own webpki verifiers check them (the SPIFFE part is only in which chain and ID they accept).
struct Signatures<'a>(&'a CryptoProvider);

fn signatures(provider: &CryptoProvider) -> Signatures<'_> {
    Signatures(provider)
}

impl Signatures<'_> {
    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain and the serverAuth usage of `end_entity` against `roots`, as rustls checks a
/// server certificate, without the name check (an SVID is named by its SPIFFE ID instead).
pub(crate) fn chains_to(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &RootCertStore,
    now: UnixTime,
    provider: &CryptoProvider,
) -> Result<(), rustls::Error> {
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &ParsedCertificate::try_from(end_entity)?,
        roots,
        intermediates,
        now,
        provider.signature_verification_algorithms.all,
    )
}

#[derive(Debug)]
struct ServerSvidVerifier {
    source: Arc<dyn SvidSource>,
    expected: SpiffeId,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ServerSvidVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let svid = self
            .source
            .current()
            .map_err(|e| rustls::Error::General(e.render()))?;
        chains_to(end_entity, intermediates, svid.roots(), now, &self.provider)?;
        match id_of(end_entity) {
            Some(id) if id == self.expected => Ok(ServerCertVerified::assertion()),
            Some(id) => Err(refused(format!(
                "the server's SVID is `{id}`, not the expected `{}`",
                self.expected
            ))),
            None => Err(refused(format!(
                "the server's certificate carries no SPIFFE ID (expected `{}`)",
                self.expected
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        signatures(&self.provider).tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        signatures(&self.provider).tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        signatures(&self.provider).schemes()
    }
}
