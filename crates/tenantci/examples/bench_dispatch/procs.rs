//! The benchmark's processes: children killed when dropped, `tenantci sim --gitea`,
//! nats-server, and what /proc says about a process's memory and CPU.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tenantci_app::queue::permissions;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (and reaped) when dropped, so a panic leaves nothing behind.
pub struct Proc(pub Option<Child>);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    /// SIGTERM, then wait up to `grace` before SIGKILL; the exit code.
    pub fn terminate(&mut self, grace: Duration) -> Option<i32> {
        let mut c = self.0.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let until = Instant::now() + grace;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.code();
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A process's memory from /proc/<pid>/status, in KiB.
#[derive(Clone, Copy, Default)]
pub struct Memory {
    pub rss: u64,
    pub hwm: u64,
    /// Heap, stacks: what the process allocated.
    pub anon: u64,
    /// Mapped files, mostly the binary's own code pages (shared with every other process
    /// running the same binary).
    pub file: u64,
}

pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// User + system CPU time of a process.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start at field 3; utime is 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // USER_HZ is 100 on every Linux architecture.
    Duration::from_secs_f64(f.iter().sum::<u64>() as f64 / 100.0)
}

/// `tenantci sim --gitea` as a child; Pods stay Pending (`--max-nodes 0`), so the simulator
/// does only API work, the same for both paths.
pub struct Sim {
    pub proc: Proc,
    pub gitea_url: String,
    pub admin_url: String,
    pub registration_token: String,
    pub tenant_admin: PathBuf,
}

impl Sim {
    pub fn start(bin: &Path, dir: &Path) -> Sim {
        let state = dir.join("state");
        let mut child = Command::new(bin)
            .args(["sim", "--cluster", "ci", "--gitea", "--max-nodes", "0"])
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("sim.log")).unwrap())
            .spawn()
            .expect("spawn tenantci sim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let proc = Proc(Some(child));
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the simulator's ready line {line:?}: {e}"));
        let gitea: Value =
            serde_json::from_slice(&std::fs::read(state.join("gitea.json")).unwrap()).unwrap();
        Sim {
            proc,
            gitea_url: gitea["url"].as_str().unwrap().into(),
            admin_url: gitea["adminUrl"].as_str().unwrap().into(),
            registration_token: gitea["registrationToken"].as_str().unwrap().into(),
            tenant_admin: ready["clusters"][0]["tenantAdminKubeconfig"]
                .as_str()
                .unwrap()
                .into(),
        }
    }
}

/// nats-server on a free loopback port with the generated users and JetStream under `dir`.
pub struct Nats {
    pub proc: Proc,
    pub url: String,
    pub secrets: PathBuf,
}

impl Nats {
    pub fn start(dir: &Path) -> Nats {
        let secrets = dir.join("nats-secrets");
        let auth = dir.join("nats-auth.conf");
        permissions::write_nats_config(&secrets, &auth).unwrap();
        let log = dir.join("nats.log");
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:-1\"\njetstream {{ store_dir: \"{}\" }}\nlog_file: \"{}\"\ninclude ./nats-auth.conf\n",
                dir.join("jetstream").display(),
                log.display()
            ),
        )
        .unwrap();
        let proc = Proc(Some(
            Command::new("nats-server")
                .arg("-c")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server on PATH (scripts/bench-dispatch.sh installs it)"),
        ));
        let until = Instant::now() + Duration::from_secs(20);
        let marker = "Listening for client connections on 127.0.0.1:";
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let (true, Some(i)) = (text.contains("Server is ready"), text.find(marker)) {
                let digits: String = text[i + marker.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                break digits;
            }
            assert!(Instant::now() < until, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Nats {
            proc,
            url: format!("nats://127.0.0.1:{port}"),
            secrets,
        }
    }
}

impl Nats {
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}
