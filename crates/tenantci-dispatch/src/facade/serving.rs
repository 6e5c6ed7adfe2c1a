//! The facade's serving certificate as the TLS server holds it: one `CertifiedKey` behind a
//! lock, handed to every new handshake, swapped when `dispatch renew` (or `dispatch init`)
//! wrote a new pair. Connections already open keep the session they negotiated; only new
//! handshakes see the new certificate, so a renewal never cuts a running task's calls.
//!
//! The swap takes only a pair that `facade::cert::check` passed (the caller's job), so what is
//! served is always a certificate executors trust for the facade host.

use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use tenantci_core::{Error, Result};

/// The current facade certificate, for rustls' `with_cert_resolver`.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    /// Serving `cert_pem` (the chain, leaf first) with `key_pem`; an error when either is not
    /// PEM or they do not fit.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<Self>> {
        Ok(Arc::new(ServingCert {
            current: RwLock::new(certified_key(cert_pem, key_pem)?),
        }))
    }

    /// Serves `cert_pem` / `key_pem` to the next handshakes.
    pub fn swap(&self, cert_pem: &str, key_pem: &str) -> Result<()> {
        let next = certified_key(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    /// The DER of the leaf certificate new handshakes get.
    pub fn current_der(&self) -> Vec<u8> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).cert[0].to_vec()
    }

    /// A server config (no client auth, h2 and HTTP/1.1) presenting the current certificate.
    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        tenantci_core::tls::ensure_crypto_provider();
        let mut cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>> {
    tenantci_core::tls::ensure_crypto_provider();
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::bad_input(format!("the facade certificate is not PEM ({e:?})")))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| {
        Error::bad_input(format!("the facade key is not a PEM private key ({e:?})"))
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| Error::bad_input("the facade key is not a usable key").caused_by(e))?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(|e| {
        Error::bad_input("the facade certificate and the facade key do not fit").caused_by(e)
    })?;
    Ok(Arc::new(ck))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenantci_core::pki::CertificateAuthority;
    use tenantci_core::pki::issue::server_cert;

    #[test]
    fn a_swap_takes_a_fitting_pair_and_refuses_a_mismatched_one() {
        let ca = CertificateAuthority::generate("t", Duration::from_secs(86400 * 10)).unwrap();
        let sans = ["127.0.0.1".to_string()];
        let a = server_cert(&ca, "127.0.0.1", &sans, Duration::from_secs(86400)).unwrap();
        let b = server_cert(&ca, "127.0.0.1", &sans, Duration::from_secs(86400)).unwrap();
        let s = ServingCert::new(&a.cert_pem, &a.key_pem).unwrap();
        let served = |s: &ServingCert| s.current_der();
        let first = served(&s);
        assert!(s.swap(&b.cert_pem, &a.key_pem).is_err());
        assert_eq!(
            served(&s),
            first,
            "a refused pair leaves the old one in use"
        );
        s.swap(&b.cert_pem, &b.key_pem).unwrap();
        assert_ne!(served(&s), first);
    }
}
