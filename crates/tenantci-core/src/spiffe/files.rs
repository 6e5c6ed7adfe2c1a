//! The `files:DIR` source: a directory that spiffe-helper (or an operator) keeps current with
//! `svid.pem` (leaf first, then intermediates), `svid_key.pem` (PKCS#8, 0600 like every key
//! file tenantci reads) and `svid_bundle.pem` (the trust domain's CAs).
//!
//! Re-read on change, lazily: each [`SvidSource::current`] compares the three files' inode,
//! size and modification time with the last read (three `stat`s, per TLS handshake) and
//! reads them again only when one moved. spiffe-helper rewrites the files one after the
//! other, so a read can see a new certificate with the old key: that SVID is refused by its
//! key check and the previous one is kept until the next call sees the set complete.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::CertificateDer;

use super::svid::Svid;
use super::svid::SvidSource;
use crate::input::MAX_PEM;
use crate::{Error, Result};

/// The SVID's certificate chain, leaf first (PEM).
pub const CERT_FILE: &str = "svid.pem";
/// The SVID's private key, PKCS#8 PEM, mode 0600.
pub const KEY_FILE: &str = "svid_key.pem";
/// The trust domain's CA certificates (PEM), the roots a peer's SVID must chain to.
pub const BUNDLE_FILE: &str = "svid_bundle.pem";

/// What identifies one version of a file without reading it.
type Stamp = (u64, u64, i64, i64, u64);

/// The `files:DIR` source: the SVID read from the three files, read again when one changes.
#[derive(Debug)]
pub struct FilesSource {
    dir: PathBuf,
    last: Mutex<([Stamp; 3], Arc<Svid>)>,
}

impl FilesSource {
    /// Reads the directory once; a missing, open (key not 0600) or inconsistent set is refused.
    pub fn open(dir: &Path) -> Result<Self> {
        let stamps = stamps(dir)?;
        let svid = Arc::new(read(dir)?);
        Ok(FilesSource {
            dir: dir.to_path_buf(),
            last: Mutex::new((stamps, svid)),
        })
    }
}

impl SvidSource for FilesSource {
    fn current(&self) -> Result<Arc<Svid>> {
        let mut last = self.last.lock().expect("the files source lock");
        let now = match stamps(&self.dir) {
            Ok(s) => s,
            Err(e) => {
                // Mid-rotation (a file renamed away): keep serving what was read last.
                tracing::warn!(dir = %self.dir.display(), error = %e.render(), "SVID files not readable; keeping the SVID read before");
                return Ok(last.1.clone());
            }
        };
        if now == last.0 {
            return Ok(last.1.clone());
        }
        match read(&self.dir) {
            Ok(svid) => {
                tracing::info!(dir = %self.dir.display(), id = %svid.id(), "SVID files changed; read again");
                *last = (now, Arc::new(svid));
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e.render(), "SVID files changed but do not form an SVID yet; keeping the SVID read before");
            }
        }
        Ok(last.1.clone())
    }
}

fn stamps(dir: &Path) -> Result<[Stamp; 3]> {
    let one = |name: &str| -> Result<Stamp> {
        let path = dir.join(name);
        let m =
            std::fs::metadata(&path).map_err(|e| Error::unreadable("an SVID file", &path, e))?;
        Ok((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
    };
    Ok([one(CERT_FILE)?, one(KEY_FILE)?, one(BUNDLE_FILE)?])
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = crate::input::read_bytes(what, path, MAX_PEM)?;
    crate::tls::parse_ca_bundle(what, path, &pem)
}

/// Reads the three files into an SVID.
pub fn read(dir: &Path) -> Result<Svid> {
    let chain = certs("the SVID certificate file", &dir.join(CERT_FILE))?;
    let key_path = dir.join(KEY_FILE);
    let key_pem = crate::input::read_private("the SVID key file", &key_path, MAX_PEM)?;
    let key = match rustls_pemfile::private_key(&mut key_pem.as_bytes()) {
        Ok(Some(rustls::pki_types::PrivateKeyDer::Pkcs8(k))) => k,
        _ => {
            return Err(Error::bad_input(format!(
                "the SVID key file `{}` holds no PKCS#8 private key",
                key_path.display()
            ))
            .hint("an X509-SVID key is PEM `-----BEGIN PRIVATE KEY-----` (PKCS#8), as spiffe-helper writes it"));
        }
    };
    let bundle = certs("the SVID bundle file", &dir.join(BUNDLE_FILE))?;
    Svid::from_der(chain, key.secret_pkcs8_der(), &bundle).map_err(|e| {
        Error::bad_input(format!(
            "the SVID files in `{}` do not form an X509-SVID",
            dir.display()
        ))
        .caused_by(e)
    })
}
