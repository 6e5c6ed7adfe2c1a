//! GitLab behind a private CA or with a self-signed certificate, end to end: what tenantci
//! trusted to reach GitLab is what the config.toml entry tells gitlab-runner to trust.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{assert_exit, mode, run, scratch, stderr, tenantci};
use tenantci_testkit::gitlab::{DEFAULT_ACCESS_TOKEN, GitlabDouble};

/// `openssl req -x509` with its default extensions (CA:TRUE), for 127.0.0.1 and localhost.
fn openssl_self_signed(dir: &Path, name: &str) -> (String, String) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&cert).unwrap();
    assert!(
        tenantci_core::pki::inspect::CertInfo::from_pem(&text)
            .unwrap()
            .is_ca,
        "openssl's default marks it CA:TRUE"
    );
    (text, std::fs::read_to_string(&key).unwrap())
}

/// A CA:TRUE certificate for 127.0.0.1 signed by a separate CA: the CA's PEM and the leaf's
/// certificate and key.
fn ca_true_leaf() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let leaf = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

/// `runner gitlab-config` creating the runner at `url` through the API, trusting `ca_file`.
fn gitlab_config(dir: &Path, url: &str, ca_file: &Path) -> Output {
    let token = dir.join("api-token");
    std::fs::write(&token, DEFAULT_ACCESS_TOKEN).unwrap();
    run(tenantci()
        .args(["runner", "gitlab-config", "--name", "tenant-a", "--config"])
        .arg(dir.join("gitlab-runner/config.toml"))
        .args(["--url", url, "--gitlab-api-token-file"])
        .arg(&token)
        .args(["--runner-type", "instance_type", "--run-untagged"])
        .args(["--gitlab-timeout", "5s", "--gitlab-ca-file"])
        .arg(ca_file))
}

async fn gitlab_config_async(dir: &Path, url: String, ca_file: &Path) -> Output {
    let (dir, ca_file) = (dir.to_path_buf(), ca_file.to_path_buf());
    tokio::task::spawn_blocking(move || gitlab_config(&dir, &url, &ca_file))
        .await
        .unwrap()
}

/// An HTTPS client that trusts only `ca_file`, as gitlab-runner with `tls-ca-file` does
/// (no public roots: the double's certificate is not in them anyway).
pub async fn verify_as_gitlab_runner(url: &str, ca_file: &Path, token: &str) -> u16 {
    let pem = std::fs::read(ca_file).unwrap();
    let mut builder = reqwest::Client::builder().tls_built_in_root_certs(false);
    for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap() {
        builder = builder.add_root_certificate(cert);
    }
    builder
        .build()
        .unwrap()
        .post(format!("{url}/api/v4/runners/verify"))
        .json(&serde_json::json!({"token": token, "system_id": "s_000000000001"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

pub fn tls_ca_file(config: &Path) -> Option<PathBuf> {
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    let runners = doc["runners"].as_array_of_tables().unwrap();
    let ours = runners
        .iter()
        .find(|r| r["executor"].as_str() == Some("kubernetes"))?;
    ours.get("tls-ca-file")?.as_str().map(PathBuf::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_gitlab_is_trusted_as_gitlab_runner_trusts_it() {
    let dir = scratch();
    let (cert, key) = openssl_self_signed(dir.path(), "gitlab");
    let gitlab = GitlabDouble::start_tls_with(&cert, &key).await.unwrap();
    let ca_file = dir.path().join("gitlab.crt");
    let o = gitlab_config_async(dir.path(), gitlab.url(), &ca_file).await;
    assert_exit(&o, 0);
    assert_eq!(gitlab.runners().len(), 1);
    let config = dir.path().join("gitlab-runner/config.toml");
    let copy = tls_ca_file(&config).expect("the entry carries tls-ca-file");
    assert_eq!(copy, dir.path().join("gitlab-runner/gitlab-ca.crt"));
    assert_eq!(mode(&copy), 0o600);
    // OpenSSL, like Go, accepts the trusted self-signed certificate as the server's own.
    let port = gitlab.url().rsplit(':').next().unwrap().to_string();
    let o = Command::new("openssl")
        .args([
            "s_client",
            "-brief",
            "-verify_return_error",
            "-verify_ip",
            "127.0.0.1",
        ])
        .args(["-connect", &format!("127.0.0.1:{port}"), "-CAfile"])
        .arg(&copy)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_self_signed_certificate_for_the_same_name_is_refused() {
    let dir = scratch();
    let (cert, key) = openssl_self_signed(dir.path(), "gitlab");
    let (_other, _) = openssl_self_signed(dir.path(), "impostor");
    let gitlab = GitlabDouble::start_tls_with(&cert, &key).await.unwrap();
    let o = gitlab_config_async(dir.path(), gitlab.url(), &dir.path().join("impostor.crt")).await;
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("cannot reach GitLab"), "{}", stderr(&o));
    assert!(gitlab.runners().is_empty());
    assert!(
        !dir.path().join("gitlab-runner").exists(),
        "nothing written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_true_leaf_signed_by_the_trusted_ca_is_refused() {
    let dir = scratch();
    let (ca_pem, leaf_pem, leaf_key) = ca_true_leaf();
    let ca_file = dir.path().join("corp-ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let gitlab = GitlabDouble::start_tls_with(&leaf_pem, &leaf_key)
        .await
        .unwrap();
    let o = gitlab_config_async(dir.path(), gitlab.url(), &ca_file).await;
    assert_exit(&o, 3);
    assert!(stderr(&o).contains("CaUsedAsEndEntity"), "{}", stderr(&o));
    assert!(gitlab.runners().is_empty());
}
