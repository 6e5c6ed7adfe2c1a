//! Child processes of tests and benchmarks: killed and reaped when dropped, so a panicking
//! test leaves nothing running; stopped with SIGTERM and a grace period; and the first line
//! a server prints on stdout once it listens (its ready line). Also what starting them needs:
//! a free loopback port, a `tenantci` command with a clean environment, a scratch directory,
//! and a process's peak RSS.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::wait::DEADLINE;

/// A child process, SIGKILLed and reaped when dropped unless already stopped.
pub struct Process(Option<Child>);

impl Process {
    /// Spawns `cmd`; panics naming it when it cannot start.
    pub fn spawn(cmd: &mut Command) -> Process {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Process(Some(child))
    }

    /// The running child (panics once it was stopped).
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the process was stopped")
    }

    /// The child's process id (panics once it was stopped).
    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("the process was stopped").id()
    }

    /// SIGTERM, then SIGKILL if it has not exited after `grace`. The exit code: `None` when it
    /// had to be killed, died of a signal, or was already stopped.
    pub fn terminate(&mut self, grace: Duration) -> Option<i32> {
        let mut child = self.0.take()?;
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        // Unreaped until `wait` returns, so the pid cannot be reused before the SIGKILL.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(grace) {
            Ok(status) => status.ok()?.code(),
            Err(_) => {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = rx.recv();
                None
            }
        }
    }

    /// SIGKILL (no clean-up in the child) and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free right now: bound, then released for a child to take (a port its
/// argv must name before it starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The first line of a child's stdout (a server's ready line), without the newline. Panics
/// when none arrives within [`DEADLINE`], or the stream ends first (the child exited; its
/// stderr says why). The rest of the stream is drained on a thread, so the child's later
/// writes never fail; the thread ends with the child.
pub fn first_line(stdout: impl Read + Send + 'static, what: &str) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = rx
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("no ready line from {what} within {DEADLINE:?}"));
    assert!(
        line.ends_with('\n'),
        "{what} exited before its ready line (stdout: {line:?})"
    );
    line.trim_end().to_string()
}

/// The peak resident set of process `pid` so far (`VmHWM` of `/proc/<pid>/status`), in KiB;
/// 0 when it cannot be read (the process is gone).
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `bin` as a command without the runbook's `SOCIALWEB_*`, tenantci's own `TENANTCI_*`
/// variables and `RUST_LOG`, so the developer's shell cannot leak into a test or a benchmark.
pub fn clean_command(bin: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("SOCIALWEB_") || k.starts_with("TENANTCI_") || k == "RUST_LOG" {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// A scratch directory on real disk (the system's temporary directory), removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tenantci-test-")
        .tempdir_in(std::env::temp_dir())
        .expect("create a scratch directory")
}
