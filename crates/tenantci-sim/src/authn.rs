//! Client-certificate authentication after the handshake, at each request (facts §1;
//! kube-apiserver's x509 authenticator verifies the connection's certificate per request, so
//! one that expires on an open connection is refused from then on): the chain must verify
//! against the ClientCA with EKU clientAuth; CN is the user, every O a group, and
//! `system:authenticated` is added. No certificate is anonymous; a certificate that does not
//! verify, or has an empty CN, is rejected (401 on every request).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::api::Identity;
use super::authz::UserInfo;
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

pub struct Authenticator {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl Authenticator {
    /// Trusts the CA certificates in `ca_pem`.
    pub fn new(ca_pem: &str) -> Result<Self> {
        tenantci_core::tls::ensure_crypto_provider();
        let mut roots = RootCertStore::empty();
        for cert in super::tls::parse_certs(ca_pem)? {
            roots
                .add(cert)
                .map_err(|e| Error::bad_input(format!("cannot trust the ClientCA: {e}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| Error::external(format!("cannot build the client verifier: {e}")))?;
        Ok(Authenticator { verifier })
    }

    pub fn authenticate(&self, chain: Option<&[CertificateDer<'static>]>) -> Identity {
        let Some((leaf, intermediates)) = chain.and_then(|c| c.split_first()) else {
            return Identity::Anonymous;
        };
        if self
            .verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .is_err()
        {
            return Identity::Rejected;
        }
        let Ok(info) = CertInfo::from_der(leaf) else {
            return Identity::Rejected;
        };
        let name = info.common_name.unwrap_or_default();
        if name.is_empty() {
            return Identity::Rejected;
        }
        let mut groups = info.organizations;
        groups.push("system:authenticated".into());
        Identity::User(UserInfo { name, groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};

    fn der(pem: &str) -> Vec<CertificateDer<'static>> {
        super::super::tls::parse_certs(pem).unwrap()
    }

    #[test]
    fn maps_cn_and_o_and_rejects_other_cas() {
        let ca = CertificateAuthority::generate("c", Duration::from_secs(3600)).unwrap();
        let other = CertificateAuthority::generate("c", Duration::from_secs(3600)).unwrap();
        let spec = ClientCertSpec {
            common_name: "gitlab-runner".into(),
            organizations: vec!["gitlab-runner".into()],
            valid_for: Duration::from_secs(600),
            key_type: KeyType::EcdsaP256,
        };
        let a = Authenticator::new(ca.cert_pem()).unwrap();
        let good = issue::client_cert(&ca, &spec).unwrap();
        match a.authenticate(Some(&der(&good.cert_pem))) {
            Identity::User(u) => {
                assert_eq!(u.name, "gitlab-runner");
                assert_eq!(u.groups, vec!["gitlab-runner", "system:authenticated"]);
            }
            other => panic!("{other:?}"),
        }
        let bad = issue::client_cert(&other, &spec).unwrap();
        assert!(matches!(
            a.authenticate(Some(&der(&bad.cert_pem))),
            Identity::Rejected
        ));
        assert!(matches!(a.authenticate(None), Identity::Anonymous));
    }
}
