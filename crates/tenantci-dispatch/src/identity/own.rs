//! The dispatcher's own SVID at run time (`[identity]`): opened once at start and checked
//! against `identity.facade_id`, then used twice: the facade presents it to executors
//! ([`Own::facade_tls`]), and with the VM backend the dispatcher presents it to the SPIRE
//! Server API as an admin workload to mint the sandboxes' SVIDs ([`Own::server_api`]). One
//! source for both, so one rotation reaches both.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::settings::{Identity, Parsed};
use tenantci_core::spiffe::SvidSource;
use tenantci_core::spiffe::server_api::{MintError, ServerApi};
use tenantci_core::{Error, Result};

/// How long `run` waits for the dispatcher's first SVID: the SPIRE controller renders a new
/// entry within its reconcile interval (10 s by default), so this covers a fresh install.
const FIRST_SVID: Duration = Duration::from_secs(30);

/// The dispatcher's own SVID source, checked to hold `identity.facade_id`, and the parsed
/// `[identity]` section it was opened from ([`Own::open`]).
pub struct Own {
    parsed: Parsed,
    source: Arc<dyn SvidSource>,
}

impl Own {
    /// Opens the dispatcher's SVID source and checks that its ID is the facade's.
    pub async fn open(identity: &Identity) -> Result<Own> {
        let parsed = identity.parse().map_err(|e| {
            Error::bad_input(format!("the dispatcher config {e}"))
                .hint("fix the [identity] section")
        })?;
        let source = parsed.source.open(None, FIRST_SVID).await?;
        let current = source.current()?;
        if current.id() != &parsed.facade_id {
            return Err(Error::bad_input(format!(
                "the dispatcher's SVID is `{}`, but identity.facade_id is `{}`: executors would refuse this facade",
                current.id(),
                parsed.facade_id
            ))
            .hint("set identity.facade_id to the dispatcher's SPIFFE ID, or give the dispatcher the SVID of that ID"));
        }
        Ok(Own { parsed, source })
    }

    /// The facade's TLS: SPIFFE mTLS presenting the dispatcher's SVID and requiring a client
    /// SVID of the trust domain, following the source (a rotated SVID or bundle is used by
    /// the next handshake without a restart).
    pub fn facade_tls(&self) -> Arc<rustls::ServerConfig> {
        tracing::info!(id = %self.parsed.facade_id, "facade: serving SPIFFE mTLS (executor identity on)");
        let mut tls = tenantci_core::spiffe::tls::server_config(
            self.source.clone(),
            self.parsed.trust_domain.clone(),
        );
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(tls)
    }

    /// The SPIRE Server API client the VM backend mints its sandboxes' SVIDs with (None: no
    /// server configured; `Config::validate` made sure there is one when `vm` is set). One
    /// mTLS handshake with the server first: a server that presents another ID, or refuses
    /// the dispatcher's SVID, is a configuration error said now; a server that does not
    /// answer is waited out per task, like an OpenSandbox outage.
    pub async fn server_api(&self) -> Result<Option<ServerApi>> {
        let Some(server) = &self.parsed.server else {
            return Ok(None);
        };
        let api = ServerApi::new(&server.address, self.source.clone(), server.id.clone())?;
        match api.check().await {
            Ok(()) => {
                tracing::info!(server = %server.address, id = %server.id, "SPIRE Server API reached: VM executors' SVIDs are minted there")
            }
            // The sentence names the server and what was refused.
            Err(MintError::Refused(why)) => {
                return Err(Error::bad_input(why)
                .hint("check identity.server_address and identity.server_id (the server's SPIFFE ID), and that the server trusts the dispatcher's trust domain"));
            }
            Err(MintError::Unavailable(why)) => {
                tracing::warn!(server = %server.address, error = %why, "the SPIRE Server API does not answer yet; VM tasks wait for it")
            }
        }
        Ok(Some(api))
    }
}
