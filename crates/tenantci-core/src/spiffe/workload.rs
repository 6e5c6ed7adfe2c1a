//! The Workload API source: the `spiffe` crate's `X509Source` (a supervised `FetchX509SVID`
//! stream that reconnects with backoff and keeps the latest SVID), turned into [`Svid`]s.
//! The conversion (loading the key into the crypto provider, the bundle into roots) happens
//! once per update the source reports, not per handshake.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::spiffe::{X509Source, X509SourceUpdates};
use rustls::pki_types::CertificateDer;

use super::svid::Svid;
use super::svid::SvidSource;
use crate::{Error, Result};

/// The Workload API source: the SPIRE agent's stream of X509-SVIDs, converted once per update.
pub struct WorkloadSource {
    source: X509Source,
    updates: X509SourceUpdates,
    /// The update number the cached SVID was built from.
    cached: Mutex<Option<(u64, Arc<Svid>)>>,
}

impl std::fmt::Debug for WorkloadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadSource")
            .field("update", &self.updates.last())
            .finish_non_exhaustive()
    }
}

impl WorkloadSource {
    /// Connects to `endpoint` (`unix:///path`), or to `SPIFFE_ENDPOINT_SOCKET` when `None`,
    /// and waits at most `first_svid` for the first SVID.
    pub async fn connect(endpoint: Option<&str>, first_svid: Duration) -> Result<Self> {
        let mut builder = X509Source::builder().initial_sync_timeout(first_svid);
        if let Some(e) = endpoint {
            builder = builder.endpoint(e);
        }
        let named = endpoint
            .map(|e| format!("`{e}`"))
            .unwrap_or_else(|| "SPIFFE_ENDPOINT_SOCKET".into());
        let source = builder.build().await.map_err(|e| {
            Error::external(format!("no X509-SVID from the SPIFFE Workload API at {named}"))
                .caused_by(e)
                .hint("check that the SPIRE agent's socket is mounted there and that a registration entry selects this workload (entries take seconds to reach the agent)")
        })?;
        let updates = source.updated();
        let this = WorkloadSource {
            source,
            updates,
            cached: Mutex::new(None),
        };
        this.current()?;
        Ok(this)
    }

    /// A receiver of the source's updates (rotations): `changed().await` returns after the
    /// next one.
    pub fn updates(&self) -> X509SourceUpdates {
        self.source.updated()
    }

    /// Stops the stream's supervisor (also done on drop by the `spiffe` crate).
    pub async fn shutdown(&self) {
        self.source.shutdown().await;
    }

    fn build(&self) -> Result<Svid> {
        let unusable = |e: &dyn std::fmt::Display| {
            Error::external(format!("the Workload API's X509-SVID is not usable: {e}"))
        };
        let bundles = self.source.bundle_set().map_err(|e| unusable(&e))?;
        let svid = self.source.svid().map_err(|e| unusable(&e))?;
        let td = svid.spiffe_id().trust_domain();
        let bundle = bundles
            .get(td)
            .ok_or_else(|| unusable(&format!("no bundle for its trust domain `{td}`")))?;
        let chain = svid
            .cert_chain()
            .iter()
            .map(|c| CertificateDer::from(c.as_bytes().to_vec()))
            .collect();
        let roots: Vec<_> = bundle
            .authorities()
            .iter()
            .map(|c| CertificateDer::from(c.as_bytes().to_vec()))
            .collect();
        Svid::from_der(chain, svid.private_key().as_bytes(), &roots)
    }
}

impl SvidSource for WorkloadSource {
    fn current(&self) -> Result<Arc<Svid>> {
        // Read the number before the SVID: an update in between is built again next call.
        let update = self.updates.last();
        let mut cached = self.cached.lock().expect("the workload source lock");
        if let Some((n, svid)) = cached.as_ref()
            && *n == update
        {
            return Ok(svid.clone());
        }
        let svid = Arc::new(self.build()?);
        *cached = Some((update, svid.clone()));
        Ok(svid)
    }
}
