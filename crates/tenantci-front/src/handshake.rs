//! The outer TLS of the front: the client names its cluster by ALPN, the front answers with its
//! own certificate and requires a client certificate chaining to THAT cluster's ClientCA. The
//! allow-list and deny-list are checked inside the handshake (`Gate`), so a refused client gets
//! a TLS alert (`access_denied`, `certificate_revoked`) and nothing is ever opened upstream.
//! Builds from files already read (`rules` reads and re-reads them); does not relay (`relay`)
//! or resolve the apiserver (`serve`).

use std::collections::HashMap;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, PeerIncompatible,
    ServerConfig, SignatureScheme,
};

use super::admit::{self, Client, Refusal};
use super::config::{ClusterRule, FrontConfig};
use super::deny::DenyList;
use tenantci_core::gateway::layout::StateDir;
use tenantci_core::{Error, Result};

/// The outer session's one version, on both ends (`connect` dials with it too).
pub const TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// One cluster's ClientCA bundle as rustls reads it: parsed once per change of its file, and
/// shared by every rebuild of [`Configs`] in between (a deny-list change rebuilds them).
pub type ClientRoots = Arc<rustls::RootCertStore>;

/// Reads cluster `cluster`'s ClientCA bundle from the state directory (every certificate in it
/// is a root: a new CA appended beside the old one admits both during a rotation).
pub fn client_roots(state: &StateDir, cluster: &str) -> Result<ClientRoots> {
    let ca_path = state.cluster(cluster).client_ca_cert;
    let cas =
        tenantci_core::tls::read_ca_bundle(&format!("cluster `{cluster}`'s ClientCA"), &ca_path)?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(cas);
    if added == 0 {
        return Err(Error::bad_input(format!(
            "cluster `{cluster}`'s ClientCA `{}` holds no certificate rustls can use",
            ca_path.display()
        ))
        .hint("is the cluster's PKI in the state directory? (`tenantci pki init-cluster`)"));
    }
    Ok(Arc::new(roots))
}

/// The front's serving certificate chain and key, checked to be a pair.
pub fn serving_key(config: &FrontConfig) -> Result<Arc<CertifiedKey>> {
    tenantci_core::tls::ensure_crypto_provider();
    let (chain, key) = serving_pair(config)?;
    let not_a_pair = |e: rustls::Error| {
        Error::bad_input(format!(
            "the front's certificate `{}` and key `{}` do not form a pair",
            config.serving_cert.display(),
            config.serving_key.display()
        ))
        .caused_by(e)
        .hint("give the key of that certificate (`tenantci front init` writes both)")
    };
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(not_a_pair)?;
    certified.keys_match().map_err(not_a_pair)?;
    Ok(Arc::new(certified))
}

/// One server config per cluster, chosen from the ClientHello's ALPN. Immutable: a change of
/// the config, a ClientCA, the deny-list or the serving pair builds a new one (`rules`), so a
/// handshake sees one consistent set whichever way a change races it.
pub struct Configs {
    by_cluster: HashMap<String, Arc<ServerConfig>>,
}

impl Configs {
    /// The server configs from what is already read: every cluster of `config` must have its
    /// roots in `roots`.
    pub fn build(
        config: &FrontConfig,
        deny: &Arc<DenyList>,
        roots: &HashMap<String, ClientRoots>,
        serving: &Arc<CertifiedKey>,
    ) -> Result<Self> {
        tenantci_core::tls::ensure_crypto_provider();
        let mut by_cluster = HashMap::new();
        for rule in &config.clusters {
            let Some(cluster_roots) = roots.get(&rule.name) else {
                return Err(Error::bad_input(format!(
                    "cluster `{}`'s ClientCA was not read",
                    rule.name
                )));
            };
            let inner = WebPkiClientVerifier::builder(cluster_roots.clone())
                .build()
                .map_err(|e| {
                    Error::bad_input(format!("cluster `{}`'s ClientCA cannot verify clients", rule.name))
                        .caused_by(e)
                        .hint("is the cluster's PKI in the state directory? (`tenantci pki init-cluster`)")
                })?;
            let gate = Gate {
                rule: rule.clone(),
                inner,
                deny: deny.clone(),
            };
            // TLS 1.3 only: under 1.2 the client's certificate crosses the network in clear,
            // and both ends are tenantci.
            let mut server = ServerConfig::builder_with_protocol_versions(TLS13_ONLY)
                .with_client_cert_verifier(Arc::new(gate))
                .with_cert_resolver(Arc::new(SingleCertAndKey::from(serving.clone())));
            server.alpn_protocols = vec![
                super::alpn_for(&rule.name),
                super::renew_alpn_for(&rule.name),
            ];
            // No resumption: a resumed session skips the client certificate, and with it the
            // allow-list and the deny-list. Every tunnel is a full handshake.
            server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            server.send_tls13_tickets = 0;
            by_cluster.insert(rule.name.clone(), Arc::new(server));
        }
        Ok(Configs { by_cluster })
    }

    /// The cluster named by the ClientHello and its config; None: not ours, or not configured.
    pub fn pick(&self, hello: &ClientHello<'_>) -> Option<(String, Arc<ServerConfig>)> {
        hello.alpn()?.find_map(|p| {
            let name = super::cluster_from_alpn(p)?;
            self.by_cluster
                .get(name)
                .map(|c| (name.to_string(), c.clone()))
        })
    }
}

fn serving_pair(
    config: &FrontConfig,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = tenantci_core::tls::read_ca_bundle(
        "the front's serving certificate",
        &config.serving_cert,
    )?;
    let key_pem = tenantci_core::input::read_private(
        "the front's serving key",
        &config.serving_key,
        tenantci_core::input::MAX_PEM,
    )?;
    let key = rustls_pemfile_key(&key_pem).ok_or_else(|| {
        Error::bad_input(format!(
            "`{}` holds no private key",
            config.serving_key.display()
        ))
        .hint("give the PEM key of the front's serving certificate")
    })?;
    Ok((chain, key))
}

fn rustls_pemfile_key(pem: &str) -> Option<PrivateKeyDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).ok()
}

/// The ClientCA's chain check, then the front's policy on the leaf.
#[derive(Debug)]
struct Gate {
    rule: ClusterRule,
    inner: Arc<dyn ClientCertVerifier>,
    deny: Arc<DenyList>,
}

impl ClientCertVerifier for Gate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let client = Client::from_der(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        admit::decide(&self.rule, &client, &self.deny).map_err(|refusal| {
            // Carried inside the error so the audit line names the subject and the reason;
            // the client sees a bad_certificate alert.
            let refused = Refused { refusal, client };
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                refused,
            ))))
        })?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A certificate that chained but was refused by the front's policy.
#[derive(Debug)]
pub struct Refused {
    /// Why [`admit::decide`] refused it.
    pub refusal: Refusal,
    /// The certificate as the front read it, for the audit line.
    pub client: Client,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, serial {})",
            self.refusal,
            self.client.subject(),
            self.client.serial
        )
    }
}

impl std::error::Error for Refused {}

/// Why a handshake failed, for the audit line: (reason, the client when the chain verified).
pub fn refusal_reason(err: &std::io::Error) -> (&'static str, Option<Client>) {
    let rustls_err = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    match rustls_err {
        Some(rustls::Error::InvalidCertificate(CertificateError::Other(other))) => {
            match other.0.downcast_ref::<Refused>() {
                Some(r) => (r.refusal.reason(), Some(r.client.clone())),
                None => ("bad_certificate", None),
            }
        }
        Some(rustls::Error::InvalidCertificate(_)) => ("bad_certificate", None),
        Some(rustls::Error::NoCertificatesPresented) => ("no_certificate", None),
        // A client without TLS 1.3: an old one, or one asked for 1.2 only.
        Some(rustls::Error::PeerIncompatible(
            PeerIncompatible::SupportedVersionsExtensionRequired
            | PeerIncompatible::Tls12NotOffered
            | PeerIncompatible::Tls12NotOfferedOrEnabled,
        )) => ("tls_version", None),
        _ => ("handshake_failed", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: rustls::Error) -> &'static str {
        refusal_reason(&std::io::Error::new(std::io::ErrorKind::InvalidData, e)).0
    }

    #[test]
    fn a_client_without_tls_1_3_is_named_as_such() {
        // What rustls says to a ClientHello of TLS 1.2 only (no supported_versions extension,
        // as `openssl s_client -tls1_2` sends), of 1.2 listed alone, of older versions.
        for e in [
            PeerIncompatible::SupportedVersionsExtensionRequired,
            PeerIncompatible::Tls12NotOfferedOrEnabled,
            PeerIncompatible::Tls12NotOffered,
        ] {
            assert_eq!(reason(rustls::Error::PeerIncompatible(e)), "tls_version");
        }
        assert_eq!(
            reason(rustls::Error::NoCertificatesPresented),
            "no_certificate"
        );
        assert_eq!(
            reason(rustls::Error::PeerIncompatible(
                PeerIncompatible::NoCipherSuitesInCommon
            )),
            "handshake_failed"
        );
    }
}
