//! A real nats-server: JetStream, the queue's users and permissions as
//! `tenantci queue nats-config` generates them, a loopback port the server picks itself
//! (read back from its log), and its files (config, store, passwords, log) in one directory.
//! Killed when dropped; [`NatsServer::stop`] and [`NatsServer::restart`] keep the store.
//! [`NatsCluster`]: three such servers on loopback as one JetStream cluster (server names,
//! routes on fixed ports), sharing the users; one can be killed with SIGKILL and rejoin.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tenantci_dispatch::backend::catalog;
use tenantci_dispatch::queue::{connect, permissions};

use crate::process::Process;
use crate::wait::{DEADLINE, eventually_blocking};

/// The nats-server binary: on PATH, else /usr/sbin/nats-server (Debian's package).
pub fn nats_server_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    let bin = on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nats-server"));
    assert!(
        bin.is_file(),
        "nats-server not found on PATH or at /usr/sbin/nats-server (scripts/test.sh installs it)"
    );
    bin
}

/// A running nats-server with JetStream and the queue's users.
pub struct NatsServer {
    /// First, so the server is killed before its directory is removed.
    process: Option<Process>,
    dir: PathBuf,
    /// Removes `dir` on drop when the server made it.
    _temp: Option<tempfile::TempDir>,
    /// `nats://127.0.0.1:<port>`; changes on [`NatsServer::restart`].
    pub url: String,
    /// The client port, picked by the server and read from its log; changes with `url`.
    pub port: u16,
    /// Where the users' passwords and the authorization fragment are (shared in a cluster).
    secrets: PathBuf,
    auth: PathBuf,
    /// This server's part of a cluster: its name, route port, and every member's route port.
    member: Option<(String, u16, Vec<u16>)>,
    /// The monitoring port (cluster members only), read from the log like the client port.
    monitor: Option<u16>,
    /// TLS on the client port with a certificate from a private CA ([`NatsServer::start_tls`]).
    tls: bool,
}

impl NatsServer {
    /// A server in a temporary directory, removed when the server is dropped.
    pub fn start() -> NatsServer {
        let temp = tempfile::Builder::new()
            .prefix("tenantci-nats-")
            .tempdir()
            .expect("create a directory for nats-server");
        let mut s = Self::start_in(temp.path());
        s._temp = Some(temp);
        s
    }

    /// A server whose files live in `dir` (created if missing, kept when dropped).
    pub fn start_in(dir: &Path) -> NatsServer {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        Self::spawned(dir, false)
    }

    /// A server in `dir` with the generated users, TLS-only when `tls`, started.
    fn spawned(dir: &Path, tls: bool) -> NatsServer {
        let mut s = NatsServer {
            dir: dir.to_path_buf(),
            _temp: None,
            process: None,
            url: String::new(),
            port: 0,
            secrets: dir.join("secrets"),
            auth: dir.join("auth.conf"),
            member: None,
            monitor: None,
            tls,
        };
        permissions::write_nats_config(&s.secrets, &s.auth, &catalog::kinds())
            .unwrap_or_else(|e| panic!("generate the NATS users: {}", e.render()));
        s.spawn();
        s
    }

    /// A server that speaks TLS only (`tls://`), its certificate for 127.0.0.1 issued by a
    /// private CA whose certificate is [`NatsServer::ca_file`].
    pub fn start_tls() -> NatsServer {
        let temp = tempfile::Builder::new()
            .prefix("tenantci-nats-tls-")
            .tempdir()
            .expect("create a directory for nats-server");
        let dir = temp.path();
        let day = std::time::Duration::from_secs(86400);
        let ca = tenantci_core::pki::CertificateAuthority::generate("test NATS CA", day).unwrap();
        let leaf = tenantci_core::pki::issue::server_cert(&ca, "nats", &["127.0.0.1".into()], day)
            .unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
        std::fs::write(dir.join("server.crt"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.join("server.key"), &leaf.key_pem).unwrap();
        let mut s = Self::spawned(dir, true);
        s._temp = Some(temp);
        s
    }

    /// The private CA of a [`NatsServer::start_tls`] server.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The directory holding this server's files (config, store, log; and the passwords, except
    /// in a cluster).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// The `<user>.password` files (`ci-admin`, `ci-producer`, `ci-worker`).
    pub fn secrets_dir(&self) -> PathBuf {
        self.secrets.clone()
    }

    /// The file holding `user`'s password (`ci-admin`, `ci-producer`, `ci-worker`).
    pub fn password_file(&self, user: &str) -> PathBuf {
        permissions::password_file(&self.secrets_dir(), user)
    }

    /// `user`'s password, trimmed.
    pub fn password(&self, user: &str) -> String {
        std::fs::read_to_string(self.password_file(user))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The authorization fragment the server includes (`queue nats-config`'s output).
    pub fn auth_file(&self) -> &Path {
        &self.auth
    }

    /// Reloads the server's config (SIGHUP: what `nats-server --signal reload` sends) and
    /// waits until its log says it did.
    pub async fn reload(&self) {
        const RELOADED: &str = "Reloaded server configuration";
        let before = self.log().matches(RELOADED).count();
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("a pid fits"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("signal nats-server");
        crate::wait::eventually("nats-server to reload its config", || async {
            (self.log().matches(RELOADED).count() > before).then_some(())
        })
        .await;
    }

    /// The running server's process id; panics when it is stopped or killed.
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("nats-server is stopped").pid()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("nats.log")
    }

    /// The server log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let conf = self.dir.join("nats.conf");
        let tls = if self.tls {
            format!(
                "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\n",
                self.dir.join("server.crt").display(),
                self.dir.join("server.key").display()
            )
        } else {
            String::new()
        };
        let (name, cluster) = match &self.member {
            None => ("tenantci-test".to_string(), String::new()),
            Some((name, port, routes)) => {
                let routes: Vec<String> = routes
                    .iter()
                    .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
                    .collect();
                let block = format!(
                    "http: \"127.0.0.1:-1\"\ncluster {{\n  name: tenantci\n  listen: \"127.0.0.1:{port}\"\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                );
                (name.clone(), block)
            }
        };
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:-1\"\nserver_name: {name}\n\
                 jetstream {{\n  store_dir: \"{}\"\n  max_memory_store: 64MB\n  max_file_store: 1GB\n}}\n\
                 {cluster}{tls}log_file: \"{}\"\ninclude \"{}\"\n",
                self.store_dir().display(),
                self.log_file().display(),
                self.auth_include()
            ),
        )
        .unwrap();
        // The port is read from this start's log only.
        let _ = std::fs::remove_file(self.log_file());
        let mut process = Process::spawn(
            Command::new(nats_server_bin())
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let port = eventually_blocking("nats-server to listen", || {
            if let Ok(Some(status)) = process.child().try_wait() {
                panic!("nats-server exited ({status}):\n{}", self.log());
            }
            let log = self.log();
            if !log.contains("Server is ready") {
                return None;
            }
            let marker = "Listening for client connections on 127.0.0.1:";
            let rest = &log[log.find(marker)? + marker.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u16>().ok()
        });
        self.process = Some(process);
        self.port = port;
        let scheme = if self.tls { "tls" } else { "nats" };
        self.url = format!("{scheme}://127.0.0.1:{port}");
        let log = self.log();
        let marker = "Starting http monitor on 127.0.0.1:";
        self.monitor = log.find(marker).and_then(|at| {
            let rest = &log[at + marker.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        });
    }

    /// The fragment as nats-server's `include` takes it: relative to this server's config
    /// (a leading `/` is not honoured), which is in `dir`.
    fn auth_include(&self) -> String {
        let name = self.auth.file_name().unwrap().to_string_lossy().to_string();
        if self.auth.parent() == Some(self.dir.as_path()) {
            format!("./{name}")
        } else {
            assert_eq!(
                self.auth.parent(),
                self.dir.parent(),
                "the fragment is beside the server directories"
            );
            format!("../{name}")
        }
    }

    /// The names of the clients connected to this server now (`/connz`; cluster members).
    pub async fn client_names(&self) -> Vec<String> {
        let port = self
            .monitor
            .expect("a cluster member has a monitoring port");
        let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/connz")).await else {
            return Vec::new();
        };
        let doc: serde_json::Value = resp.json().await.unwrap_or_default();
        doc["connections"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops the server gracefully (SIGTERM: JetStream flushes its store) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.terminate(DEADLINE);
        }
    }

    /// Stops and starts again on the same store (the port may change; `url` follows).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// SIGKILL: no flush, no goodbye to the cluster.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts a killed or stopped server again on its store (and its cluster route port).
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "nats-server is running");
        self.spawn();
    }

    /// A client connected as `user`, with the user's own inbox prefix.
    pub async fn client(&self, user: &str) -> async_nats::Client {
        connect::connect(&self.url, user, &self.password_file(user))
            .await
            .unwrap_or_else(|e| panic!("connect as {user}: {}", e.render()))
    }

    /// A client as `user` whose server events (e.g. permission violations) arrive on the
    /// receiver.
    pub async fn client_with_events(
        &self,
        user: &str,
    ) -> (
        async_nats::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let options = connect::options(user, &self.password(user)).event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event.to_string());
            }
        });
        let client = connect::connect_with(&self.url, options, user)
            .await
            .unwrap_or_else(|e| panic!("connect as {user}: {}", e.render()));
        (client, rx)
    }
}

/// Three nats-servers on loopback as one JetStream cluster `tenantci` (server names `n1`..`n3`,
/// routes on ports picked free at start), sharing one authorization fragment and its
/// passwords, each with its own store. Dropped: every server is killed, the directory removed.
pub struct NatsCluster {
    /// The three members, `n1` to `n3` in order.
    pub servers: Vec<NatsServer>,
    _dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts the three servers in a temporary directory, one after the other, each until its log
    /// says it is ready.
    pub fn start() -> NatsCluster {
        let dir = tempfile::Builder::new()
            .prefix("tenantci-nats-cluster-")
            .tempdir()
            .expect("create a directory for the NATS cluster");
        let secrets = dir.path().join("secrets");
        let auth = dir.path().join("auth.conf");
        permissions::write_nats_config(&secrets, &auth, &catalog::kinds())
            .unwrap_or_else(|e| panic!("generate the NATS users: {}", e.render()));
        // The route ports must be known up front, before any server starts.
        let routes: Vec<u16> = (0..3).map(|_| crate::process::free_port()).collect();
        let mut servers: Vec<NatsServer> = (0..3)
            .map(|i| {
                let own = dir.path().join(format!("n{}", i + 1));
                std::fs::create_dir_all(&own).unwrap();
                NatsServer {
                    dir: own,
                    _temp: None,
                    process: None,
                    url: String::new(),
                    port: 0,
                    secrets: secrets.clone(),
                    auth: auth.clone(),
                    member: Some((format!("n{}", i + 1), routes[i], routes.clone())),
                    monitor: None,
                    tls: false,
                }
            })
            .collect();
        for s in &mut servers {
            s.spawn();
        }
        NatsCluster { servers, _dir: dir }
    }

    /// Every server's client URL, comma-separated (what a client configures).
    pub fn url(&self) -> String {
        let urls: Vec<&str> = self.servers.iter().map(|s| s.url.as_str()).collect();
        urls.join(",")
    }

    /// The users' password files, shared by every member.
    pub fn secrets_dir(&self) -> PathBuf {
        self.servers[0].secrets_dir()
    }

    /// The servers and the directory holding their files (removed when it is dropped).
    pub fn into_parts(self) -> (Vec<NatsServer>, tempfile::TempDir) {
        (self.servers, self._dir)
    }
}
