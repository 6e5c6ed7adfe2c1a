//! Talking to a (simulated) apiserver as a given identity: kubectl with one kubeconfig and
//! its own discovery cache, kube-rs clients, and kubeconfigs with a client cert from a CA.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tenantci_core::pki::{self, CertificateAuthority, ClientCertSpec, KeyType};

/// kubectl with one kubeconfig and a discovery cache of its own (never `~/.kube`).
pub struct Kubectl {
    /// The kubeconfig every call passes as `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// kubectl's discovery cache directory (`--cache-dir`).
    pub cache: PathBuf,
}

impl Kubectl {
    /// The cache goes under `scratch`, which the caller removes.
    pub fn new(kubeconfig: &Path, scratch: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache: scratch.join(format!("kube-cache-{}", rand::random::<u32>())),
        }
    }

    /// `kubectl --kubeconfig K --cache-dir C`, with `KUBECONFIG` removed.
    pub fn command(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .env_remove("KUBECONFIG");
        c
    }

    /// Runs `kubectl` with `args` and waits: its exit status and output (panics only when kubectl
    /// cannot be started).
    pub fn run(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"))
    }

    /// Runs with `stdin` as standard input (e.g. `apply -f -`).
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kubectl {args:?}: {e}"));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    tenantci_core::kube_client::from_kubeconfig(kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{}", e.render()))
}

/// Writes `dir/file`, a kubeconfig for `server` (trusting `server_ca_pem`) with a client cert
/// from `ca` for CN `cn` and organizations `orgs`, valid for an hour.
pub fn kubeconfig_for(
    dir: &Path,
    file: &str,
    server: &str,
    server_ca_pem: &str,
    ca: &CertificateAuthority,
    cn: &str,
    orgs: &[&str],
) -> PathBuf {
    let cert = pki::issue::client_cert(
        ca,
        &ClientCertSpec {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            valid_for: Duration::from_secs(3600),
            key_type: KeyType::EcdsaP256,
        },
    )
    .unwrap();
    let text = tenantci_core::kubeconfig::render(
        "t",
        server,
        &tenantci_core::kubeconfig::Material::Inline {
            ca_pem: server_ca_pem,
            cert_pem: &cert.cert_pem,
            key_pem: &cert.key_pem,
        },
    );
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}
