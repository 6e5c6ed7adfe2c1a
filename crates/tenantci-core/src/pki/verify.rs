//! Checks of a client credential against what it claims: the key is the certificate's, and
//! the certificate chains to a ClientCA (as kube-apiserver's `--client-ca-file` verifies it).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use time::OffsetDateTime;

/// Whether the PEM private key `key_pem` (PKCS#8, SEC1 or PKCS#1) is the key of the
/// certificate whose SubjectPublicKeyInfo is `cert_spki`.
pub fn key_matches(cert_spki: &[u8], key_pem: &str) -> Result<bool, String> {
    crate::tls::ensure_crypto_provider();
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| e.to_string())?
        .ok_or("no PEM private key in it")?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("unsupported key: {e}"))?;
    let spki = signing
        .public_key()
        .ok_or("the key type does not expose its public key")?;
    Ok(spki.as_ref() == cert_spki)
}

/// Verifies that `cert_der` is a client certificate issued by a CA of `ca_pem`, at `at` (the
/// caller picks an instant within the certificate's validity to check the chain alone).
pub fn chains_to(cert_der: &[u8], ca_pem: &str, at: OffsetDateTime) -> Result<(), String> {
    crate::tls::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|e| e.to_string())?;
    let secs = u64::try_from(at.unix_timestamp()).unwrap_or(0);
    let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    verifier
        .verify_client_cert(&CertificateDer::from(cert_der.to_vec()), &[], now)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::inspect::CertInfo;
    use crate::pki::{CertificateAuthority, issue};

    #[test]
    fn a_credential_matches_its_key_and_chains_to_its_ca_only() {
        let day = std::time::Duration::from_secs(86_400);
        let ca = CertificateAuthority::generate("client-ca", day).unwrap();
        let other_ca = CertificateAuthority::generate("other-ca", day).unwrap();
        let spec = issue::ClientCertSpec {
            common_name: "gitlab-runner".into(),
            organizations: vec!["gitlab-runner".into()],
            valid_for: day,
            key_type: issue::KeyType::EcdsaP256,
        };
        let a = issue::client_cert(&ca, &spec).unwrap();
        let b = issue::client_cert(&ca, &spec).unwrap();
        let info = CertInfo::from_pem(&a.cert_pem).unwrap();
        assert!(key_matches(&info.spki_der, &a.key_pem).unwrap());
        assert!(!key_matches(&info.spki_der, &b.key_pem).unwrap());
        let der = pem::parse(&a.cert_pem).unwrap().into_contents();
        let now = OffsetDateTime::now_utc();
        chains_to(&der, ca.cert_pem(), now).unwrap();
        assert!(chains_to(&der, other_ca.cert_pem(), now).is_err());
    }
}
