//! The mTLS configs of core::spiffe over real TCP handshakes, with SVIDs from the stand-in's
//! Workload API: the server requires a client SVID of its trust domain and names it; the
//! client accepts only the expected server ID; rotation needs no new config.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tenantci_core::spiffe::tls::{PeerId, client_config, server_config};
use tenantci_core::spiffe::workload::WorkloadSource;
use tenantci_core::spiffe::{SpiffeId, SvidSource, TrustDomain};
use tenantci_sim::spire::ca::TrustDomainCa;
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::spire::Spire;
use tenantci_testkit::wait::DEADLINE;

use super::{FACADE_ID, TASK_ID, TD, create_entry, handshake, sim_with_spire};
use crate::util::scratch;

/// A client that trusts any server (the server's refusals are what these tests look at).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

pub(crate) fn any_server()
-> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
    tenantci_core::tls::ensure_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .unwrap()
        .clone();
    rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
}

struct World {
    _dir: tempfile::TempDir,
    _sim: tenantci_testkit::sim::SimProcess,
    spire: Spire,
    facade: Arc<WorkloadSource>,
    executor: Arc<WorkloadSource>,
}

/// The simulator with two entries: the facade's identity and one task's.
async fn world() -> World {
    let dir = scratch();
    let state = dir.path().join("state");
    let (sim, spire) = sim_with_spire(&state);
    let http = reqwest::Client::new();
    let kubectl = Kubectl::new(&sim.tenant_admin("ci"), dir.path());
    create_entry(&kubectl, "tenantci-dispatcher", FACADE_ID);
    create_entry(&kubectl, "exec-1", TASK_ID);
    spire.served(&http, "ci", "tenantci-dispatcher").await;
    spire.served(&http, "ci", "exec-1").await;
    let connect = |name: &str| {
        let endpoint = spire.endpoint("ci", name);
        async move {
            Arc::new(
                WorkloadSource::connect(Some(&endpoint), DEADLINE)
                    .await
                    .unwrap_or_else(|e| panic!("{}", e.render())),
            )
        }
    };
    let facade = connect("tenantci-dispatcher").await;
    let executor = connect("exec-1").await;
    World {
        _dir: dir,
        _sim: sim,
        spire,
        facade,
        executor,
    }
}

fn td() -> TrustDomain {
    TrustDomain::new(TD).unwrap()
}

fn id(s: &str) -> SpiffeId {
    SpiffeId::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_accepts_a_task_svid_names_it_and_keeps_doing_so_after_a_rotation() {
    let w = world().await;
    let server = server_config(w.facade.clone(), td());
    let client = client_config(w.executor.clone(), id(FACADE_ID));
    let (seen, answered) = handshake(server.clone(), client.clone()).await;
    assert_eq!(seen.unwrap().unwrap().to_string(), TASK_ID);
    answered.unwrap();

    // Both sides rotate; the same configs present and verify the new SVIDs.
    let before = (
        w.facade.current().unwrap().leaf().clone(),
        w.executor.current().unwrap().leaf().clone(),
    );
    let (mut f, mut e) = (w.facade.updates(), w.executor.updates());
    w.spire.rotate(&reqwest::Client::new()).await;
    f.changed().await.unwrap();
    e.changed().await.unwrap();
    assert_ne!(w.facade.current().unwrap().leaf(), &before.0);
    assert_ne!(w.executor.current().unwrap().leaf(), &before.1);
    let (seen, answered) = handshake(server, client).await;
    assert_eq!(seen.unwrap().unwrap().to_string(), TASK_ID);
    answered.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_refuses_no_client_certificate_and_an_svid_of_another_trust_domain() {
    let w = world().await;
    let server = server_config(w.facade.clone(), td());

    let bare = any_server().with_no_client_auth();
    let (seen, answered) = handshake(server.clone(), bare).await;
    let why = seen.unwrap_err();
    assert!(why.contains("no certificates"), "{why}");
    assert!(answered.is_err());

    // A well-formed SVID of other.org, from its own CA.
    let other = TrustDomainCa::new("other.org").unwrap();
    let svid = other
        .issue("spiffe://other.org/gitea/acme/widgets/1", DEADLINE)
        .unwrap();
    let foreign = any_server()
        .with_client_auth_cert(
            vec![CertificateDer::from(svid.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(svid.key_pkcs8_der.clone())),
        )
        .unwrap();
    let (seen, answered) = handshake(server, foreign).await;
    let why = seen.unwrap_err();
    assert!(why.contains("UnknownIssuer"), "{why}");
    assert!(answered.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refuses_a_server_whose_spiffe_id_is_not_the_expected_one() {
    let w = world().await;
    // A server of the right trust domain presenting the task's SVID, not the facade's.
    let impostor = server_config(w.executor.clone(), td());
    let client = client_config(w.facade.clone(), id(FACADE_ID));
    let (seen, answered) = handshake(impostor, client).await;
    let why = answered.unwrap_err();
    assert!(
        why.contains(&format!(
            "the server's SVID is `{TASK_ID}`, not the expected `{FACADE_ID}`"
        )),
        "{why}"
    );
    assert!(seen.is_err(), "the client aborted the handshake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_transport_hands_each_request_the_client_s_spiffe_id() {
    let w = world().await;
    let app = axum::Router::new().route(
        "/whoami",
        axum::routing::get(|peer: Option<axum::Extension<PeerId>>| async move {
            peer.map_or_else(|| "nobody".to_string(), |p| p.0.0.to_string())
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facade = tenantci_core::forge::gitea::facade::spawn_router(
        listener,
        Arc::new(server_config(w.facade.clone(), td())),
        app,
    )
    .unwrap();
    let http = reqwest::Client::builder()
        .use_preconfigured_tls(client_config(w.executor.clone(), id(FACADE_ID)))
        .build()
        .unwrap();
    for _ in 0..2 {
        let resp = http
            .get(format!("{}/whoami", facade.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), TASK_ID);
    }
    facade.shutdown().await;
}
