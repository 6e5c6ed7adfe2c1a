//! `tenantci front`: the front on the gateway side (127.0.0.1), `front connect` on 127.0.0.2
//! standing for the runner's host, the simulator's real HTTPS apiserver behind, real kubectl
//! and `runner check` through the tunnel. Connections reaching the apiserver are counted at the
//! simulator, so "refused at the front" means nothing arrived there.

mod attack;
mod fairness;
mod flood;
mod live;
mod refusals;
mod renewal;
mod revocation;
mod runner;
mod tunnel;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::util::{assert_exit, bootstrap_gitlab, run, scratch, tenantci};
use tenantci_testkit::process::{Process, first_line};

/// The gateway side: the in-process simulator, a runner credential with its RBAC applied
/// (`bootstrap runner`), and a running `front serve` from `front init`'s config.
pub struct Gateway {
    pub dir: tempfile::TempDir,
    pub sim: tenantci_sim::SimHandle,
    pub front: Process,
    pub front_addr: String,
    pub metrics_addr: String,
    pub front_log: PathBuf,
}

impl Gateway {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.root().join("state")
    }

    pub fn creds(&self) -> PathBuf {
        self.root().join("creds")
    }

    pub fn front_dir(&self) -> PathBuf {
        self.root().join("front")
    }

    pub fn config(&self) -> PathBuf {
        self.front_dir().join("front.toml")
    }

    /// TCP connections the cluster's apiserver has accepted so far.
    pub fn apiserver_connections(&self) -> u64 {
        self.sim.tenant("ci").unwrap().connections()
    }

    /// The front's `/metrics` text.
    pub async fn metrics(&self) -> String {
        curl_metrics(&self.metrics_addr).await
    }

    /// The front's stderr so far (its audit lines).
    pub fn audit(&self) -> String {
        std::fs::read_to_string(&self.front_log).unwrap_or_default()
    }
}

/// The `/metrics` text at `addr`.
pub async fn curl_metrics(addr: &str) -> String {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail", &format!("http://{addr}/metrics")]);
    let o = blocking(c).await;
    assert_exit(&o, 0);
    String::from_utf8(o.stdout).unwrap()
}

/// Starts the gateway side; `limits` is appended to the config's [limits] table.
pub async fn gateway(limits: &[(&str, i64)]) -> Gateway {
    gateway_with(limits, &[]).await
}

/// [`gateway`] with `renewal` set in the config's [renewal] table (before the front starts).
pub async fn gateway_with(limits: &[(&str, i64)], renewal: &[(&str, &str)]) -> Gateway {
    let dir = scratch();
    let root = dir.path().to_path_buf();
    let sim = tenantci_testkit::sim::in_process(&root, "ci").await;
    let o = blocking(bootstrap(&root)).await;
    assert_exit(&o, 0);
    let mut init = tenantci();
    init.args([
        "front",
        "init",
        "--cluster",
        "ci",
        "--listen",
        "127.0.0.1:0",
    ])
    .args(["--name", "127.0.0.1", "--name", "front.test"])
    .args(["--metrics-listen", "127.0.0.1:0"])
    .arg("--dir")
    .arg(root.join("front"))
    .arg("--state-dir")
    .arg(root.join("state"));
    assert_exit(&blocking(init).await, 0);
    set_limits(&root.join("front/front.toml"), limits);
    set_table(&root.join("front/front.toml"), "renewal", renewal);
    let front_log = root.join("front.log");
    let mut serve = tenantci();
    serve
        .args(["-v", "front", "serve", "--config"])
        .arg(root.join("front/front.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&front_log).unwrap());
    let (front, ready) = start(serve, "front serve").await;
    Gateway {
        dir,
        sim,
        front,
        front_addr: ready["listen"].as_str().unwrap().to_string(),
        metrics_addr: ready["metrics"].as_str().unwrap().to_string(),
        front_log,
    }
}

fn bootstrap(root: &Path) -> Command {
    std::fs::write(root.join("token"), "glrt-front-test\n").unwrap();
    bootstrap_command(root, &root.join("creds"))
}

/// `bootstrap runner` of the gateway under `root` with its credential in `creds`.
pub fn bootstrap_command(root: &Path, creds: &Path) -> Command {
    let mut cmd = bootstrap_gitlab(
        &root.join("state"),
        creds,
        &root.join("gateway-runner/config.toml"),
    );
    cmd.args([
        "--gitlab-url",
        "https://gitlab.example.com",
        "--runner-token-file",
    ])
    .arg(root.join("token"));
    cmd
}

fn set_limits(config: &Path, limits: &[(&str, i64)]) {
    let mut doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    for (k, v) in limits {
        doc["limits"][k] = toml_edit::value(*v);
    }
    std::fs::write(config, doc.to_string()).unwrap();
}

fn set_table(config: &Path, table: &str, values: &[(&str, &str)]) {
    let mut doc: toml_edit::DocumentMut = std::fs::read_to_string(config).unwrap().parse().unwrap();
    for (k, v) in values {
        doc[table][k] = toml_edit::value(*v);
    }
    std::fs::write(config, doc.to_string()).unwrap();
}

/// Runs a command off the async runtime (the in-process simulator needs its threads).
pub async fn blocking(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || run(&mut cmd))
        .await
        .unwrap()
}

/// Spawns a server and waits for its JSON ready line.
pub async fn start(mut cmd: Command, what: &'static str) -> (Process, Value) {
    tokio::task::spawn_blocking(move || {
        let mut p = Process::spawn(&mut cmd);
        let line = first_line(p.child().stdout.take().unwrap(), what);
        let ready: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: {line}: {e}"));
        (p, ready)
    })
    .await
    .unwrap()
}

/// The runner host's side: the bundle and a running `front connect` on `listen`.
pub struct RunnerHost {
    pub dir: tempfile::TempDir,
    pub connect: Process,
    /// https://<listen>
    pub url: String,
}

impl RunnerHost {
    pub fn bundle(&self) -> PathBuf {
        self.dir.path().join("front-bundle.json")
    }

    /// kubectl with the runner's credential files through the tunnel (SNI and the serving
    /// certificate's check as for 127.0.0.1: the apiserver's certificate names loopback).
    pub fn kubectl(&self, creds: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--server")
            .arg(&self.url)
            .args(["--tls-server-name", "localhost", "--request-timeout", "20s"])
            .arg("--certificate-authority")
            .arg(creds.join("ca.crt"))
            .arg("--client-certificate")
            .arg(creds.join("tls.crt"))
            .arg("--client-key")
            .arg(creds.join("tls.key"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("kcache"))
            .env("KUBECONFIG", self.dir.path().join("no-such-kubeconfig"))
            .args(args);
        c
    }
}

impl RunnerHost {
    /// One request with curl through the tunnel (no retries, unlike kubectl, which retries a
    /// GET that ends in EOF for about ten seconds): exit 0 only when the apiserver answered.
    pub fn curl(&self, creds: &Path, path: &str) -> Command {
        curl_through(&self.url, creds, path)
    }
}

/// [`RunnerHost::curl`] through the tunnel at `url`.
pub fn curl_through(url: &str, creds: &Path, path: &str) -> Command {
    {
        let port = url.rsplit(':').next().unwrap();
        let ip = url
            .trim_start_matches("https://")
            .split(':')
            .next()
            .unwrap();
        let mut c = Command::new("curl");
        c.args(["-sS", "--fail", "--max-time", "20"])
            .args(["--resolve", &format!("localhost:{port}:{ip}")])
            .arg("--cacert")
            .arg(creds.join("ca.crt"))
            .arg("--cert")
            .arg(creds.join("tls.crt"))
            .arg("--key")
            .arg(creds.join("tls.key"))
            .arg(format!("https://localhost:{port}{path}"));
        c
    }
}

/// `front bundle` of the credential in `creds` for cluster `ci`, `front connect` to listen on
/// `listen`, written to `out`.
pub fn bundle_command(gw: &Gateway, creds: &Path, listen: &str, out: &Path) -> Command {
    let mut cmd = tenantci();
    cmd.args([
        "front",
        "bundle",
        "--cluster",
        "ci",
        "--front",
        &gw.front_addr,
    ])
    .args(["--listen", listen])
    .arg("--credential-dir")
    .arg(creds)
    .arg("--front-ca")
    .arg(gw.front_dir().join("front-ca.crt"))
    .arg("--out")
    .arg(out);
    cmd
}

/// Writes a bundle for the credential in `creds` with `front bundle`, then starts `front
/// connect` from it on `listen_ip`.
pub async fn runner_host(gw: &Gateway, creds: &Path, listen_ip: &str) -> RunnerHost {
    let dir = scratch();
    let port = free_port(listen_ip);
    let bundle = dir.path().join("front-bundle.json");
    let cmd = bundle_command(gw, creds, &format!("{listen_ip}:{port}"), &bundle);
    assert_exit(&blocking(cmd).await, 0);
    connect(dir, port, listen_ip).await
}

/// Starts `front connect` from the bundle in `dir`.
pub async fn connect(dir: tempfile::TempDir, port: u16, listen_ip: &str) -> RunnerHost {
    connect_with(dir, port, listen_ip, &[]).await.0
}

/// A bundle of the credential in `creds` (for a dialer of the test's own).
pub async fn bundle_at(gw: &Gateway, creds: &Path) -> tenantci_front::bundle::Bundle {
    let dir = scratch();
    let out = dir.path().join("bundle.json");
    assert_exit(
        &blocking(bundle_command(gw, creds, "127.0.0.1:1", &out)).await,
        0,
    );
    tenantci_front::bundle::Bundle::load(&out).unwrap()
}

/// [`connect`] with `extra` flags; also its ready line.
pub async fn connect_with(
    dir: tempfile::TempDir,
    port: u16,
    listen_ip: &str,
    extra: &[String],
) -> (RunnerHost, Value) {
    let mut cmd = tenantci();
    cmd.args(["-v", "front", "connect", "--bundle"])
        .arg(dir.path().join("front-bundle.json"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("connect.log")).unwrap());
    let (connect, ready) = start(cmd, "front connect").await;
    assert_eq!(ready["listen"], format!("{listen_ip}:{port}"));
    let host = RunnerHost {
        url: format!("https://{listen_ip}:{port}"),
        dir,
        connect,
    };
    (host, ready)
}

pub fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
