//! Live changes without a restart: a subject removed from the config has its open tunnel
//! closed; a new ClientCA bundle admits a credential it signed; a serving certificate replaced
//! on disk is the one a new client sees; a config that does not parse leaves the front serving
//! under the rules it had and says why. `front status` reads all of it from the running front.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::refusals::{assert_refused, client_ca_files, credential, forged_host};
use super::{Gateway, blocking, gateway, runner_host};
use crate::util::{assert_exit, tenantci};
use tenantci_core::pki::{CertificateAuthority, issue};
use tenantci_testkit::wait::eventually;

/// `front status -o json` of the running front.
pub(super) async fn status(gw: &Gateway) -> serde_json::Value {
    let mut cmd = tenantci();
    cmd.args(["front", "status", "-o", "json", "--config"])
        .arg(gw.config());
    let o = blocking(cmd).await;
    assert_exit(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Replaces `path` by a rename, as an editor or a config manager does.
fn replace(path: &Path, body: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn applied(gw: &Gateway) -> usize {
    gw.audit().matches("front: applied").count()
}

/// Waits until the front has applied one change more than `before`.
async fn wait_applied(gw: &Gateway, before: usize) {
    eventually("the front to apply the change", || async {
        (applied(gw) > before).then_some(())
    })
    .await;
}

/// The order of events: a tunnel open, its subject taken out of the config, the front reads
/// the config. Before, the tunnel ran on until it closed by itself (and the front had to be
/// restarted for new connections to be refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_removed_from_the_config_has_its_open_tunnel_closed() {
    let mut gw = gateway(&[]).await;
    let creds = gw.creds();
    let host = runner_host(&gw, &creds, "127.0.0.2").await;
    // A local connection to `front connect` opens its tunnel through the front at once.
    let mut held = tokio::net::TcpStream::connect(host.url.trim_start_matches("https://"))
        .await
        .unwrap();
    let s = eventually("the tunnel in front status", || async {
        let s = status(&gw).await;
        (s["tunnels"].as_array().unwrap().len() == 1).then_some(s)
    })
    .await;
    assert_eq!(s["subjects"][0]["cluster"], "ci", "{s}");
    assert_eq!(s["subjects"][0]["open"], 1, "{s}");
    assert!(
        s["subjects"][0]["subject"]
            .as_str()
            .unwrap()
            .contains("CN=gitlab-runner"),
        "{s}"
    );
    assert!(s["nextExpiry"]["notAfter"].is_string(), "{s}");

    let before = applied(&gw);
    let mut doc: toml_edit::DocumentMut = std::fs::read_to_string(gw.config())
        .unwrap()
        .parse()
        .unwrap();
    doc["cluster"]
        .as_array_of_tables_mut()
        .unwrap()
        .get_mut(0)
        .unwrap()
        .remove("allow");
    replace(&gw.config(), doc.to_string().as_bytes());

    // The event itself: the front closes the held tunnel (EOF or reset on the local side).
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(60), held.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the tunnel stayed open: {closed:?}"
    );
    wait_applied(&gw, before).await;
    eventually("the cut in the audit", || async {
        gw.audit().contains("end=\"not_allowed\"").then_some(())
    })
    .await;
    assert!(
        gw.front.child().try_wait().unwrap().is_none(),
        "the front restarted"
    );
    assert_refused(&gw, &host, &creds, "not_allowed").await;
    let s = status(&gw).await;
    assert_eq!(s["tunnels"].as_array().unwrap().len(), 0, "{s}");
    assert_eq!(s["clusters"][0]["allowed"], serde_json::json!([]), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_client_ca_bundle_admits_a_newly_minted_credential() {
    let gw = gateway(&[]).await;
    let day = Duration::from_secs(86_400);
    let next_ca = CertificateAuthority::generate("ci client CA, next", day).unwrap();
    let creds = gw.root().join("next-ca-creds");
    credential(&creds, &gw, &next_ca, "gitlab-runner", "gitlab-runner");
    let host = forged_host(&gw, &creds).await;
    assert_refused(&gw, &host, &creds, "bad_certificate").await;

    // The rotation's first step: the new CA beside the old one in the cluster's bundle.
    let before = applied(&gw);
    let (bundle, _) = client_ca_files(&gw);
    let mut pem = std::fs::read_to_string(&bundle).unwrap();
    pem.push_str(next_ca.cert_pem());
    replace(&bundle, pem.as_bytes());
    wait_applied(&gw, before).await;

    // Admitted by the front: the tunnel reaches the apiserver (which itself trusts the CA it
    // started with; the front's admission is what is under test).
    let reached = gw.apiserver_connections();
    let _ = blocking(host.curl(&creds, "/version")).await;
    assert!(
        gw.apiserver_connections() > reached,
        "the new CA's credential did not pass the front: {}",
        gw.audit()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_serving_certificate_is_the_one_a_new_client_sees() {
    let gw = gateway(&[]).await;
    let dir = gw.front_dir();
    let old = std::fs::read_to_string(dir.join("tls.crt")).unwrap();
    assert_eq!(presented(&gw).await, der(&old));

    let front_ca =
        CertificateAuthority::load(&dir.join("front-ca.crt"), &dir.join("front-ca.key")).unwrap();
    let names = ["127.0.0.1".to_string(), "front.test".to_string()];
    let day = Duration::from_secs(86_400);
    let next = issue::server_cert(&front_ca, "tenantci front, renewed", &names, day).unwrap();
    let before = applied(&gw);
    // The key first: until the certificate follows, the pair does not match and the old one
    // stays in force (a reload that is not applied), never a half pair.
    replace(&dir.join("tls.key"), next.key_pem.as_bytes());
    replace(&dir.join("tls.crt"), next.cert_pem.as_bytes());
    wait_applied(&gw, before).await;
    eventually("the new certificate to be presented", || async {
        (presented(&gw).await == der(&next.cert_pem)).then_some(())
    })
    .await;
    let s = status(&gw).await;
    assert!(
        s["servingCert"]["subject"]
            .as_str()
            .unwrap()
            .contains("renewed"),
        "{s}"
    );
}

fn der(pem: &str) -> Vec<u8> {
    pem::parse(pem).unwrap().into_contents()
}

/// The certificate the front presents to a new client (with the runner's credential).
async fn presented(gw: &Gateway) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    tenantci_core::tls::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(gw.front_dir().join("front-ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let creds = gw.creds();
    let chain = CertificateDer::pem_file_iter(creds.join("tls.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(creds.join("tls.key")).unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![tenantci_front::alpn_for("ci")];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(&gw.front_addr)
        .await
        .unwrap();
    let name = ServerName::try_from("front.test").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The order of events: a config saved half-edited while the front serves. The front keeps
/// the rules it had, says which file and why, and applies the file once it reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_does_not_parse_leaves_the_front_serving_and_says_why() {
    let mut gw = gateway(&[]).await;
    let creds = gw.creds();
    let host = runner_host(&gw, &creds, "127.0.0.2").await;
    let good = std::fs::read(gw.config()).unwrap();
    replace(&gw.config(), b"listen = [\"half an edit\n");
    let path = gw.config().display().to_string();
    let said = eventually("the front to say the change is not applied", || async {
        let audit = gw.audit();
        audit
            .lines()
            .find(|l| l.contains("a change is not applied"))
            .map(str::to_string)
    })
    .await;
    assert!(said.contains(&path), "the line names the file: {said}");
    assert!(said.contains("keeps serving"), "{said}");
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("tenantci_front_config_reload_success 0"),
        "{metrics}"
    );
    // Still serving, under the rules it had.
    assert_exit(&blocking(host.curl(&creds, "/version")).await, 0);
    let s = status(&gw).await;
    assert_eq!(s["reload"]["ok"], false, "{s}");
    assert!(
        s["reload"]["error"].as_str().unwrap().contains(&path),
        "{s}"
    );
    assert_eq!(s["clusters"][0]["name"], "ci", "{s}");

    // Put back, it is applied again; SIGHUP with nothing changed re-reads at once.
    let before = applied(&gw);
    replace(&gw.config(), &good);
    wait_applied(&gw, before).await;
    let pid = nix::unistd::Pid::from_raw(gw.front.child().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    eventually("a reload on SIGHUP", || async {
        gw.audit()
            .lines()
            .any(|l| l.contains("front: applied") && l.contains("SIGHUP"))
            .then_some(())
    })
    .await;
    assert!(
        gw.metrics()
            .await
            .contains("tenantci_front_config_reload_success 1")
    );
    assert!(gw.front.child().try_wait().unwrap().is_none());
}
