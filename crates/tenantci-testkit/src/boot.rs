//! A VM sandbox's boot script, run for real with `/bin/sh` from the create request the
//! dispatcher sent to the OpenSandbox double (its entrypoint and env, as the double's admin
//! view shows them): the script writes `.runner`, `config.yaml` and the CAs, unsets the
//! variables, starts `tenantci executor-proxy` in the background and execs the runner.
//!
//! Two constants of the script are relocated so tests run side by side: its directory
//! (`/tmp/gitea-task`, in the script and in the `.runner`/config paths) becomes a private
//! one, and the proxy's fixed loopback port a free one (in `--listen` and in the `.runner`
//! address). Nothing else of the script or its env is changed.
//!
//! The runner is a stand-in on `PATH` under the runner's own name: it records its working
//! directory, argv and environment (what every step of the job inherits), then runs the
//! test's job script with that environment and the runner's argv (`/bin/sh -eu JOB ARGS`),
//! records its exit status and waits. The script runs in its own process group, killed whole
//! (proxy included) on [`BootedSandbox::stop`] or drop.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tenantci_dispatch::backend::vm::desired::VM_DIR;
use tenantci_dispatch::task::spec::{PROXY_LISTEN, RUNNER_KEY};

use crate::executor::Executor;
use crate::process::{Process, first_line, free_port};
use crate::wait::eventually_blocking;

/// What the stand-in runner saw when the script exec'd it.
#[derive(Debug)]
pub struct RunnerStart {
    /// Its working directory.
    pub cwd: String,
    /// Its arguments (after the program name).
    pub args: Vec<String>,
    /// Its environment: what every step of the job inherits.
    pub env: BTreeMap<String, String>,
}

/// A boot script running, its proxy listening.
pub struct BootedSandbox {
    script: Process,
    /// The relocated `/tmp/gitea-task`.
    pub vm_dir: PathBuf,
    /// The proxy: `http://127.0.0.1:<port>`, the `.runner` address.
    pub address: String,
    log: PathBuf,
    /// Holds the relocated directory, the stand-in's records and its job's output.
    dir: tempfile::TempDir,
}

/// The stand-in for the runner binary: records what it was started with, runs `job` with the
/// runner's argv (its output in `job.log`), records the job's exit status, then waits to be
/// killed.
fn stand_in(dir: &Path, job: &Path) -> String {
    let d = dir.display();
    let job = job.display();
    format!(
        "#!/bin/sh
{{ pwd; printf '%s\\n' \"$*\"; env -0; }} > '{d}/runner-start.tmp' && mv '{d}/runner-start.tmp' '{d}/runner-start'
/bin/sh -eu '{job}' \"$@\" > '{d}/job.log' 2>&1
echo $? > '{d}/job-status.tmp' && mv '{d}/job-status.tmp' '{d}/job-status'
exec sleep 600
"
    )
}

impl BootedSandbox {
    /// Runs `sandbox`'s boot script with `tenantci` (the binary) as the image's `tenantci` and
    /// `job` (a POSIX sh script) as what the runner does; returns once the proxy prints its
    /// ready line.
    pub fn boot(tenantci: &Path, sandbox: &serde_json::Value, job: &str) -> BootedSandbox {
        let dir = tempfile::tempdir().unwrap();
        let vm_dir = dir.path().join("gitea-task");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let relocate = |s: &str| {
            s.replace(VM_DIR, vm_dir.to_str().unwrap())
                .replace(PROXY_LISTEN, &listen)
        };
        let script = relocate(sandbox["entrypoint"][2].as_str().expect("the boot script"));
        assert_eq!(sandbox["entrypoint"][0], "/bin/sh", "{sandbox}");
        // The runner the script execs: the word after `exec`.
        let runner = script
            .lines()
            .find_map(|l| l.strip_prefix("exec "))
            .and_then(|l| l.split_whitespace().next())
            .expect("the boot script execs the runner")
            .to_string();
        let job_file = dir.path().join("job.sh");
        std::fs::write(&job_file, job).unwrap();
        let stand_in_path = bin.join(&runner);
        std::fs::write(&stand_in_path, stand_in(dir.path(), &job_file)).unwrap();
        std::fs::set_permissions(&stand_in_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(tenantci, bin.join("tenantci")).unwrap();

        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &script]).env_clear();
        for (k, v) in sandbox["env"].as_object().expect("the sandbox env") {
            cmd.env(k, relocate(v.as_str().expect("env values are strings")));
        }
        let path = std::env::var("PATH").unwrap_or_default();
        let log = dir.path().join("boot.log");
        cmd.env("PATH", format!("{}:{path}", bin.display()))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut script = Process::spawn(&mut cmd);
        // The script writes nothing to stdout; the proxy's ready line is the first.
        let line = first_line(script.child().stdout.take().unwrap(), "the boot script");
        let address = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the proxy's ready line: {line}"))
            .to_string();
        BootedSandbox {
            script,
            vm_dir,
            address,
            log,
            dir,
        }
    }

    /// Waits for the stand-in runner to start; what it saw.
    pub fn runner_start(&self) -> RunnerStart {
        let raw = eventually_blocking("the boot script to exec the runner", || {
            std::fs::read(self.dir.path().join("runner-start")).ok()
        });
        let text = String::from_utf8(raw).expect("the record is UTF-8");
        let (cwd, rest) = text.split_once('\n').unwrap();
        let (args, env) = rest.split_once('\n').unwrap();
        RunnerStart {
            cwd: cwd.to_string(),
            args: args.split(' ').map(str::to_string).collect(),
            env: env
                .split('\0')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Waits for the job script to end: its exit status and output.
    pub fn job_result(&self) -> (i32, String) {
        let dir = self.dir.path();
        let status = eventually_blocking("the stand-in runner's job to end", || {
            std::fs::read_to_string(dir.join("job-status")).ok()
        });
        let output = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
        (status.trim().parse().expect("an exit status"), output)
    }

    /// The runner's part, from the `.runner` the script wrote (plain HTTP to its address).
    pub fn executor(&self) -> Executor {
        let runner = std::fs::read(self.vm_dir.join(RUNNER_KEY)).expect("the script wrote .runner");
        Executor::from_files(&runner, "").unwrap()
    }

    /// What the script and the proxy wrote to stderr.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL to the script's whole process group (the runner and the proxy), reaped: what
    /// dropping it does, said where a test means it.
    pub fn stop(self) {}
}

impl Drop for BootedSandbox {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.script.pid()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        self.script.kill();
    }
}
