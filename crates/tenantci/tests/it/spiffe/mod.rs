//! SPIFFE identity (issue 15, foundations): the simulator's SPIRE stand-in (`--spire`) and
//! its ClusterStaticEntry objects through kubectl, tenantci's SVID sources (Workload API and
//! spiffe-helper files) against it, and the mTLS configs over real TCP handshakes.

mod files;
mod kubectl;
pub(crate) mod mtls;
mod stand_in;

use std::sync::Arc;

use tenantci_core::spiffe::SpiffeId;
use tenantci_core::spiffe::tls::{SERVER_NAME, peer_id};
use tenantci_testkit::kube::Kubectl;
use tenantci_testkit::sim::SimProcess;
use tenantci_testkit::spire::{Spire, entry_yaml};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::util::{assert_exit, tenantci};

pub const TD: &str = "example.org";
pub const FACADE_ID: &str = "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher";
pub const TASK_ID: &str = "spiffe://example.org/gitea/acme/widgets/1";

/// `tenantci sim --spire example.org` with cluster `ci`, and its stand-in.
pub fn sim_with_spire(state: &std::path::Path) -> (SimProcess, Spire) {
    let sim = SimProcess::start(tenantci(), state, &["ci"], &["--spire", TD]);
    let spire = Spire::from_state_dir(state);
    (sim, spire)
}

/// Creates the ClusterStaticEntry `name` for `spiffe_id` in cluster `ci` with kubectl.
pub fn create_entry(kubectl: &Kubectl, name: &str, spiffe_id: &str) {
    let yaml = entry_yaml(
        name,
        spiffe_id,
        "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-1",
        "pod-uid-1",
    );
    let o = kubectl.run_stdin(&["create", "-f", "-"], &yaml);
    assert_exit(&o, 0);
}

/// One TLS connection over loopback TCP: what the server saw (the client's SPIFFE ID, or
/// why the handshake failed) and whether the client got the server's answer.
pub async fn handshake(
    server: rustls::ServerConfig,
    client: rustls::ClientConfig,
) -> (Result<Option<SpiffeId>, String>, Result<(), String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(server));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        match acceptor.accept(tcp).await {
            Ok(mut tls) => {
                let id = peer_id(tls.get_ref().1);
                tls.write_all(b"k").await.map_err(|e| e.to_string())?;
                tls.shutdown().await.map_err(|e| e.to_string())?;
                Ok(id)
            }
            Err(e) => Err(e.to_string()),
        }
    });
    let connector = TlsConnector::from(Arc::new(client));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    // TLS 1.3: the client finishes before the server has checked its certificate, so the
    // client's verdict is whether the server's answer arrives.
    let client = async {
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
        (byte == *b"k")
            .then_some(())
            .ok_or_else(|| "unexpected answer".to_string())
    }
    .await;
    (server.await.unwrap(), client)
}
