//! A `tenantci dispatch run` child process, after its listening line: its addresses, its
//! status API (metrics, leadership), signals, and its log, whose last lines a panicking
//! test prints. Boundary: one process; which config it runs is the caller's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::process::{Process, first_line};
use crate::wait::{DEADLINE, eventually};

/// A `tenantci dispatch run` child process, after its listening line.
pub struct Dispatcher {
    /// The instance name it was started as (its leader identity in its config).
    pub name: String,
    process: Process,
    /// The file its stderr is appended to.
    pub log: PathBuf,
    /// Where its facade listens.
    pub facade: SocketAddr,
    /// The facade URL its executors are given (`facadeUrl` of the listening line).
    pub facade_url: String,
    status: SocketAddr,
    /// The metrics listener, when `status.metrics_listen` is configured.
    pub metrics_listener: Option<SocketAddr>,
    /// The webhook receiver, when configured.
    pub webhook: Option<SocketAddr>,
}

impl Dispatcher {
    /// Runs `tenantci dispatch run --config CONFIG`, `tenantci` a command for the binary (its
    /// environment and global flags as the caller set them), stderr appended to `log`, and
    /// waits for its listening line.
    pub async fn spawn(mut tenantci: Command, name: &str, config: &Path, log: &Path) -> Dispatcher {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut process = Process::spawn(
            tenantci
                .args(["dispatch", "run", "--config"])
                .arg(config)
                .stdout(Stdio::piped())
                .stderr(file),
        );
        let stdout = process.child().stdout.take().unwrap();
        let mut d = Dispatcher {
            name: name.into(),
            process,
            log: log.to_path_buf(),
            facade: SocketAddr::from(([0, 0, 0, 0], 0)),
            facade_url: String::new(),
            status: SocketAddr::from(([0, 0, 0, 0], 0)),
            metrics_listener: None,
            webhook: None,
        };
        // Read on a blocking thread; a panic here still prints the log (Drop below).
        let what = format!("dispatcher {name}");
        let line = tokio::task::spawn_blocking(move || first_line(stdout, &what))
            .await
            .unwrap();
        let listening: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("listening line {line:?}: {e}"));
        assert_eq!(listening["type"], "listening", "{line}");
        let addr = |k: &str| -> SocketAddr { listening[k].as_str().unwrap().parse().unwrap() };
        d.facade = addr("facade");
        d.status = addr("status");
        d.facade_url = listening["facadeUrl"].as_str().unwrap().to_string();
        d.webhook = listening["webhook"].as_str().map(|a| a.parse().unwrap());
        d.metrics_listener = listening["metrics"].as_str().map(|a| a.parse().unwrap());
        assert_ne!(d.facade.port(), 0, "{line}");
        assert_ne!(d.status.port(), 0, "{line}");
        d
    }

    /// Where its status API listens (`dispatch status --status-address`).
    pub fn status_address(&self) -> SocketAddr {
        self.status
    }

    /// The dispatcher's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The text of its `/metrics` on the status address; `None` when it does not answer.
    pub async fn metrics(&self) -> Option<String> {
        let r = reqwest::get(format!("http://{}/metrics", self.status))
            .await
            .ok()?;
        r.text().await.ok()
    }

    /// The value of metric `name`, summed over its series (e.g. both backends); None when the
    /// instance does not serve it.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.metrics().await?;
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// Waits until the instance serves its status API.
    pub async fn wait_up(&self) {
        eventually(&format!("{} to serve /metrics", self.name), || async {
            self.metric("tenantci_dispatch_leader").await.map(|_| ())
        })
        .await
    }

    /// Waits until `tenantci_dispatch_leader` is 1 (`leading`) or 0.
    pub async fn wait_leader(&self, leading: bool) {
        let want = if leading { 1.0 } else { 0.0 };
        eventually(&format!("{} leader = {leading}", self.name), || async {
            (self.metric("tenantci_dispatch_leader").await == Some(want)).then_some(())
        })
        .await
    }

    /// SIGHUP: check the facade certificate and the credential for renewed files now.
    pub fn hangup(&self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        kill(Pid::from_raw(self.process.pid() as i32), Signal::SIGHUP).unwrap();
    }

    /// SIGKILL: no drain, no lease release.
    pub fn kill9(&mut self) {
        self.process.kill();
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        self.process.terminate(DEADLINE)
    }

    /// [`Dispatcher::terminate`], SIGKILL after `grace`.
    pub fn terminate_within(&mut self, grace: Duration) -> Option<i32> {
        self.process.terminate(grace)
    }

    /// Its log so far; empty when the file cannot be read.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- last lines of dispatcher {} ---", self.name);
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}
