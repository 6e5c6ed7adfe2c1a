//! Self-signed server certificates, accepted the way gitlab-runner (Go) accepts them.
//!
//! `openssl req -x509` marks its certificate CA:TRUE. Given as the trusted CA file, Go builds
//! the chain [leaf == root] and accepts it; webpki refuses any CA:TRUE end entity
//! (`CaUsedAsEndEntity`). So tenantci refused a GitLab that gitlab-runner would reach with the
//! very same file. [`PinnedSelfSigned`] wraps the standard verifier and turns exactly that one
//! refusal into an acceptance when the presented certificate is byte-identical to one the
//! operator trusts and is valid for the server's name. Every other outcome — another CA:TRUE
//! certificate, an expired one (webpki checks validity before basic constraints, so an
//! expired pinned certificate fails with `Expired`), a wrong name — is the standard
//! verifier's answer. rustls has no such option, hence this small wrapper.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::{Error, Result};

/// A server certificate verifier: the standard webpki one, except that a CA:TRUE certificate
/// presented as the server's own is accepted when it is byte-identical to a pinned one and
/// valid for the server's name.
#[derive(Debug)]
pub struct PinnedSelfSigned {
    standard: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl PinnedSelfSigned {
    /// The standard verifier over `roots`; `pinned` are the operator's certificates that may
    /// be presented as the server's own.
    pub fn new(roots: Arc<RootCertStore>, pinned: Vec<CertificateDer<'static>>) -> Result<Self> {
        let standard = WebPkiServerVerifier::builder(roots)
            .build()
            .map_err(|e| Error::bad_input("cannot build the TLS verifier").caused_by(e))?;
        Ok(PinnedSelfSigned { standard, pinned })
    }
}

/// Whether webpki refused the certificate only for being a CA presented as the server's own.
fn is_ca_used_as_end_entity(err: &rustls::Error) -> bool {
    match err {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}

impl ServerCertVerifier for PinnedSelfSigned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let standard = self.standard.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match standard {
            Err(err) if is_ca_used_as_end_entity(&err) => {
                let pinned = self
                    .pinned
                    .iter()
                    .any(|c| c.as_ref() == end_entity.as_ref());
                if !pinned {
                    return Err(err);
                }
                verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.standard.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.standard.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.standard.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A self-signed CA:TRUE certificate for `names`, as `openssl req -x509` makes one.
    fn self_signed(names: &[&str]) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn verifier(pinned: &[CertificateDer<'static>]) -> PinnedSelfSigned {
        crate::tls::ensure_crypto_provider();
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(pinned.iter().cloned());
        PinnedSelfSigned::new(Arc::new(roots), pinned.to_vec()).unwrap()
    }

    fn verify(v: &PinnedSelfSigned, cert: &CertificateDer<'_>, name: &str) -> bool {
        let now = UnixTime::since_unix_epoch(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                + Duration::from_secs(60),
        );
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], now).is_ok()
    }

    #[test]
    fn a_trusted_self_signed_certificate_is_accepted_for_its_own_name_only() {
        let gitlab = self_signed(&["gitlab.example.org", "127.0.0.1"]);
        let v = verifier(std::slice::from_ref(&gitlab));
        assert!(verify(&v, &gitlab, "gitlab.example.org"));
        assert!(verify(&v, &gitlab, "127.0.0.1"));
        assert!(!verify(&v, &gitlab, "other.example.org"));
    }

    #[test]
    fn another_self_signed_certificate_for_the_same_name_is_refused() {
        let trusted = self_signed(&["gitlab.example.org"]);
        let impostor = self_signed(&["gitlab.example.org"]);
        let v = verifier(&[trusted]);
        assert!(!verify(&v, &impostor, "gitlab.example.org"));
    }

    #[test]
    fn without_the_wrapper_webpki_refuses_the_same_certificate() {
        // The defect this module exists for: proves the test above exercises the wrapper.
        let gitlab = self_signed(&["gitlab.example.org"]);
        let v = verifier(std::slice::from_ref(&gitlab));
        let now = UnixTime::now();
        let name = ServerName::try_from("gitlab.example.org").unwrap();
        let err = v
            .standard
            .verify_server_cert(&gitlab, &[], &name, &[], now)
            .unwrap_err();
        assert!(is_ca_used_as_end_entity(&err), "{err:?}");
    }
}
