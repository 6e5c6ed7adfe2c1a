//! The double against core's `ServerApi` client: real TLS, real gRPC, on loopback.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tenantci_core::spiffe::files::{BUNDLE_FILE, CERT_FILE, FilesSource, KEY_FILE};
use tenantci_core::spiffe::server_api::{MintError, MintedSvid, ServerApi};
use tenantci_core::spiffe::{FixedSource, SvidSource};
use tower::ServiceExt;

use super::super::ca::TrustDomainCa;
use super::*;

const TD: &str = "example.org";
const DISPATCHER: &str = "spiffe://example.org/tenantci/dispatcher";
const TASK: &str = "spiffe://example.org/gitea/sim/demo/build";

struct Fixture {
    _dir: tempfile::TempDir,
    stand_in: Arc<StandIn>,
    double: ServerApiDouble,
}

fn entry(name: &str, spiffe_id: &str, admin: bool) -> Arc<serde_json::Value> {
    Arc::new(json!({
        "metadata": {"name": name},
        "spec": {"spiffeID": spiffe_id, "admin": admin},
    }))
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("c1")).unwrap();
    let stand_in = Arc::new(StandIn::new(
        TrustDomainCa::new(TD).unwrap(),
        dir.path().to_path_buf(),
    ));
    stand_in.reconcile(
        "c1",
        &[
            entry("dispatcher", DISPATCHER, true),
            entry("pod", "spiffe://example.org/gitea/sim/demo/pod", false),
        ],
    );
    let double = start(stand_in.clone()).await.unwrap();
    Fixture {
        _dir: dir,
        stand_in,
        double,
    }
}

/// A source holding an SVID for `id` issued by `ca`, trusting `bundle_of`'s CA.
fn source(ca: &TrustDomainCa, id: &str, bundle_of: &TrustDomainCa) -> Arc<dyn SvidSource> {
    let issued = ca.issue(id, Duration::from_secs(3600)).unwrap();
    let svid = Svid::from_der(
        vec![CertificateDer::from(issued.cert_der)],
        &issued.key_pkcs8_der,
        &[CertificateDer::from(bundle_of.bundle_der().to_vec())],
    )
    .unwrap();
    Arc::new(FixedSource(Arc::new(svid)))
}

impl Fixture {
    fn client_as(&self, id: &str) -> ServerApi {
        let ca = self.stand_in.ca();
        self.client_with(source(ca, id, ca), &self.double.server_id)
    }

    fn client_with(&self, source: Arc<dyn SvidSource>, server_id: &str) -> ServerApi {
        ServerApi::new(
            &self.double.address,
            source,
            SpiffeId::new(server_id).unwrap(),
        )
        .unwrap()
    }
}

fn task() -> SpiffeId {
    SpiffeId::new(TASK).unwrap()
}

/// Writes the minted SVID as spiffe-helper would and reads it back with core's files source.
fn read_back(minted: &MintedSvid, dir: &Path) -> Arc<Svid> {
    std::fs::write(dir.join(CERT_FILE), &minted.chain_pem).unwrap();
    std::fs::write(dir.join(BUNDLE_FILE), &minted.bundle_pem).unwrap();
    let key = dir.join(KEY_FILE);
    std::fs::write(&key, minted.key_pem.expose()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    FilesSource::open(dir).unwrap().current().unwrap()
}

#[tokio::test]
async fn an_admin_mints_an_svid_that_reads_back_as_spiffe_helper_files() {
    let f = fixture().await;
    let client = f.client_as(DISPATCHER);
    let before = time::OffsetDateTime::now_utc().unix_timestamp();
    let minted = client
        .mint_x509_svid(&task(), Duration::from_secs(3 * 3600))
        .await
        .unwrap();
    assert_eq!(minted.id, task());
    assert!(
        (before + 3 * 3600 - 5..=before + 3 * 3600 + 5).contains(&minted.expires_at),
        "expires_at {} is not about 3h from {before}",
        minted.expires_at
    );
    assert!(
        minted
            .key_pem
            .expose()
            .starts_with("-----BEGIN PRIVATE KEY-----")
    );

    let dir = tempfile::tempdir().unwrap();
    let svid = read_back(&minted, dir.path());
    assert_eq!(svid.id(), &task());
    assert_eq!(svid.bundle().len(), 1);
    assert_eq!(svid.bundle()[0].as_ref(), f.stand_in.ca().bundle_der());

    let minted = f.stand_in.minted();
    assert_eq!(minted.len(), 1);
    assert_eq!(minted[0].spiffe_id, TASK);
    assert_eq!(minted[0].caller_id, DISPATCHER);

    // The admin API lists it as tests see it.
    let listed = admin_minted(&f.stand_in).await;
    assert_eq!(
        listed,
        json!([{"spiffeId": TASK, "serial": minted[0].serial, "callerId": DISPATCHER}])
    );

    // A second mint on the same (pooled) connection gets a new key.
    let again = client
        .mint_x509_svid(&task(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_ne!(again.key_pem, read_key(dir.path()));
    assert_eq!(f.stand_in.minted().len(), 2);
}

fn read_key(dir: &Path) -> tenantci_core::Secret {
    tenantci_core::Secret::new(std::fs::read_to_string(dir.join(KEY_FILE)).unwrap())
}

async fn admin_minted(stand_in: &Arc<StandIn>) -> serde_json::Value {
    use http_body_util::BodyExt;
    let resp = super::super::admin::router(stand_in.clone())
        .oneshot(
            http::Request::get("/minted")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn a_workload_that_is_not_admin_is_refused_with_the_fix() {
    let f = fixture().await;
    let err = f
        .client_as("spiffe://example.org/gitea/sim/demo/pod")
        .mint_x509_svid(&task(), Duration::from_secs(60))
        .await
        .unwrap_err();
    let MintError::Refused(message) = &err else {
        panic!("not refused: {err}");
    };
    assert!(message.contains("PermissionDenied"), "{message}");
    assert!(message.contains("admin_ids"), "{message}");
    assert!(message.contains("admin"), "{message}");
    assert!(message.contains(&f.double.address), "{message}");

    // An admin entry that loses its flag loses the right.
    f.stand_in
        .reconcile("c1", &[entry("dispatcher", DISPATCHER, false)]);
    let err = f
        .client_as(DISPATCHER)
        .mint_x509_svid(&task(), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, MintError::Refused(_)), "{err}");
    assert!(f.stand_in.minted().is_empty());
}

#[tokio::test]
async fn an_id_outside_the_trust_domain_is_an_invalid_argument() {
    let f = fixture().await;
    let err = f
        .client_as(DISPATCHER)
        .mint_x509_svid(
            &SpiffeId::new("spiffe://other.org/x").unwrap(),
            Duration::from_secs(60),
        )
        .await
        .unwrap_err();
    let MintError::Refused(message) = &err else {
        panic!("not refused: {err}");
    };
    assert!(message.contains("InvalidArgument"), "{message}");
    assert!(f.stand_in.minted().is_empty());
}

/// A TLS refusal is a configuration error (wrong bundle, wrong ID): `Refused`, whichever side
/// refused.
#[tokio::test]
async fn a_caller_of_another_trust_domain_is_refused_at_tls() {
    let f = fixture().await;
    let other = TrustDomainCa::new("other.org").unwrap();
    let other_id = "spiffe://other.org/tenantci/dispatcher";

    // It trusts only its own trust domain: it refuses the server.
    let own_bundle = f.client_with(source(&other, other_id, &other), &f.double.server_id);
    // It trusts the server's trust domain: the server refuses it.
    let our_bundle = f.client_with(
        source(&other, other_id, f.stand_in.ca()),
        &f.double.server_id,
    );
    for (which, client) in [("own bundle", own_bundle), ("our bundle", our_bundle)] {
        let err = client
            .mint_x509_svid(&task(), Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(matches!(err, MintError::Refused(_)), "{which}: {err}");
        assert!(err.to_string().contains("TLS"), "{which}: {err}");
        let err = client.check().await.unwrap_err();
        assert!(
            matches!(err, MintError::Refused(_)),
            "{which}: check: {err}"
        );
    }
    assert!(f.stand_in.minted().is_empty());
}

#[tokio::test]
async fn a_server_with_another_id_is_refused() {
    let f = fixture().await;
    let ca = f.stand_in.ca();
    let client = f.client_with(
        source(ca, DISPATCHER, ca),
        "spiffe://example.org/not/the/server",
    );
    let err = client
        .mint_x509_svid(&task(), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, MintError::Refused(_)), "{err}");
    assert!(err.to_string().contains("spire/server"), "{err}");
    assert!(client.check().await.is_err());
    assert!(f.stand_in.minted().is_empty());
}

#[tokio::test]
async fn check_needs_only_the_tls_handshake() {
    let f = fixture().await;
    f.client_as(DISPATCHER).check().await.unwrap();
    // Not an admin: TLS accepts it all the same (minting would not).
    f.client_as("spiffe://example.org/gitea/sim/demo/pod")
        .check()
        .await
        .unwrap();

    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = unused.local_addr().unwrap().to_string();
    drop(unused);
    let ca = f.stand_in.ca();
    let nobody = ServerApi::new(
        &address,
        source(ca, DISPATCHER, ca),
        SpiffeId::new(&f.double.server_id).unwrap(),
    )
    .unwrap();
    let err = nobody.check().await.unwrap_err();
    assert!(matches!(err, MintError::Unavailable(_)), "{err}");
    assert!(err.to_string().contains(&address), "{err}");
    let err = nobody
        .mint_x509_svid(&task(), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(matches!(err, MintError::Unavailable(_)), "{err}");
    assert!(f.stand_in.minted().is_empty());
}

#[tokio::test]
async fn other_methods_are_unimplemented() {
    let f = fixture().await;
    // Through the router directly: the client only knows MintX509SVID.
    let resp = router(f.stand_in.clone())
        .oneshot(
            http::Request::post("/spire.api.server.svid.v1.SVID/BatchNewX509SVID")
                .header("content-type", "application/grpc")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        resp.headers().get("grpc-status").unwrap(),
        &(tonic::Code::Unimplemented as i32).to_string()
    );
}
