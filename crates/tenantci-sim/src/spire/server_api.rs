//! A SPIRE Server API double: `SVID/MintX509SVID` over SPIFFE mTLS on a loopback TCP port, as
//! the dispatcher calls the real server to mint a VM task's SVID.
//!
//! As SPIRE does: the server presents `spiffe://<td>/spire/server` issued by the trust
//! domain's CA and requires a client SVID of the trust domain; only an admin workload may
//! mint (the SPIFFE ID of a ClusterStaticEntry with `spec.admin: true` in a followed cluster,
//! else PermissionDenied); the CSR must name exactly one SPIFFE ID of the trust domain (else
//! InvalidArgument); the lifetime is the request's, or [`DEFAULT_TTL`] for 0, never
//! past the CA's. Every mint is recorded for tests (`GET <admin>/minted`). The Server API's
//! other methods and services answer Unimplemented. The TLS and HTTP/2 transport is core's
//! facade transport (`forge::gitea::facade::spawn_router`), which hands each request the
//! client's SPIFFE ID.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request as HttpRequest;
use rcgen::{CertificateSigningRequestParams, SanType};
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::stand_in::{DEFAULT_TTL, MintRecord, StandIn};
use tenantci_core::forge::gitea::facade::{FacadeHandle, spawn_router};
use tenantci_core::spiffe::server_api::MINT_X509_SVID;
use tenantci_core::spiffe::server_api::proto::{
    MintX509SvidRequest, MintX509SvidResponse, SpiffeIdMessage, X509Svid,
};
use tenantci_core::spiffe::tls::PeerId;
use tenantci_core::spiffe::{FixedSource, SpiffeId, Svid, TrustDomain};
use tenantci_core::{Error, Result};

/// A running double; drop it to stop accepting connections.
pub struct ServerApiDouble {
    /// Where it listens: `127.0.0.1:PORT`.
    pub address: String,
    /// The SPIFFE ID it presents (`spiffe://<td>/spire/server`).
    pub server_id: String,
    _served: FacadeHandle,
}

impl std::fmt::Debug for ServerApiDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerApiDouble")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Serves the double for `stand_in` on a free loopback port.
pub async fn start(stand_in: Arc<StandIn>) -> Result<ServerApiDouble> {
    let ca = stand_in.ca();
    let td = TrustDomain::new(ca.trust_domain())
        .map_err(|e| Error::external(format!("the stand-in's trust domain: {e}")))?;
    let id = tenantci_core::spiffe::server_api::default_server_id(ca.trust_domain());
    // As long as the CA lives: the double never rotates its own SVID.
    let issued = ca.issue(&id, ca.remaining()).map_err(Error::external)?;
    let svid = Svid::from_der(
        vec![CertificateDer::from(issued.cert_der)],
        &issued.key_pkcs8_der,
        &[CertificateDer::from(ca.bundle_der().to_vec())],
    )?;
    let mut tls =
        tenantci_core::spiffe::tls::server_config(Arc::new(FixedSource(Arc::new(svid))), td);
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
        Error::external(format!(
            "cannot listen for the SPIRE stand-in's Server API: {e}"
        ))
    })?;
    let served = spawn_router(listener, Arc::new(tls), router(stand_in)).map_err(|e| {
        Error::external(format!("cannot serve the SPIRE stand-in's Server API: {e}"))
    })?;
    Ok(ServerApiDouble {
        address: served.local_addr.to_string(),
        server_id: id,
        _served: served,
    })
}

fn router(stand_in: Arc<StandIn>) -> Router {
    let mint = tower::service_fn(move |req: HttpRequest| {
        let stand_in = stand_in.clone();
        async move {
            let caller = req.extensions().get::<PeerId>().map(|p| p.0.clone());
            let handler = tower::service_fn(move |call: Request<MintX509SvidRequest>| {
                let (stand_in, caller) = (stand_in.clone(), caller.clone());
                async move { mint(&stand_in, caller, call.into_inner()) }
            });
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok::<_, std::convert::Infallible>(grpc.unary(handler, req).await)
        }
    });
    Router::new()
        .route_service(MINT_X509_SVID, mint)
        .fallback(|req: HttpRequest| async move {
            Status::unimplemented(format!(
                "{} is not served by the simulator's SPIRE Server API",
                req.uri().path()
            ))
            .into_http::<tonic::body::Body>()
        })
}

fn mint(
    stand_in: &StandIn,
    caller: Option<SpiffeId>,
    request: MintX509SvidRequest,
) -> std::result::Result<Response<MintX509SvidResponse>, Status> {
    let caller = caller.ok_or_else(|| Status::unauthenticated("no client SVID"))?;
    if !stand_in.is_admin(&caller.to_string()) {
        return Err(Status::permission_denied(format!(
            "authorization denied: caller `{caller}` is not an admin workload"
        )));
    }
    // rcgen checks the CSR's signature: the requester holds the key it names.
    let csr = CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(
        request.csr.as_slice(),
    ))
    .map_err(|e| Status::invalid_argument(format!("failed to parse CSR: {e}")))?;
    let id = requested_id(stand_in.ca().trust_domain(), &csr)?;
    let ttl = match u64::try_from(request.ttl) {
        Ok(secs) if secs > 0 => std::time::Duration::from_secs(secs),
        _ => DEFAULT_TTL,
    };
    let (serial, leaf, expires_at) = stand_in
        .ca()
        .sign(&id.to_string(), &csr.public_key, ttl)
        .map_err(Status::internal)?;
    stand_in.record_mint(MintRecord {
        spiffe_id: id.to_string(),
        serial,
        caller_id: caller.to_string(),
    });
    tracing::info!(spiffe_id = %id, %caller, serial, "SPIRE stand-in: minted an X509-SVID");
    Ok(Response::new(MintX509SvidResponse {
        svid: Some(X509Svid {
            cert_chain: vec![leaf],
            id: Some(SpiffeIdMessage {
                trust_domain: id.trust_domain_name().to_string(),
                path: id.path().to_string(),
            }),
            expires_at,
            hint: String::new(),
        }),
    }))
}

/// The CSR's one URI SAN, which must be a SPIFFE ID of `trust_domain`.
fn requested_id(
    trust_domain: &str,
    csr: &CertificateSigningRequestParams,
) -> std::result::Result<SpiffeId, Status> {
    let [SanType::URI(uri)] = csr.params.subject_alt_names.as_slice() else {
        return Err(Status::invalid_argument(
            "the CSR must have exactly one URI SAN, the SPIFFE ID",
        ));
    };
    let id = SpiffeId::new(uri.as_str()).map_err(|e| {
        Status::invalid_argument(format!("the CSR's URI SAN is not a SPIFFE ID: {e}"))
    })?;
    if id.trust_domain_name() != trust_domain {
        return Err(Status::invalid_argument(format!(
            "the CSR's SPIFFE ID `{id}` is not of the trust domain `{trust_domain}`"
        )));
    }
    Ok(id)
}

#[cfg(test)]
#[path = "server_api_tests.rs"]
mod tests;
