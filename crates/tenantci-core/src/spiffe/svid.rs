//! One X509-SVID as rustls uses it: the SPIFFE ID, the certificate chain with its signing key
//! (a `CertifiedKey`), and the trust domain's bundle as roots. Built from DER, whichever
//! source it came from; the leaf's checks (one SPIFFE ID URI SAN, not a CA) are the `spiffe`
//! crate's, so both sources accept exactly what the Workload API client accepts.

use std::fmt;
use std::sync::Arc;

use ::spiffe::{SpiffeId, X509Svid};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use crate::{Error, Result};

/// An X509-SVID ready for rustls. `Debug` shows the ID only, never the key.
#[derive(Clone)]
pub struct Svid {
    id: SpiffeId,
    key: Arc<CertifiedKey>,
    roots: Arc<RootCertStore>,
    /// The bundle as given, DER: what a minted SVID's holder gets as `svid_bundle.pem`.
    bundle: Arc<[CertificateDer<'static>]>,
}

impl fmt::Debug for Svid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Svid")
            .field("id", &self.id.to_string())
            .field("chain", &self.key.cert.len())
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

impl Svid {
    /// Builds the SVID from its chain (leaf first), its PKCS#8 key and the trust domain's
    /// bundle. Refused: a leaf that is not an SVID, a key that is not the leaf's, an empty
    /// bundle.
    pub fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: &[u8],
        bundle: &[CertificateDer<'static>],
    ) -> Result<Self> {
        crate::tls::ensure_crypto_provider();
        let joined: Vec<u8> = chain.iter().flat_map(|c| c.as_ref().to_vec()).collect();
        let parsed = X509Svid::parse_from_der(&joined, key)
            .map_err(|e| Error::bad_input("the certificate is not an X509-SVID").caused_by(e))?;
        let id = parsed.spiffe_id().clone();
        let provider = rustls::crypto::CryptoProvider::get_default()
            .expect("ensure_crypto_provider installed one");
        let signing = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec())))
            .map_err(|e| {
                Error::bad_input(format!("the private key of the SVID `{id}` is not usable"))
                    .caused_by(e)
            })?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| {
            Error::bad_input(format!(
                "the private key is not the key of the SVID `{id}` (a rotation half written?)"
            ))
            .caused_by(e)
        })?;
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(bundle.iter().cloned());
        if added == 0 {
            return Err(Error::bad_input(format!(
                "the bundle of the trust domain of `{id}` holds no usable certificate"
            )));
        }
        Ok(Svid {
            id,
            key: Arc::new(certified),
            roots: Arc::new(roots),
            bundle: bundle.iter().cloned().collect(),
        })
    }

    /// The SVID's SPIFFE ID.
    pub fn id(&self) -> &SpiffeId {
        &self.id
    }

    /// The chain and signing key a rustls resolver hands out.
    pub fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.key
    }

    /// The trust domain's bundle: the roots a peer's SVID must chain to.
    pub fn roots(&self) -> &Arc<RootCertStore> {
        &self.roots
    }

    /// The trust domain's CA certificates (DER) as given to [`Svid::from_der`].
    pub fn bundle(&self) -> &[CertificateDer<'static>] {
        &self.bundle
    }

    /// The leaf certificate (for comparing two SVIDs, e.g. after a rotation).
    pub fn leaf(&self) -> &CertificateDer<'static> {
        &self.key.cert[0]
    }
}

/// The SPIFFE ID of a DER certificate: its single SPIFFE URI SAN, as the `spiffe` crate reads it.
pub fn id_of(cert: &CertificateDer<'_>) -> Option<SpiffeId> {
    ::spiffe::cert::spiffe_id_from_der(cert.as_ref()).ok()
}

/// The current SVID of a process; rotation shows as a different `Svid` on a later call.
/// Where it comes from (the Workload API, a directory) is `source`'s choice.
pub trait SvidSource: Send + Sync + std::fmt::Debug {
    /// The SVID to present now; an error when there is none to present.
    fn current(&self) -> Result<Arc<Svid>>;
}

/// An SVID that never rotates: a process that issues its own (the simulator's SPIRE server
/// double) and tests.
#[derive(Debug, Clone)]
pub struct FixedSource(pub Arc<Svid>);

impl SvidSource for FixedSource {
    fn current(&self) -> Result<Arc<Svid>> {
        Ok(self.0.clone())
    }
}
