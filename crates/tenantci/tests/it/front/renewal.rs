//! Renewal of the runner's certificate through the front, signed by `front signer` (the only
//! process reading the ClientCA key): `front connect` renews three times in a row, 45-second
//! certificates renewed at two thirds of their life, while a kubectl watch stays open and curl
//! GETs run through the tunnel; and the signer, asked through the front or directly on its
//! socket (as a front taken over would), refuses everything but the presented certificate's
//! own, allowed, unrevoked subject within the lifetime cap.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tunnel::Watch;
use super::{
    Gateway, RunnerHost, blocking, bundle_command, connect_with, curl_through, gateway_with, start,
};
use crate::util::{assert_exit, run, scratch, tenantci};
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, csr, issue};
use tenantci_front::renew::{self, Answer, SignRequest};
use tenantci_testkit::process::Process;
use tenantci_testkit::wait::eventually;

const PODS: &str = "/api/v1/namespaces/gitlab-runner/pods";
/// The renewed certificates' life: renewal at two thirds of it, every 30 seconds.
const LIFE: std::time::Duration = std::time::Duration::from_secs(45);

/// The front with a short overlap and a 2-minute cap, and its signer.
async fn gateway_and_signer() -> (Gateway, Process, PathBuf) {
    let renewal = [("overlap", "3s"), ("max_lifetime", "2m")];
    // The GET loop and the probes of old serials come from one address, faster than the
    // default per-source rate allows.
    let limits = [
        ("new_per_second", 1000),
        ("new_per_second_per_source", 1000),
    ];
    let gw = gateway_with(&limits, &renewal).await;
    let log = gw.root().join("signer.log");
    let mut cmd = tenantci();
    cmd.args(["-v", "front", "signer", "--config"])
        .arg(gw.config())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let (signer, ready) = start(cmd, "front signer").await;
    assert_eq!(
        ready["socket"],
        gw.front_dir().join("signer.sock").display().to_string()
    );
    (gw, signer, log)
}

/// A runner credential of `LIFE` for CN/O gitlab-runner (the RBAC `bootstrap runner`
/// applied), minted from the cluster's ClientCA into `dir` as `credential mint` writes one.
fn short_credential(gw: &Gateway, dir: &Path, cn: &str, orgs: &[&str]) {
    let pki = gw.state().join("clusters/ci/pki");
    let ca =
        CertificateAuthority::load(&pki.join("client-ca.crt"), &pki.join("client-ca.key")).unwrap();
    let spec = ClientCertSpec {
        common_name: cn.into(),
        organizations: orgs.iter().map(|o| o.to_string()).collect(),
        valid_for: LIFE,
        key_type: KeyType::EcdsaP256,
    };
    let cert = issue::client_cert(&ca, &spec).unwrap();
    tenantci_core::fsutil::create_dir_all(dir, 0o700).unwrap();
    std::fs::copy(gw.creds().join("ca.crt"), dir.join("ca.crt")).unwrap();
    for (name, body) in [("tls.crt", &cert.cert_pem), ("tls.key", &cert.key_pem)] {
        tenantci_core::fsutil::write_atomic(&dir.join(name), body.as_bytes(), 0o600).unwrap();
    }
}

fn serial_of(pem: &str) -> String {
    let hex = CertInfo::from_pem(pem).unwrap().serial_hex;
    tenantci_front::deny::normalize(&hex).unwrap()
}

/// curl GETs through the tunnel until stopped: (answered, failed).
fn get_loop(
    host: &RunnerHost,
    creds: &Path,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    let (url, creds) = (host.url.clone(), creds.to_path_buf());
    std::thread::spawn(move || {
        let (mut ok, mut failed) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let o = run(&mut curl_through(&url, &creds, PODS));
            if o.status.success() {
                ok += 1;
            } else {
                failed += 1;
                eprintln!("GET failed: {}", String::from_utf8_lossy(&o.stderr));
            }
        }
        (ok, failed)
    })
}

/// Stops the GET loop however the test ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn count(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_renews_three_times_under_load_and_the_old_serials_are_refused() {
    let (gw, _signer, signer_log) = gateway_and_signer().await;
    let minted = gw.root().join("short-creds");
    short_credential(&gw, &minted, "gitlab-runner", &["gitlab-runner"]);
    // The runner host: the bundle, gitlab-runner's files from it, connect writing both.
    let runner = scratch();
    let runner_dir = runner.path().join("gitlab-runner");
    let port = super::free_port("127.0.0.2");
    let bundle = runner.path().join("front-bundle.json");
    let cmd = bundle_command(&gw, &minted, &format!("127.0.0.2:{port}"), &bundle);
    assert_exit(&blocking(cmd).await, 0);
    let mut unpack = tenantci();
    unpack
        .args(["front", "unpack", "--bundle"])
        .arg(&bundle)
        .arg("--dir")
        .arg(&runner_dir);
    assert_exit(&blocking(unpack).await, 0);
    let first_key = std::fs::read(runner_dir.join("tls.key")).unwrap();
    let flags = [
        "--renew-valid-for",
        "45s",
        "--metrics-listen",
        "127.0.0.2:0",
    ];
    let mut extra: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    extra.extend(["--runner-dir".into(), runner_dir.display().to_string()]);
    let (host, ready) = connect_with(runner, port, "127.0.0.2", &extra).await;
    let connect_log = host.dir.path().join("connect.log");
    let connect_metrics = ready["metrics"].as_str().unwrap().to_string();

    // No client-side timeout: the watch lives as long as its tunnel.
    let watch = Watch::start_with(&host, &runner_dir, &["--request-timeout", "0"]);
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_panic = StopOnDrop(stop.clone());
    let gets = get_loop(&host, &runner_dir, stop.clone());
    let mut keys = vec![first_key];
    for n in 1..=3 {
        let before = std::fs::read_to_string(&bundle).unwrap();
        let old: tenantci_front::bundle::Bundle = serde_json::from_str(&before).unwrap();
        let old_serial = serial_of(&old.cert);
        eventually(&format!("renewal {n}"), || async {
            (count(&connect_log, "renewed the certificate") >= n).then_some(())
        })
        .await;
        let now: tenantci_front::bundle::Bundle =
            serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
        assert_ne!(serial_of(&now.cert), old_serial);
        assert_eq!(
            std::fs::read_to_string(runner_dir.join("tls.crt")).unwrap(),
            now.cert
        );
        let key = std::fs::read(runner_dir.join("tls.key")).unwrap();
        assert_eq!(key, now.key.expose().as_bytes());
        assert!(!keys.contains(&key), "renewal {n} made a new key");
        keys.push(key);
        old_serial_is_refused(&gw, &old, &old_serial).await;
    }
    // The watch opened before the first renewal still carries changes.
    let create = [
        "create",
        "configmap",
        "after-renewals",
        "-n",
        "gitlab-runner",
    ];
    assert_exit(&blocking(host.kubectl(&runner_dir, &create)).await, 0);
    let mut watch = watch.shows("after-renewals").await;
    assert!(
        watch.running(),
        "the watch opened before the renewals ended"
    );
    stop.store(true, Ordering::Relaxed);
    let (answered, failed) = tokio::task::spawn_blocking(move || gets.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        failed, 0,
        "{failed} GETs failed across the renewals ({answered} answered)"
    );
    assert!(answered > 0);

    let signed = count(&signer_log, "outcome=\"signed\"");
    assert_eq!(
        signed,
        3,
        "{}",
        std::fs::read_to_string(&signer_log).unwrap()
    );
    assert_eq!(count(&signer_log, "outcome=\"refused\""), 0);
    // The new keys never reached the gateway's side: not in any file under its directories.
    for key in &keys[1..] {
        if let Some(p) = file_containing(gw.root(), key) {
            panic!("a renewed key is on the gateway side: {}", p.display());
        }
    }
    let metrics = super::curl_metrics(&connect_metrics).await;
    let now: tenantci_front::bundle::Bundle =
        serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    let end = CertInfo::from_pem(&now.cert)
        .unwrap()
        .not_after
        .unix_timestamp();
    assert!(
        metrics.contains(&format!(
            "tenantci_front_connect_cert_expiry_timestamp_seconds {end}"
        )),
        "{metrics}"
    );
    assert!(
        gw.metrics()
            .await
            .contains("tenantci_front_client_cert_expiry_timestamp_seconds{")
    );
}

/// After its overlap, a renewed certificate opens no new tunnel (its audit line says why).
async fn old_serial_is_refused(gw: &Gateway, old: &tenantci_front::bundle::Bundle, serial: &str) {
    let dialer = tenantci_front::connect::Dialer::new(old).unwrap();
    let line = format!("serial=\"{serial}\"");
    eventually("the old serial refused after its overlap", || async {
        // Admitted (within the overlap), the tunnel waits on the apiserver: not waited for.
        let probe = async {
            if let Ok(mut s) = dialer.dial().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = s.write_all(b"\x16").await;
                let _ = s.read(&mut [0u8; 16]).await;
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), probe).await;
        let audit = gw.audit();
        audit
            .lines()
            .any(|l| l.contains(&line) && l.contains("end=\"superseded\""))
            .then_some(())
    })
    .await;
}

fn file_containing(dir: &Path, needle: &[u8]) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let kind = entry.file_type().ok()?;
        if kind.is_dir() {
            if let Some(p) = file_containing(&path, needle) {
                return Some(p);
            }
        } else if kind.is_file()
            && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
        {
            return Some(path);
        }
    }
    None
}

/// One request to the signer's socket, as the front (or a front taken over) sends it.
async fn ask_signer(gw: &Gateway, presented: &str, cn: &str, orgs: &[&str], secs: u64) -> Answer {
    let orgs: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
    let req = csr::new_request(cn, &orgs, KeyType::EcdsaP256).unwrap();
    let sign = SignRequest {
        version: renew::VERSION,
        cluster: "ci".into(),
        presented: presented.to_string(),
        csr: req.csr_pem,
        valid_for_seconds: secs,
    };
    let socket = gw.front_dir().join("signer.sock");
    tenantci_front::signer::ask(&socket, &sign).await.unwrap()
}

fn refused(a: &Answer) -> &str {
    match a {
        Answer::Refused { reason, .. } => reason,
        Answer::Signed { serial, .. } => panic!("signed {serial}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signer_refuses_all_but_an_allowed_own_renewal_and_says_why() {
    let (gw, _signer, signer_log) = gateway_and_signer().await;
    let creds = gw.root().join("short-creds");
    short_credential(&gw, &creds, "gitlab-runner", &["gitlab-runner"]);
    let cert = std::fs::read_to_string(creds.join("tls.crt")).unwrap();
    let runner = ["gitlab-runner"];

    // Through the front, with the runner's own session: another subject.
    let b = super::bundle_at(&gw, &creds).await;
    let dialer = tenantci_front::connect::Dialer::new(&b).unwrap();
    let mut s = dialer.dial_renewal().await.unwrap();
    let other = csr::new_request(
        "someone-else",
        &["gitlab-runner".into()],
        KeyType::EcdsaP256,
    )
    .unwrap();
    let req = renew::RenewRequest {
        version: renew::VERSION,
        csr: other.csr_pem,
        valid_for_seconds: 45,
    };
    renew::write(&mut s, &req).await.unwrap();
    let a: Answer = renew::read(&mut s).await.unwrap();
    assert_eq!(refused(&a), "not_allowed");

    // Directly on the socket, as a front taken over would ask.
    let masters = ask_signer(&gw, &cert, "gitlab-runner", &["system:masters"], 45).await;
    assert_eq!(refused(&masters), "system_masters");
    let long = ask_signer(&gw, &cert, "gitlab-runner", &runner, 3600).await;
    assert_eq!(refused(&long), "lifetime");
    // A certificate of the ClientCA for a subject the allow-list does not name.
    let intruder = gw.root().join("intruder");
    short_credential(&gw, &intruder, "intruder", &["intruders"]);
    let intruder_cert = std::fs::read_to_string(intruder.join("tls.crt")).unwrap();
    let a = ask_signer(&gw, &intruder_cert, "intruder", &["intruders"], 45).await;
    assert_eq!(refused(&a), "not_allowed");
    // A certificate of another CA claiming the allowed subject.
    let stranger = CertificateAuthority::generate("stranger", LIFE).unwrap();
    let spec = ClientCertSpec {
        common_name: "gitlab-runner".into(),
        organizations: vec!["gitlab-runner".into()],
        valid_for: LIFE,
        key_type: KeyType::EcdsaP256,
    };
    let forged = issue::client_cert(&stranger, &spec).unwrap().cert_pem;
    let a = ask_signer(&gw, &forged, "gitlab-runner", &runner, 45).await;
    assert_eq!(refused(&a), "bad_certificate");

    // The allow-list drops the subject: the signer reads the config itself, per request.
    let config = std::fs::read_to_string(gw.config()).unwrap();
    std::fs::write(
        gw.config(),
        config.replace(
            "common_name = \"gitlab-runner\"",
            "common_name = \"another-runner\"",
        ),
    )
    .unwrap();
    let a = ask_signer(&gw, &cert, "gitlab-runner", &runner, 45).await;
    assert_eq!(refused(&a), "not_allowed");
    std::fs::write(gw.config(), &config).unwrap();
    // Revoked.
    let mut revoke = tenantci();
    revoke
        .args(["front", "revoke", "--config"])
        .arg(gw.config())
        .arg("--cert")
        .arg(creds.join("tls.crt"));
    assert_exit(&blocking(revoke).await, 0);
    let a = ask_signer(&gw, &cert, "gitlab-runner", &runner, 45).await;
    assert_eq!(refused(&a), "revoked");

    let log = std::fs::read_to_string(&signer_log).unwrap();
    assert_eq!(count(&signer_log, "outcome=\"signed\""), 0, "{log}");
    for reason in [
        "not_allowed",
        "system_masters",
        "lifetime",
        "bad_certificate",
        "revoked",
    ] {
        assert!(
            log.contains(&format!("reason=\"{reason}\"")),
            "{reason}: {log}"
        );
    }
    // The front's own audit line of the refused renewal through it.
    assert!(
        gw.audit().contains("end=\"renewal_not_allowed\""),
        "{}",
        gw.audit()
    );
}
