//! `tenantci dispatch renew` against a running dispatcher: the facade certificate and the
//! gateway credential near expiry are renewed while a task runs, the dispatcher takes them up
//! without a restart (SIGHUP), and the task completes once. A renewal that cannot reach the
//! apiserver changes nothing; a renewed file that is not valid is refused by the dispatcher,
//! which keeps serving the certificate it had.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use time::OffsetDateTime;

use super::harness::{Dispatcher, World};
use crate::util::{self, tenantci};
use tenantci_core::pki::issue::{client_cert_between, server_cert_between};
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType};
use tenantci_testkit::wait::eventually;

const DAY: time::Duration = time::Duration::DAY;

fn secret_value(i: usize) -> String {
    format!("s3cr3t-{i}-{}", "x".repeat(24))
}

/// The dispatch directory's files (init wrote them beside the config).
struct Files {
    dir: PathBuf,
}

impl Files {
    fn of(w: &World) -> Files {
        Files {
            dir: w.config_path("d1").parent().unwrap().to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    fn facade_ca(&self) -> CertificateAuthority {
        CertificateAuthority::load(&self.path("facade-ca.crt"), &self.path("facade-ca.key"))
            .unwrap()
    }

    /// Replaces the facade pair with one from `ca`, valid from `nb` to `na`.
    fn write_facade(&self, ca: &CertificateAuthority, nb: OffsetDateTime, na: OffsetDateTime) {
        let host = "127.0.0.1".to_string();
        let c = server_cert_between(ca, &host, std::slice::from_ref(&host), (nb, na)).unwrap();
        write_secret(&self.path("facade.key"), &c.key_pem);
        write_secret(&self.path("facade.crt"), &c.cert_pem);
    }

    /// Replaces the dispatcher's credential with one of the same subject from the cluster's
    /// ClientCA, 720 h long, of which only `left` is left; returns it (cert, key PEM) and its end.
    fn write_credential_near_expiry(
        &self,
        state: &Path,
        left: time::Duration,
    ) -> (String, String, OffsetDateTime) {
        let pki = state.join("clusters/ci/pki");
        let ca = CertificateAuthority::load(&pki.join("client-ca.crt"), &pki.join("client-ca.key"))
            .unwrap();
        let now = OffsetDateTime::now_utc();
        let c = client_cert_between(
            &ca,
            &ClientCertSpec {
                common_name: "tenantci-dispatcher".into(),
                organizations: vec!["tenantci:gitea-dispatchers".into()],
                valid_for: std::time::Duration::from_secs(720 * 3600),
                key_type: KeyType::EcdsaP256,
            },
            now + left - DAY * 30,
            now + left,
        )
        .unwrap();
        write_secret(&self.path("kube/tls.key"), &c.key_pem);
        write_secret(&self.path("kube/tls.crt"), &c.cert_pem);
        (c.cert_pem, c.key_pem, c.not_after)
    }
}

fn write_secret(path: &Path, text: &str) {
    tenantci_core::fsutil::write_atomic(path, text.as_bytes(), 0o600).unwrap();
}

/// The DER of the certificate the facade presents in a new handshake, verified with the
/// facade CA as an executor verifies it.
async fn served(d: &Dispatcher, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem::parse_many(ca_pem).unwrap() {
        roots.add(c.contents().to_vec().into()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(d.facade).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .expect("the facade's certificate verifies with the facade CA");
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem_text: &str) -> Vec<u8> {
    pem::parse(pem_text).unwrap().contents().to_vec()
}

fn renew(config: &Path, extra: &[&std::ffi::OsStr]) -> std::process::Output {
    util::run(
        tenantci()
            .args(["dispatch", "renew", "--config"])
            .arg(config)
            .args(extra),
    )
}

/// A client with `cert`/`key` against the dispatcher's apiserver gets 401.
async fn assert_refused(files: &Files, cert: &str, key: &str) {
    let kubeconfig = files.read("kube/kubeconfig");
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap();
    let yaml = tenantci_core::kubeconfig::render(
        "old",
        server,
        &tenantci_core::kubeconfig::Material::Inline {
            ca_pem: &files.read("kube/ca.crt"),
            cert_pem: cert,
            key_pem: key,
        },
    );
    let client = tenantci_core::kube_client::from_kubeconfig_yaml(&yaml, "the old credential")
        .await
        .unwrap();
    let e =
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, super::harness::NAMESPACE)
            .list(&Default::default())
            .await
            .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 401),
        "the expired credential is refused: {e}"
    );
}

/// A task handed out and running: its executor fetched it and has not finished.
async fn running_task(w: &World, name: &str) -> (i64, tenantci_testkit::executor::Executor) {
    let t = w.claimed(w.enqueue(name, &secret_value(0)).await).await;
    let ex = w.executor(t).await;
    assert_eq!(ex.fetch().await.id, t);
    (t, ex)
}

/// Waits until metric `name` (summed) passes `test`.
async fn metric_until(d: &Dispatcher, name: &str, what: &str, test: impl Fn(f64) -> bool) {
    eventually(what, || async {
        d.metric(name).await.filter(|v| test(*v)).map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_facade_certificate_and_a_credential_near_expiry_are_renewed_while_a_task_runs() {
    let w = World::start_via_init().await;
    let files = Files::of(&w);
    let now = OffsetDateTime::now_utc();
    files.write_facade(&files.facade_ca(), now - DAY * 300, now + DAY);
    // 45 s left: the test outlives it, so what follows the renewal shows that the dispatcher
    // no longer needs the old credential (the apiserver refuses it once expired).
    let (old_cred, old_cred_key, old_end) =
        files.write_credential_near_expiry(&w.state_dir(), time::Duration::seconds(45));
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    let ca_pem = files.read("facade-ca.crt");
    let old_cert = files.read("facade.crt");
    assert_eq!(served(&d, &ca_pem).await, der(&old_cert));
    for m in [
        "tenantci_dispatch_facade_cert_expiry_days",
        "tenantci_dispatch_credential_expiry_days",
    ] {
        metric_until(&d, m, "a day left", |v| v < 1.5).await;
    }

    let (t, ex) = running_task(&w, "during-renewal").await;

    let config = w.config_path("d1");
    let state = w.state_dir();
    let gateway = [
        "--state-dir".as_ref(),
        state.as_os_str(),
        "--cluster".as_ref(),
        "ci".as_ref(),
    ];
    let out = renew(&config, &gateway);
    util::assert_exit(&out, 0);
    let err = util::stderr(&out);
    assert!(
        err.contains("facade-cert") && err.contains("re-issued"),
        "{err}"
    );
    assert!(
        err.contains("credential") && err.contains("rotated"),
        "{err}"
    );
    assert!(err.contains("a third or less of its life left"), "{err}");
    let new_cert = files.read("facade.crt");
    assert_ne!(new_cert, old_cert);
    assert!(
        std::fs::read_dir(files.path("kube")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("tls.crt.old-")),
        "the old credential is kept aside"
    );

    d.hangup();
    eventually("the facade to serve the renewed certificate", || async {
        (served(&d, &ca_pem).await == der(&new_cert)).then_some(())
    })
    .await;
    metric_until(
        &d,
        "tenantci_dispatch_facade_cert_expiry_days",
        "the facade certificate's year",
        |v| v > 360.0,
    )
    .await;
    metric_until(
        &d,
        "tenantci_dispatch_credential_expiry_days",
        "the renewed credential's 720 h",
        |v| v > 29.0,
    )
    .await;
    let serial = tenantci_core::pki::inspect::CertInfo::from_pem(&files.read("kube/tls.crt"))
        .unwrap()
        .serial_hex;
    eventually(
        "the kube client rebuilt on the renewed credential",
        || async {
            d.log_text()
                .lines()
                .any(|l| l.contains("took up the renewed client credential") && l.contains(&serial))
                .then_some(())
        },
    )
    .await;

    // The old credential expires: from then on the apiserver refuses it (checked here with a
    // client of our own), and everything the dispatcher does below goes out with the new one.
    // The sleep is for the certificate's end itself, not for the dispatcher.
    let wait = old_end - OffsetDateTime::now_utc() + time::Duration::SECOND;
    if wait.is_positive() {
        tokio::time::sleep(wait.unsigned_abs()).await;
    }
    assert_refused(&files, &old_cred, &old_cred_key).await;

    // Nothing due any more: said, and nothing changed.
    let out = renew(&config, &gateway);
    util::assert_exit(&out, 0);
    assert!(
        util::stdout(&out).contains("nothing due"),
        "{}",
        util::stdout(&out)
    );
    assert_eq!(files.read("facade.crt"), new_cert);
    let json = [gateway.as_slice(), &["-o".as_ref(), "json".as_ref()]].concat();
    let out = renew(&config, &json);
    util::assert_exit(&out, 0);
    let hb: serde_json::Value = serde_json::from_str(&util::stdout(&out)).unwrap();
    assert_eq!(hb["renewed"], false, "{hb}");
    let outcomes: Vec<_> = hb["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].clone(), s["outcome"].clone()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("facade-cert".into(), "kept".into()),
            ("credential".into(), "kept".into())
        ]
    );

    // The running task completes, once, and the dispatcher cleans up with the new credential.
    let done = ex.finish(t, &[&format!("ran task {t}")]).await;
    assert_eq!(done.result, 1, "TaskResult::Success");
    w.assert_succeeded_once(t).await;
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_apiserver_or_an_invalid_renewed_file_leaves_the_running_dispatcher_undisturbed()
 {
    let w = World::start_via_init().await;
    let files = Files::of(&w);
    files.write_credential_near_expiry(&w.state_dir(), DAY);
    let d = w.dispatcher("d1").await;
    d.wait_up().await;
    let (t, ex) = running_task(&w, "during-refusals").await;

    // The same credential, due, on a host whose kubeconfig names an apiserver that does not
    // answer: exit 3, one sentence naming the server, nothing written.
    let elsewhere = files.path("kube-elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::copy(files.path("kube").join(f), elsewhere.join(f)).unwrap();
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("https://{}", closed.local_addr().unwrap());
    drop(closed);
    let kubeconfig = files.read("kube/kubeconfig");
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    write_secret(
        &elsewhere.join("kubeconfig"),
        &kubeconfig.replace(&server, &dead).replace(
            files.path("kube").to_str().unwrap(),
            elsewhere.to_str().unwrap(),
        ),
    );
    let mut cfg = tenantci_dispatch::config::Config::load(&w.config_path("d1")).unwrap();
    cfg.cluster.kubeconfig = Some(elsewhere.join("kubeconfig"));
    let other = files.path("elsewhere.toml");
    std::fs::write(&other, cfg.to_toml()).unwrap();
    let before: Vec<Vec<u8>> = ["tls.crt", "tls.key", "kubeconfig"]
        .iter()
        .map(|f| std::fs::read(elsewhere.join(f)).unwrap())
        .collect();
    let state = w.state_dir();
    let out = renew(
        &other,
        &[
            "--state-dir".as_ref(),
            state.as_os_str(),
            "--cluster".as_ref(),
            "ci".as_ref(),
        ],
    );
    util::assert_exit(&out, 3);
    let err = util::stderr(&out);
    assert!(
        err.contains(&format!(
            "cannot reach the apiserver at {dead} to prove the renewed credential"
        )),
        "{err}"
    );
    assert!(err.contains("nothing was written"), "{err}");
    let after: Vec<Vec<u8>> = ["tls.crt", "tls.key", "kubeconfig"]
        .iter()
        .map(|f| std::fs::read(elsewhere.join(f)).unwrap())
        .collect();
    assert_eq!(before, after, "files unchanged");

    // Due without the gateway's ClientCA: exit 2, naming the flags.
    let out = renew(&w.config_path("d1"), &[]);
    util::assert_exit(&out, 2);
    assert!(
        util::stderr(&out).contains("--state-dir and --cluster"),
        "{}",
        util::stderr(&out)
    );

    // A facade certificate from another CA written over the real one: refused, the one in use
    // stays (a new handshake still verifies with the facade CA), the metric does not move.
    let ca_pem = files.read("facade-ca.crt");
    let in_use = der(&files.read("facade.crt"));
    let days = d
        .metric("tenantci_dispatch_facade_cert_expiry_days")
        .await
        .unwrap();
    let foreign = CertificateAuthority::generate(
        "not the facade CA",
        std::time::Duration::from_secs(86400 * 30),
    )
    .unwrap();
    let now = OffsetDateTime::now_utc();
    files.write_facade(&foreign, now - DAY, now + DAY * 20);
    d.hangup();
    eventually(
        "the dispatcher to refuse the foreign certificate",
        || async {
            d.log_text()
                .contains("refused the changed facade certificate")
                .then_some(())
        },
    )
    .await;
    assert!(
        d.log_text().contains("not signed by the facade CA"),
        "{}",
        d.log_text()
    );
    assert_eq!(served(&d, &ca_pem).await, in_use);
    // Computed at each scrape, so it moves a little; the foreign certificate had 20 days.
    let now_days = d
        .metric("tenantci_dispatch_facade_cert_expiry_days")
        .await
        .unwrap();
    assert!(
        now_days > 360.0 && now_days <= days,
        "{now_days} after {days}: still the year of the certificate in use"
    );

    let done = ex.finish(t, &[&format!("ran task {t}")]).await;
    assert_eq!(done.result, 1, "TaskResult::Success");
    w.assert_succeeded_once(t).await;
    w.all_cleaned_up().await;
}
