//! Credential mint throughput: tenantci against an `openssl req` + `openssl x509 -req`
//! pipeline that produces the same certificate (P-256 or RSA-2048 key, O and CN, clientAuth,
//! digitalSignature, CA:FALSE, SKI/AKI), measured side by side in one run.
//!
//! Rows: the library in-process (what `bootstrap runner` pays), the `tenantci credential mint`
//! process (what an operator pays, four files written), and the openssl pipeline (two
//! processes, the way runbooks usually do it). Prints a Markdown table and writes it to
//! docs/benchmarks/mint.md. Run with `scripts/bench.sh mint`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tenantci_core::pki::KeyType;
use tenantci_runner::credential::{CaSource, MintRequest, mint};

const SERVER: &str = "https://127.0.0.1:6443";

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn lib_mint(state: &Path, out_root: &Path, n: usize, key_type: KeyType) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        let req = MintRequest {
            ca: CaSource::StateDir {
                state_dir: state.to_path_buf(),
                cluster: "ci".into(),
            },
            server: SERVER.into(),
            common_name: "gitlab-runner".into(),
            organizations: vec!["gitlab-runner".into()],
            out_dir: out_root.join(format!("lib-{key_type:?}-{i}")),
            valid_for: Some("720h".into()),
            key_type,
        };
        mint(&req).expect("mint");
    }
    start.elapsed()
}

/// Signing alone: the ClientCA loaded once, key generation and signing per credential, no
/// files (what a long-running caller such as the dispatcher would pay).
fn sign_only(state: &Path, n: usize, key_type: KeyType) -> Duration {
    let pki = state.join("clusters/ci/pki");
    let ca = tenantci_core::pki::CertificateAuthority::load(
        &pki.join("client-ca.crt"),
        &pki.join("client-ca.key"),
    )
    .unwrap();
    let spec = tenantci_core::pki::ClientCertSpec {
        common_name: "gitlab-runner".into(),
        organizations: vec!["gitlab-runner".into()],
        valid_for: Duration::from_secs(720 * 3600),
        key_type,
    };
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(tenantci_core::pki::issue::client_cert(&ca, &spec).unwrap());
    }
    start.elapsed()
}

fn cli_mint(bin: &Path, state: &Path, out_root: &Path, n: usize, key_type: &str) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        let out = out_root.join(format!("cli-{key_type}-{i}"));
        let status = Command::new(bin)
            .args(["credential", "mint", "--state-dir"])
            .arg(state)
            .args([
                "--cluster",
                "ci",
                "--server",
                SERVER,
                "--common-name",
                "gitlab-runner",
            ])
            .args([
                "--organization",
                "gitlab-runner",
                "--valid-for",
                "720h",
                "--key-type",
                key_type,
            ])
            .arg("--out-dir")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run tenantci");
        assert!(status.success());
    }
    start.elapsed()
}

fn openssl_mint(state: &Path, out_root: &Path, n: usize, rsa: bool) -> Duration {
    let pki = state.join("clusters/ci/pki");
    let ext = out_root.join("client.ext");
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
    )
    .unwrap();
    let newkey = if rsa { "rsa:2048" } else { "ec" };
    let start = Instant::now();
    for i in 0..n {
        let dir = out_root.join(format!("openssl-{rsa}-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut req = Command::new("openssl");
        req.args(["req", "-new", "-nodes", "-newkey", newkey]);
        if !rsa {
            req.args(["-pkeyopt", "ec_paramgen_curve:P-256"]);
        }
        let ok = req
            .args(["-subj", "/O=gitlab-runner/CN=gitlab-runner", "-keyout"])
            .arg(dir.join("tls.key"))
            .arg("-out")
            .arg(dir.join("tls.csr"))
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl req")
            .success();
        assert!(ok);
        let ok = Command::new("openssl")
            .args(["x509", "-req", "-days", "30", "-sha256", "-set_serial"])
            .arg(format!("0x{}", hex::encode(rand::random::<[u8; 16]>())))
            .arg("-in")
            .arg(dir.join("tls.csr"))
            .arg("-CA")
            .arg(pki.join("client-ca.crt"))
            .arg("-CAkey")
            .arg(pki.join("client-ca.key"))
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(dir.join("tls.crt"))
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl x509")
            .success();
        assert!(ok);
    }
    start.elapsed()
}

fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let n: usize = std::env::var("MINT_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let n_rsa = (n / 4).max(10);
    let bin = std::env::var("TENANTCI_BIN").unwrap_or_else(|_| "target/debug/tenantci".into());
    let bin = Path::new(&bin);
    let tmp = tempfile::tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let state = tmp.path().join("state");
    tenantci_core::gateway::cluster_pki::init_cluster(
        &tenantci_core::gateway::StateDir::new(&state),
        "ci",
        Duration::from_secs(3650 * 86400),
    )
    .unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();

    let ec_sign = rate(n, sign_only(&state, n, KeyType::EcdsaP256));
    let rsa_sign = rate(n_rsa, sign_only(&state, n_rsa, KeyType::Rsa2048));
    let ec_lib = rate(n, lib_mint(&state, &out, n, KeyType::EcdsaP256));
    let ec_cli = rate(n, cli_mint(bin, &state, &out, n, "ecdsa-p256"));
    let ec_ssl = rate(n, openssl_mint(&state, &out, n, false));
    let rsa_lib = rate(n_rsa, lib_mint(&state, &out, n_rsa, KeyType::Rsa2048));
    let rsa_cli = rate(n_rsa, cli_mint(bin, &state, &out, n_rsa, "rsa-2048"));
    let rsa_ssl = rate(n_rsa, openssl_mint(&state, &out, n_rsa, true));

    let openssl_version = Command::new("openssl")
        .arg("version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let table = format!(
        "| path | ECDSA P-256 creds/s | vs openssl | RSA-2048 creds/s | vs openssl |\n\
         |---|---:|---:|---:|---:|\n\
         | tenantci signing, in-process (CA loaded once, no files) | {ec_sign:.0} | {:.1}x | {rsa_sign:.1} | {:.1}x |\n\
         | tenantci library `credential::mint` (CA load, 4 files, fsync) | {ec_lib:.0} | {:.1}x | {rsa_lib:.1} | {:.1}x |\n\
         | `tenantci credential mint` process | {ec_cli:.0} | {:.1}x | {rsa_cli:.1} | {:.1}x |\n\
         | `openssl req` + `openssl x509 -req` | {ec_ssl:.0} | 1.0x | {rsa_ssl:.1} | 1.0x |\n",
        ec_sign / ec_ssl,
        rsa_sign / rsa_ssl,
        ec_lib / ec_ssl,
        rsa_lib / rsa_ssl,
        ec_cli / ec_ssl,
        rsa_cli / rsa_ssl,
    );
    let doc = format!(
        "## Credential mint throughput\n\n\
         `crates/tenantci-bench/src/bin/bench_mint.rs` (`scripts/bench.sh mint`), one run, {n} ECDSA and {n_rsa} RSA credentials per row, \
         dev profile (dependencies at opt-level 1, as the tests build them), 2 cores; baseline {openssl_version}. Each credential is the same certificate \
         (O and CN, clientAuth, digitalSignature, CA:FALSE, SKI/AKI, 128-bit serial).\n\n{table}\n\
         Goal: at least 20x the openssl pipeline for ECDSA. The signing row is the cryptographic \
         work both pipelines do; `credential::mint` adds reading and checking the CA and five fsyncs \
         (four files and the directory), which openssl's pipeline does not do; the process row adds \
         process start-up.\n"
    );
    print!("{doc}");
    let path = Path::new("docs/benchmarks/mint.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, doc).unwrap();
}
