//! `dispatch run` checks every file it loads before it connects, listens or writes: a facade
//! certificate that is expired, not yet valid or not its key's, a key open to other accounts,
//! a FIFO, a symlink to /dev/zero and an oversized secret are each refused with one sentence
//! naming the file, a `help:` line, exit 2, and nothing written.
//!
//! The config points at NATS, Gitea and an apiserver on a closed port, so the positive control
//! (every file good) gets past loading and fails where it first connects: at NATS, exit 3.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use time::OffsetDateTime;

use tenantci_core::pki::CertificateAuthority;
use tenantci_core::pki::issue::{self, IssuedCert};
use tenantci_dispatch::capability::{CapabilityKey, encode_key};
use tenantci_dispatch::config::{self, Config, files};
use tenantci_dispatch::queue::{permissions, users};

use crate::util::{assert_exit, run, scratch, snapshot, stderr, tenantci};

/// A closed port on loopback: nothing listens on port 1.
const CLOSED: &str = "127.0.0.1:1";

struct Setup {
    dir: tempfile::TempDir,
    ca: CertificateAuthority,
}

impl Setup {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> PathBuf {
        self.path("config.toml")
    }

    /// Replaces the facade certificate (and key) with one valid between the two instants.
    fn facade_valid(&self, not_before: OffsetDateTime, not_after: OffsetDateTime) {
        let leaf = issue::server_cert_between(
            &self.ca,
            "facade",
            &["127.0.0.1".into()],
            (not_before, not_after),
        )
        .unwrap();
        write_facade(self.dir.path(), &leaf);
    }

    /// `tenantci dispatch run`, asserting that it wrote nothing.
    fn run(&self) -> Output {
        let before = snapshot(self.dir.path());
        let o = run(tenantci()
            .args(["dispatch", "run", "--config"])
            .arg(self.config()));
        assert_eq!(snapshot(self.dir.path()), before, "{}", stderr(&o));
        o
    }
}

fn secret(path: &Path, text: &str) {
    tenantci_core::fsutil::write_atomic(path, text.as_bytes(), 0o600).unwrap();
}

fn write_facade(dir: &Path, leaf: &IssuedCert) {
    secret(&dir.join(files::FACADE_CERT), &leaf.cert_pem);
    secret(&dir.join(files::FACADE_KEY), &leaf.key_pem);
}

/// What `dispatch init` writes, made offline: every file good, every system on a closed port.
fn setup() -> Setup {
    let dir = scratch();
    let d = dir.path();
    secret(
        &d.join(files::SCHEDULER_CREDENTIAL),
        r#"{"id":1,"uuid":"u-1","token":"t0ken","name":"tenantci-dispatch"}"#,
    );
    secret(
        &d.join(files::CAPABILITY_KEY),
        &encode_key(&CapabilityKey::generate()),
    );
    tenantci_dispatch::queue::assignment::SealingKey::load_or_create(&d.join(files::SEALING_KEY))
        .unwrap();
    let ca = CertificateAuthority::generate("facade CA", Duration::from_secs(86400 * 30)).unwrap();
    secret(&d.join(files::FACADE_CA_CERT), ca.cert_pem());
    let leaf = issue::server_cert(
        &ca,
        "facade",
        &["127.0.0.1".into()],
        Duration::from_secs(86400),
    )
    .unwrap();
    write_facade(d, &leaf);
    let nats = d.join("nats");
    std::fs::create_dir(&nats).unwrap();
    for user in [users::PRODUCER, users::WORKER] {
        secret(&permissions::password_file(&nats, user), "pw");
    }
    secret(
        &d.join("kubeconfig"),
        &format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://{CLOSED}', insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: x}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    );
    let cfg = config_for(d, &nats);
    std::fs::write(d.join("config.toml"), cfg.to_toml()).unwrap();
    Setup { dir, ca }
}

fn config_for(d: &Path, nats: &Path) -> Config {
    Config {
        version: config::VERSION,
        gitea: tenantci_dispatch::claim::settings::Gitea {
            url: format!("http://{CLOSED}"),
            forge: Default::default(),
            runner_name: "tenantci-dispatch".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            credential_file: files::SCHEDULER_CREDENTIAL.into(),
            fetch_interval: Duration::from_secs(1).into(),
            fetch_interval_idle: Duration::from_secs(5).into(),
            keepalive_interval: Duration::from_secs(1).into(),
            ca_file: None,
        },
        cluster: config::Cluster {
            kubeconfig: Some(d.join("kubeconfig")),
            namespace: "dynamic-runner".into(),
            dispatcher_namespace: None,
            resync: None,
        },
        nats: config::Nats {
            url: format!("nats://{CLOSED}"),
            secrets_dir: nats.to_path_buf(),
            sealing_key_file: files::SEALING_KEY.into(),
            ack_wait: Duration::from_secs(30).into(),
            ca_file: None,
        },
        capacity: {
            let mut c = config::Capacity::default();
            c.set(tenantci_dispatch::backend::pod::KIND, 1);
            c.set(tenantci_dispatch::backend::vm::KIND, 1);
            c
        },
        facade: tenantci_dispatch::facade::settings::Facade {
            listen: "127.0.0.1:0".parse().unwrap(),
            url: "https://127.0.0.1:0".into(),
            capability_key_file: files::CAPABILITY_KEY.into(),
            ca_cert_file: files::FACADE_CA_CERT.into(),
            cert_file: files::FACADE_CERT.into(),
            key_file: files::FACADE_KEY.into(),
        },
        executor: tenantci_dispatch::sizing::ExecutorSettings::with_images(
            format!("gitea/act_runner@sha256:{}", "0".repeat(64)),
            format!("tenantci@sha256:{}", "1".repeat(64)),
        ),
        status: config::Status::default(),
        leader: tenantci_dispatch::leader::Leader::default(),
        webhook: None,
        waiting_jobs: None,
        claim: tenantci_dispatch::task::Claim::default(),
        vm: None,
        identity: None,
        cache: None,
        history: Default::default(),
    }
}

/// Exit 2, one `error:` sentence containing each of `says`, and a `help:` line.
#[track_caller]
fn assert_refused(o: &Output, says: &[&str]) {
    assert_exit(o, 2);
    let err = stderr(o);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    for s in says {
        assert!(errors[0].contains(s), "`{s}` in {err}");
    }
    assert!(err.lines().any(|l| l.starts_with("help: ")), "{err}");
    assert!(err.len() < 2000, "a short message:\n{err}");
}

#[test]
fn good_inputs_get_past_loading_to_the_first_connection() {
    let s = setup();
    let o = s.run();
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("cannot reach NATS"), "{}", stderr(&o));
}

#[test]
fn an_expired_or_not_yet_valid_facade_certificate_is_refused() {
    let s = setup();
    let now = OffsetDateTime::now_utc();
    s.facade_valid(
        now - time::Duration::days(10),
        now - time::Duration::days(1),
    );
    assert_refused(&s.run(), &["facade.crt", "expired at"]);
    s.facade_valid(
        now + time::Duration::days(1),
        now + time::Duration::days(10),
    );
    assert_refused(&s.run(), &["facade.crt", "is not valid before"]);
}

#[test]
fn a_facade_key_that_is_not_the_certificates_is_refused_naming_both_files() {
    let s = setup();
    let other = issue::server_cert(
        &s.ca,
        "x",
        &["127.0.0.1".into()],
        Duration::from_secs(86400),
    )
    .unwrap();
    secret(&s.path(files::FACADE_KEY), &other.key_pem);
    let o = s.run();
    assert_refused(
        &o,
        &[
            "facade.key",
            "is not the key of the facade certificate",
            "facade.crt",
        ],
    );
    assert!(!stderr(&o).contains("KeyMismatch"), "{}", stderr(&o));
}

#[test]
fn key_and_token_files_open_to_other_accounts_are_refused() {
    let s = setup();
    for name in [
        files::FACADE_KEY,
        files::SEALING_KEY,
        files::CAPABILITY_KEY,
        files::SCHEDULER_CREDENTIAL,
        "nats/ci-worker.password",
    ] {
        let path = s.path(name);
        assert!(path.exists(), "{name}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_refused(&s.run(), &[name, "mode 0644"]);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // Back to 0600 everywhere: the positive control of this loop.
    assert_exit(&s.run(), 3);
}

#[test]
fn a_fifo_and_a_symlink_to_dev_zero_are_refused_by_name() {
    let s = setup();
    let cert = s.path(files::FACADE_CERT);
    std::fs::remove_file(&cert).unwrap();
    nix::unistd::mkfifo(&cert, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_refused(&s.run(), &["facade.crt", "is a FIFO"]);
    std::fs::remove_file(&cert).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &cert).unwrap();
    assert_refused(&s.run(), &["facade.crt", "is a character device"]);
    std::os::unix::fs::symlink("/dev/zero", s.path("config-link")).unwrap();
    let o = run(tenantci()
        .args(["dispatch", "run", "--config"])
        .arg(s.path("config-link")));
    assert_refused(&o, &["config-link", "is a character device"]);
}

#[test]
fn a_five_megabyte_webhook_secret_is_refused() {
    let s = setup();
    let big = s.path("webhook.secret");
    secret(&big, &"x".repeat(5 << 20));
    let mut cfg = Config::load(&s.config()).unwrap();
    cfg.webhook = Some(tenantci_dispatch::claim::settings::Webhook::new(
        "127.0.0.1:0".parse().unwrap(),
        big.clone(),
    ));
    std::fs::write(s.config(), cfg.to_toml()).unwrap();
    assert_refused(&s.run(), &["webhook.secret", "larger than 4 KiB"]);
}

#[test]
fn a_gitea_ca_file_without_a_certificate_is_refused_at_start() {
    let s = setup();
    let ca = s.path("gitea-ca.crt");
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let mut cfg = Config::load(&s.config()).unwrap();
    cfg.gitea.ca_file = Some(ca);
    std::fs::write(s.config(), cfg.to_toml()).unwrap();
    assert_refused(&s.run(), &["gitea-ca.crt", "holds no PEM certificate"]);
}
