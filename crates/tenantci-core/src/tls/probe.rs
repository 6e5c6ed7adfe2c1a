//! Whether a CA an operator gave verifies a server: one TLS handshake with that CA as the only
//! trust root, before anything is minted or written with it. A credential whose `ca.crt` does
//! not verify its server fails at its first request, long after the run wrote it.
//!
//! Boundary: connects and handshakes, sends no request and presents no client certificate.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};

use crate::{Error, Result};

/// How long the connection and handshake may take before the server counts as unreachable.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// What the handshake came to.
#[derive(Debug)]
pub enum Verdict {
    /// The server's certificate chains to the CA and is valid for the URL's host.
    Verified,
    /// The server's certificate did not verify against the CA; rustls's reason.
    NotVerified(String),
    /// No handshake: refused, reset, timed out (exit 3 for the caller, naming the server).
    Unreached(std::io::Error),
}

/// Handshakes with the `https://host:port` in `url` trusting exactly `ca`. Errs (exit 2) only
/// when `url` or `ca` cannot be used at all.
pub async fn verify_server(url: &str, ca: &[CertificateDer<'static>]) -> Result<Verdict> {
    super::ensure_crypto_provider();
    let (host, port) = host_port(url)?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(ca.iter().cloned());
    if added == 0 {
        return Err(
            Error::bad_input("the CA holds no certificate usable as a trust root")
                .hint("give the PEM certificate of the CA that signed the server's certificate"),
        );
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone())
        .map_err(|e| Error::bad_input(format!("`{url}` has no usable host name")).caused_by(e))?;
    let handshake = async {
        let tcp = match tokio::net::TcpStream::connect((host.as_str(), port)).await {
            Ok(tcp) => tcp,
            Err(e) => return Verdict::Unreached(e),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        match connector.connect(name, tcp).await {
            Ok(_) => Verdict::Verified,
            Err(e) => match certificate_error(&e) {
                Some(reason) => Verdict::NotVerified(reason),
                None => Verdict::Unreached(e),
            },
        }
    };
    Ok(tokio::time::timeout(TIMEOUT, handshake)
        .await
        .unwrap_or_else(|_| {
            Verdict::Unreached(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no TLS handshake within {TIMEOUT:?}"),
            ))
        }))
}

/// A serving CA a run will hand on (in a credential's `ca.crt`), to be checked against the
/// server it is for before the run writes anything.
pub struct ServingCa<'a> {
    /// Names the CA in errors: "the serving CA given by --server-ca".
    pub what: &'a str,
    /// The CA bundle file (PEM).
    pub path: &'a Path,
    /// Names the server: "the tenant apiserver of cluster `ci`".
    pub server: &'a str,
    /// The server's URL, `https://host[:port]`.
    pub url: &'a str,
    /// What to pass instead when the CA does not verify the server.
    pub fix: String,
    /// How to make the server reachable.
    pub unreachable_hint: &'a str,
}

impl ServingCa<'_> {
    /// Exit 2 naming the CA, the server and the fix when the CA does not verify the server;
    /// exit 3 when the server cannot be reached.
    pub async fn require(&self) -> Result<()> {
        let ca = super::read_ca_bundle(self.what, self.path)?;
        match verify_server(self.url, &ca).await? {
            Verdict::Verified => Ok(()),
            Verdict::NotVerified(reason) => Err(Error::bad_input(format!(
                "{} `{}` does not verify {} at {} ({reason})",
                self.what,
                self.path.display(),
                self.server,
                self.url
            ))
            .hint(self.fix.clone())),
            Verdict::Unreached(e) => Err(Error::external(format!(
                "cannot reach {} at {}",
                self.server, self.url
            ))
            .caused_by(e)
            .hint(self.unreachable_hint.to_string())),
        }
    }
}

/// rustls's verdict on the peer, when that is why the handshake failed.
fn certificate_error(e: &std::io::Error) -> Option<String> {
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    match inner {
        rustls::Error::InvalidCertificate(_) => Some(inner.to_string()),
        _ => None,
    }
}

fn host_port(url: &str) -> Result<(String, u16)> {
    let bad = || {
        Error::bad_input(format!("`{url}` is not an https:// URL with a host"))
            .hint("pass the server as https://<host>:<port>")
    };
    let uri: http::Uri = url.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("https") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, uri.port_u16().unwrap_or(443)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_with_a_host_are_probed() {
        assert_eq!(
            host_port("https://127.0.0.1:6443").unwrap(),
            ("127.0.0.1".to_string(), 6443)
        );
        assert_eq!(
            host_port("https://[::1]/").unwrap(),
            ("::1".to_string(), 443)
        );
        assert_eq!(host_port("http://127.0.0.1:80").unwrap_err().exit_code(), 2);
        assert_eq!(host_port("no url").unwrap_err().exit_code(), 2);
    }
}
