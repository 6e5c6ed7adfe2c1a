//! Starting the simulator (as the real binary or in-process), running kubectl with a per-test
//! cache dir, and clients with a given identity.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::util;

/// Bounds every wait on an event; a deadlock guard, not a timing assertion.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// `tenantci sim` running as a child process; SIGTERM and reaped on drop.
pub struct SimProcess {
    child: Child,
    pub ready: Value,
}

impl SimProcess {
    pub fn start(state: &Path, clusters: &[&str]) -> SimProcess {
        Self::start_with(state, clusters, &[])
    }

    /// With extra `tenantci sim` flags (e.g. `--node-boot 4s`).
    pub fn start_with(state: &Path, clusters: &[&str], extra: &[&str]) -> SimProcess {
        let mut cmd = util::tenantci();
        cmd.arg("sim").arg("--state-dir").arg(state).args(extra);
        for c in clusters {
            cmd.arg("--cluster").arg(c);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tenantci sim");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(DEADLINE)
            .expect("the simulator prints its ready line");
        let ready: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
        assert_eq!(ready["type"], "ready");
        SimProcess { child, ready }
    }

    pub fn cluster_url(&self, name: &str) -> String {
        self.cluster(name)["url"].as_str().unwrap().to_string()
    }

    pub fn cluster(&self, name: &str) -> &Value {
        self.ready["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.ready["adminKubeconfig"].as_str().unwrap())
    }

    pub fn tenant_admin(&self, name: &str) -> PathBuf {
        PathBuf::from(
            self.cluster(name)["tenantAdminKubeconfig"]
                .as_str()
                .unwrap(),
        )
    }

    /// Sends SIGTERM and waits; returns the exit status code.
    pub fn stop(mut self) -> Option<i32> {
        self.terminate()
    }

    fn terminate(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        self.child.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// kubectl with one kubeconfig and a per-test discovery cache.
pub struct Kubectl {
    pub kubeconfig: PathBuf,
    pub cache: PathBuf,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path, scratch: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache: scratch.join(format!("kube-cache-{}", rand::random::<u32>())),
        }
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache);
        c.env_remove("KUBECONFIG");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        util::run(self.command().args(args))
    }

    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
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

/// Writes a kubeconfig for `server` with a client cert from `ca` (CN, O as given).
pub fn kubeconfig_for(
    dir: &Path,
    file: &str,
    server: &str,
    server_ca_pem: &str,
    ca: &tenantci_core::pki::CertificateAuthority,
    cn: &str,
    orgs: &[&str],
) -> PathBuf {
    let cert = tenantci_core::pki::issue::client_cert(
        ca,
        &tenantci_core::pki::ClientCertSpec {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            valid_for: Duration::from_secs(3600),
            key_type: tenantci_core::pki::KeyType::EcdsaP256,
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

/// A file of the repository (manifests/, runner-configs/), or of this crate when `rel`
/// starts with `tests/`.
pub fn repo_file(rel: &str) -> PathBuf {
    let krate = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if rel.starts_with("tests/") {
        krate.join(rel)
    } else {
        krate.join("../..").join(rel)
    }
}

/// An in-process simulator with one cluster.
pub async fn in_process(scratch: &Path, cluster: &str) -> tenantci_sim::SimHandle {
    tenantci_sim::start(tenantci_sim::SimConfig {
        state_dir: scratch.join("state"),
        clusters: vec![cluster.to_string()],
        nodes: Default::default(),
    })
    .await
    .unwrap()
}
