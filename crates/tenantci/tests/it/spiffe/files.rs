//! The `files:DIR` source (spiffe-helper's three files): read at open, the key refused when
//! open to other accounts, re-read when the files change, the previous SVID kept while a
//! rotation is half written; and both ends of a handshake fed from such directories.

use std::path::Path;
use std::sync::Arc;

use tenantci_core::fsutil::write_atomic;
use tenantci_core::spiffe::files::FilesSource;
use tenantci_core::spiffe::tls::{client_config, server_config};
use tenantci_core::spiffe::{SourceSpec, SpiffeId, SvidSource, TrustDomain};
use tenantci_sim::spire::ca::{IssuedSvid, TrustDomainCa};

use super::{FACADE_ID, TASK_ID, handshake};
use crate::util::scratch;

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

fn write(dir: &Path, ca: &TrustDomainCa, svid: &IssuedSvid, only: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, contents) in svid.helper_files(ca) {
        if only.is_none_or(|o| o == name) {
            write_atomic(&dir.join(name), contents.as_bytes(), 0o600).unwrap();
        }
    }
}

#[tokio::test]
async fn a_helper_directory_is_read_checked_and_read_again_on_change() {
    let tmp = scratch();
    let dir = tmp.path().join("svid");
    let ca = TrustDomainCa::new("example.org").unwrap();
    let first = ca.issue(TASK_ID, HOUR).unwrap();
    write(&dir, &ca, &first, None);

    let spec = SourceSpec::parse("--spiffe-source", &format!("files:{}", dir.display())).unwrap();
    let source = spec.open(None, HOUR).await.unwrap();
    let a = source.current().unwrap();
    assert_eq!(a.id().to_string(), TASK_ID);
    assert_eq!(a.leaf().as_ref(), &first.cert_der[..]);
    assert!(
        Arc::ptr_eq(&a, &source.current().unwrap()),
        "unchanged files are not read again"
    );

    // Half a rotation: the new certificate beside the old key is not an SVID; the old stays.
    let second = ca.issue(TASK_ID, HOUR).unwrap();
    write(&dir, &ca, &second, Some("svid.pem"));
    assert_eq!(
        source.current().unwrap().leaf().as_ref(),
        &first.cert_der[..]
    );
    write(&dir, &ca, &second, Some("svid_key.pem"));
    assert_eq!(
        source.current().unwrap().leaf().as_ref(),
        &second.cert_der[..]
    );

    // A key file others may read is refused, as every key file tenantci reads.
    std::fs::set_permissions(
        dir.join("svid_key.pem"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let err = FilesSource::open(&dir).unwrap_err();
    assert!(
        err.message().contains("open to other accounts"),
        "{}",
        err.render()
    );
}

#[test]
fn a_directory_without_an_svid_is_refused_naming_the_file() {
    let tmp = scratch();
    let err = FilesSource::open(tmp.path()).unwrap_err();
    assert!(err.render().contains("svid.pem"), "{}", err.render());
}

#[tokio::test]
async fn both_ends_fed_from_helper_directories_handshake_and_follow_a_rotation() {
    let tmp = scratch();
    let ca = TrustDomainCa::new("example.org").unwrap();
    let (facade_dir, task_dir) = (tmp.path().join("facade"), tmp.path().join("task"));
    write(&facade_dir, &ca, &ca.issue(FACADE_ID, HOUR).unwrap(), None);
    write(&task_dir, &ca, &ca.issue(TASK_ID, HOUR).unwrap(), None);
    let facade = Arc::new(FilesSource::open(&facade_dir).unwrap());
    let task = Arc::new(FilesSource::open(&task_dir).unwrap());
    let server = server_config(facade, TrustDomain::new("example.org").unwrap());
    let client = client_config(task.clone(), SpiffeId::new(FACADE_ID).unwrap());
    let (seen, answered) = handshake(server.clone(), client.clone()).await;
    assert_eq!(seen.unwrap().unwrap().to_string(), TASK_ID);
    answered.unwrap();

    let rotated = ca.issue(TASK_ID, HOUR).unwrap();
    write(&task_dir, &ca, &rotated, None);
    let (seen, answered) = handshake(server, client).await;
    assert_eq!(seen.unwrap().unwrap().to_string(), TASK_ID);
    answered.unwrap();
    assert_eq!(
        task.current().unwrap().leaf().as_ref(),
        &rotated.cert_der[..]
    );
}

#[tokio::test]
async fn a_client_svid_naming_another_trust_domain_is_refused_even_when_it_chains() {
    let tmp = scratch();
    // The bundle's CA signs an ID outside its trust domain (SPIRE never does): the chain
    // holds, the trust-domain check refuses.
    let ca = TrustDomainCa::new("example.org").unwrap();
    let (facade_dir, stray_dir) = (tmp.path().join("facade"), tmp.path().join("stray"));
    write(&facade_dir, &ca, &ca.issue(FACADE_ID, HOUR).unwrap(), None);
    let stray = ca
        .issue("spiffe://other.org/gitea/acme/widgets/1", HOUR)
        .unwrap();
    write(&stray_dir, &ca, &stray, None);
    let server = server_config(
        Arc::new(FilesSource::open(&facade_dir).unwrap()),
        TrustDomain::new("example.org").unwrap(),
    );
    let client = client_config(
        Arc::new(FilesSource::open(&stray_dir).unwrap()),
        SpiffeId::new(FACADE_ID).unwrap(),
    );
    let (seen, answered) = handshake(server, client).await;
    let why = seen.unwrap_err();
    assert!(
        why.contains("not of the trust domain `example.org`"),
        "{why}"
    );
    assert!(answered.is_err());
}
