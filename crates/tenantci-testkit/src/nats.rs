//! A real nats-server: JetStream, the queue's users and permissions as
//! `tenantci queue nats-config` generates them, a loopback port the server picks itself
//! (read back from its log), and its files (config, store, passwords, log) in one directory.
//! Killed when dropped; [`NatsServer::stop`] and [`NatsServer::restart`] keep the store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tenantci_app::queue::{connect, permissions};

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
    pub port: u16,
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
        let mut s = NatsServer {
            dir: dir.to_path_buf(),
            _temp: None,
            process: None,
            url: String::new(),
            port: 0,
        };
        permissions::write_nats_config(&s.secrets_dir(), &s.dir.join("auth.conf"))
            .unwrap_or_else(|e| panic!("generate the NATS users: {}", e.render()));
        s.spawn();
        s
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// The `<user>.password` files (`ci-admin`, `ci-producer`, `ci-worker`).
    pub fn secrets_dir(&self) -> PathBuf {
        self.dir.join("secrets")
    }

    pub fn password_file(&self, user: &str) -> PathBuf {
        permissions::password_file(&self.secrets_dir(), user)
    }

    pub fn password(&self, user: &str) -> String {
        std::fs::read_to_string(self.password_file(user))
            .unwrap()
            .trim()
            .to_string()
    }

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
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:-1\"\nserver_name: tenantci-test\n\
                 jetstream {{\n  store_dir: \"{}\"\n  max_memory_store: 64MB\n  max_file_store: 1GB\n}}\n\
                 log_file: \"{}\"\ninclude ./auth.conf\n",
                self.store_dir().display(),
                self.log_file().display()
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
        self.url = format!("nats://127.0.0.1:{port}");
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
