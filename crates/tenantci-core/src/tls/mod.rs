//! rustls process set-up, and the client trust tenantci uses to reach servers it does not run
//! (GitLab): the platform's public roots plus an operator's CA bundle, with a self-signed
//! server certificate in that bundle accepted as Go's verifier accepts it ([`pinned`]).
//!
//! The workspace links one provider, ring (scripts/check-layering.sh keeps aws-lc-rs out), so
//! rustls could pick it by itself; [`ensure_crypto_provider`] still installs it explicitly once,
//! so a dependency that someday enables a second provider cannot make rustls refuse to guess
//! at the first handshake. Call it before building any rustls config (cheap, idempotent).

pub mod pinned;
pub mod probe;

use std::path::Path;
use std::sync::{Arc, Once};

use rustls::pki_types::CertificateDer;

use crate::{Error, Result};

/// Installs ring as rustls's process-wide crypto provider, once; a provider installed
/// before is kept. Cheap and idempotent.
pub fn ensure_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A CA bundle is a few certificates; anything near this is a wrong path (or `/dev/zero`).
pub const MAX_CA_BUNDLE_BYTES: u64 = crate::input::MAX_PEM;

/// The certificates of a PEM bundle file, `what` naming it in errors ("the GitLab CA file").
/// Read with a size bound, regular files only; a file without a certificate is refused.
pub fn read_ca_bundle(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = crate::input::read_bytes(what, path, MAX_CA_BUNDLE_BYTES)?;
    parse_ca_bundle(what, path, &pem)
}

/// [`read_ca_bundle`] on bytes already read; `path` only names them.
pub fn parse_ca_bundle(
    what: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>> {
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::bad_input(format!("{what} `{}` is not a PEM bundle", path.display()))
                .caused_by(e)
                .hint("give the CA certificate(s) in PEM (-----BEGIN CERTIFICATE-----)")
        })?;
    if certs.is_empty() {
        return Err(Error::bad_input(format!(
            "{what} `{}` holds no PEM certificate",
            path.display()
        ))
        .hint("give the CA certificate(s) in PEM (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(certs)
}

/// A client config trusting the public web roots and `extra` (an operator's CA bundle), with
/// a self-signed server certificate that is itself in `extra` accepted ([`pinned`]).
pub fn client_config(extra: &[CertificateDer<'static>]) -> Result<rustls::ClientConfig> {
    ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let (added, ignored) = roots.add_parsable_certificates(extra.iter().cloned());
    if added == 0 && !extra.is_empty() {
        return Err(Error::bad_input(format!(
            "none of the {ignored} certificate(s) in the CA bundle can be a trust anchor"
        ))
        .hint("give the PEM certificate of the CA that signed the server's certificate"));
    }
    let verifier = pinned::PinnedSelfSigned::new(Arc::new(roots), extra.to_vec())?;
    Ok(rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}
