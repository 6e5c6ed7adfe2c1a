//! The official runner's part of one Gitea task (the runner in the executor Pod), played from
//! the executor objects: `.runner` (the runner uuid and the per-task capability as its token)
//! and, for the way to the facade, either
//! - the Pod's `tenantci executor-proxy` sidecar run here as a process ([`PodProxy`]): the
//!   stand-in talks plain HTTP to it on loopback, as the runner does in the Pod; or
//! - directly ([`Executor::from_objects`]): the stand-in plays the proxy's part too, HTTPS to
//!   the facade URL in the sidecar's argv trusting the Secret's `ca.crt`.
//!
//! Declare (label names only, as the runner sends them), FetchTask, UpdateLog and UpdateTask
//! go with tenantci's RunnerClient. For the dispatch tests, the dispatch benchmark and the demo
//! (examples/demo_executor.rs).

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use tenantci_core::forge::gitea::client::{ClientConfig, ClientError, Credentials, RunnerClient};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, LogRow, Task, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};
use tenantci_dispatch::backend::pod::manifest::{CA_KEY, PROXY_CONTAINER};
use tenantci_dispatch::task::spec::RUNNER_KEY;
use tenantci_runner::act_runner::Registration;

use crate::process::{Process, first_line};
use crate::wait::eventually;

/// An executor with the credentials of one task.
pub struct Executor {
    /// Where its calls go: the facade (https) or the proxy (http on loopback).
    pub address: String,
    /// The runner uuid from `.runner`, sent as `x-runner-uuid`.
    pub uuid: String,
    /// The task's capability.
    pub token: String,
    /// The `.runner` labels (`name:host`); Declare sends their names only.
    pub labels: Vec<String>,
    /// The `.runner`'s `ephemeral` flag.
    pub ephemeral: bool,
    /// The facade's CA certificate; empty when the address is the plain-HTTP proxy.
    pub ca_pem: String,
}

/// The Pod's sidecar (its container named executor-proxy, an init container).
fn proxy_container(pod: &Pod) -> &k8s_openapi::api::core::v1::Container {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == PROXY_CONTAINER))
        .expect("the executor Pod has the executor-proxy sidecar")
}

/// The value after `flag` in the sidecar's argv.
pub fn proxy_flag(pod: &Pod, flag: &str) -> String {
    let args = proxy_container(pod).command.clone().unwrap_or_default();
    let i = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("the sidecar has {flag}: {args:?}"));
    args[i + 1].clone()
}

/// The executor Pod's `tenantci executor-proxy` sidecar, run as a local process with the
/// sidecar's own argv but two values: `--listen 127.0.0.1:0` (tests run side by side) and
/// `--facade-ca` a private copy of the Secret's `ca.crt`; `-vv`, its log in a file
/// ([`PodProxy::log_text`]). Stopped (SIGTERM, as the kubelet stops a sidecar) when dropped.
pub struct PodProxy {
    process: Process,
    /// `http://127.0.0.1:<port>`.
    pub address: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PodProxy {
    /// `tenantci` is the binary to run (its `argv[0]` replaces the sidecar's `tenantci`).
    pub fn start(tenantci: Command, secret: &Secret, pod: &Pod) -> PodProxy {
        Self::start_with(tenantci, secret, pod, &[], None)
    }

    /// [`PodProxy::start`] with some flags' values replaced (`(flag, value)`; a flag the
    /// sidecar does not have is added), and with identity on the Workload API endpoint the
    /// Pod's `SPIFFE_ENDPOINT_SOCKET` stands for (the stand-in's socket of the Pod's entry).
    pub fn start_with(
        mut tenantci: Command,
        secret: &Secret,
        pod: &Pod,
        flags: &[(&str, &str)],
        spiffe_endpoint: Option<&str>,
    ) -> PodProxy {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join(CA_KEY);
        let mut args = proxy_container(pod).command.clone().unwrap();
        assert_eq!(&args[..2], ["tenantci", "executor-proxy"], "{args:?}");
        // The Secret's ca.crt, where the sidecar has a facade CA (not with identity on).
        if args.iter().any(|a| a == "--facade-ca") {
            std::fs::write(&ca, &secret.data.as_ref().unwrap()[CA_KEY].0).unwrap();
        }
        let ca = ca.to_string_lossy().to_string();
        let mut set = vec![("--listen", "127.0.0.1:0"), ("--facade-ca", ca.as_str())];
        set.extend_from_slice(flags);
        for (flag, value) in set {
            match args.iter().position(|a| a == flag) {
                Some(i) => args[i + 1] = value.to_string(),
                None if flag == "--facade-ca" => {}
                None => args.extend([flag.to_string(), value.to_string()]),
            }
        }
        if let Some(endpoint) = spiffe_endpoint {
            tenantci.env("SPIFFE_ENDPOINT_SOCKET", endpoint);
        }
        Self::spawn(tenantci, &args[1..], dir)
    }

    /// A VM executor's proxy, as its sandbox's boot script starts it with identity on: the
    /// task's SVID files written from the sandbox env (as the OpenSandbox double's admin view
    /// shows it) into a private directory, and the script's `--facade-url` and
    /// `--facade-id` with `--spiffe-source files:DIR`.
    pub fn for_sandbox(tenantci: Command, sandbox: &serde_json::Value) -> PodProxy {
        use tenantci_core::spiffe::files::{BUNDLE_FILE, CERT_FILE, KEY_FILE};
        use tenantci_dispatch::backend::vm::desired::env;
        let var = |k: &str| {
            sandbox["env"][k]
                .as_str()
                .unwrap_or_else(|| panic!("the sandbox env has {k}: {sandbox}"))
                .to_string()
        };
        let dir = tempfile::tempdir().unwrap();
        let svid_dir = dir.path().join("spiffe");
        std::fs::create_dir(&svid_dir).unwrap();
        for (file, key) in [
            (CERT_FILE, env::SVID),
            (KEY_FILE, env::SVID_KEY),
            (BUNDLE_FILE, env::SVID_BUNDLE),
        ] {
            // 0600, as the boot script's umask 077 writes them (the key must be, to be read).
            tenantci_core::fsutil::write_new_atomic(
                &svid_dir.join(file),
                var(key).as_bytes(),
                0o600,
            )
            .unwrap();
        }
        let script = sandbox["entrypoint"][2].as_str().expect("the boot script");
        let facade_id = script
            .split("--facade-id '")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .unwrap_or_else(|| {
                panic!("the boot script starts the proxy with --facade-id: {script}")
            });
        let args = [
            "executor-proxy".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--facade-url".into(),
            var(env::FACADE_URL),
            "--spiffe-source".into(),
            format!("files:{}", svid_dir.display()),
            "--facade-id".into(),
            facade_id.to_string(),
        ];
        Self::spawn(tenantci, &args, dir)
    }

    /// Runs `tenantci ARGS -vv`, its log in `dir`, and waits for its `listening` line.
    fn spawn(mut tenantci: Command, args: &[String], dir: tempfile::TempDir) -> PodProxy {
        let log = dir.path().join("executor-proxy.log");
        let mut process = Process::spawn(
            tenantci
                .args(args)
                .arg("-vv")
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).unwrap()),
        );
        let line = first_line(process.child().stdout.take().unwrap(), "executor-proxy");
        let address = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("executor-proxy's first line: {line}"))
            .to_string();
        PodProxy {
            process,
            address,
            log,
            _dir: dir,
        }
    }

    /// The proxy's peak resident set so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        crate::process::peak_rss_kib(self.process.pid())
    }

    /// What the proxy logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.process.terminate(Duration::from_secs(10))
    }
}

impl Drop for PodProxy {
    fn drop(&mut self) {
        self.process.terminate(Duration::from_secs(10));
    }
}

/// What the facade answered to the final reports.
pub struct Finished {
    /// UpdateLog's `ack_index`: the rows the facade stored.
    pub ack_index: i64,
    /// The task's result as UpdateTask answered it (a `TaskResult` value).
    pub result: i32,
}

impl Executor {
    /// From the contents of `.runner` and `ca.crt`.
    pub fn from_files(runner: &[u8], ca_pem: &str) -> Result<Executor, String> {
        let r: Registration =
            serde_json::from_slice(runner).map_err(|e| format!("not a .runner file: {e}"))?;
        Ok(Executor {
            address: r.address,
            uuid: r.uuid,
            token: r.token.expose().to_string(),
            labels: r.labels,
            ephemeral: r.ephemeral,
            ca_pem: ca_pem.to_string(),
        })
    }

    /// Straight to the facade (the stand-in plays the proxy's TLS part): `.runner` and
    /// `ca.crt` from the Secret, the facade URL from the Pod's sidecar.
    pub fn from_objects(secret: &Secret, pod: &Pod) -> Executor {
        let data = secret.data.as_ref().expect("the executor Secret has data");
        let ca = String::from_utf8(data[CA_KEY].0.clone()).expect("ca.crt is PEM");
        let mut ex = Self::from_files(&data[RUNNER_KEY].0, &ca).unwrap();
        ex.address = proxy_flag(pod, "--facade-url");
        ex
    }

    /// A VM executor, from its sandbox as the OpenSandbox double's admin view shows it (the
    /// env the boot script reads): straight to the facade, as the proxy inside would go.
    pub fn from_sandbox(sandbox: &serde_json::Value) -> Executor {
        use tenantci_dispatch::backend::vm::desired::env;
        let var = |k: &str| {
            sandbox["env"][k]
                .as_str()
                .unwrap_or_else(|| panic!("the sandbox env has {k}: {sandbox}"))
                .to_string()
        };
        let mut ex = Self::from_files(var(env::RUNNER).as_bytes(), &var(env::FACADE_CA)).unwrap();
        ex.address = var(env::FACADE_URL);
        ex
    }

    /// A VM executor through its proxy ([`PodProxy::for_sandbox`]): `.runner` from the
    /// sandbox env, plain HTTP on loopback.
    pub fn through_sandbox(sandbox: &serde_json::Value, proxy: &PodProxy) -> Executor {
        use tenantci_dispatch::backend::vm::desired::env;
        let runner = sandbox["env"][env::RUNNER]
            .as_str()
            .expect("the sandbox env has .runner");
        let mut ex = Self::from_files(runner.as_bytes(), "").unwrap();
        ex.address = proxy.address.clone();
        ex
    }

    /// Through the Pod's sidecar run as `proxy`: plain HTTP on loopback, no CA.
    pub fn through(secret: &Secret, proxy: &PodProxy) -> Executor {
        let data = secret.data.as_ref().expect("the executor Secret has data");
        let mut ex = Self::from_files(&data[RUNNER_KEY].0, "").unwrap();
        ex.address = proxy.address.clone();
        ex
    }

    /// A facade client with these credentials, or forged ones.
    pub fn client(&self, uuid: &str, token: &str) -> RunnerClient {
        let mut cfg = ClientConfig::new(&self.address);
        cfg.ca_pem = (!self.ca_pem.is_empty()).then(|| self.ca_pem.clone());
        cfg.request_timeout = Duration::from_secs(10);
        cfg.retry.initial_backoff = Duration::from_millis(50);
        RunnerClient::new(cfg)
            .unwrap()
            .with_credentials(Credentials {
                uuid: uuid.into(),
                token: token.into(),
            })
    }

    /// One Declare with the task's credentials and labels, no retry: the facade's answer as
    /// it is (for the tests of what the facade refuses).
    pub async fn declare_once(&self) -> Result<(), ClientError> {
        let mut cfg = ClientConfig::new(&self.address);
        cfg.retry.attempts = 1;
        cfg.request_timeout = crate::wait::DEADLINE;
        let client = RunnerClient::new(cfg)
            .unwrap()
            .with_credentials(Credentials {
                uuid: self.uuid.clone(),
                token: self.token.clone(),
            });
        client
            .declare(&DeclareRequest {
                version: "tenantci-testkit".into(),
                labels: self.labels.clone(),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }

    /// A facade client with the task's own credentials.
    pub fn own(&self) -> RunnerClient {
        self.client(&self.uuid, &self.token)
    }

    /// Declare, then FetchTask, until the task arrives (the facade may be starting or
    /// restarting).
    pub async fn fetch(&self) -> Task {
        let c = self.own();
        eventually("the facade to hand out the task", || async {
            c.declare(&DeclareRequest {
                version: "tenantci-testkit".into(),
                // Names only, as the runner declares (`pod:host` -> `pod`).
                labels: self
                    .labels
                    .iter()
                    .map(|l| l.split(':').next().unwrap_or_default().to_string())
                    .collect(),
                ..Default::default()
            })
            .await
            .ok()?;
            c.fetch_task(0).await.ok()?.task
        })
        .await
    }

    /// Sends `lines` as the whole log, then the final state SUCCESS, retrying while the
    /// facade is away.
    pub async fn finish(&self, task: i64, lines: &[&str]) -> Finished {
        let c = self.own();
        eventually(
            "the facade to accept the log and the final state",
            || async {
                let log = c
                    .update_log(&UpdateLogRequest {
                        task_id: task,
                        index: 0,
                        rows: lines
                            .iter()
                            .map(|l| LogRow {
                                time: None,
                                content: l.to_string(),
                            })
                            .collect(),
                        no_more: true,
                    })
                    .await
                    .ok()?;
                let done = c
                    .update_task(&UpdateTaskRequest {
                        state: Some(TaskState {
                            id: task,
                            result: TaskResult::Success as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .await
                    .ok()?;
                Some(Finished {
                    ack_index: log.ack_index,
                    result: done.state.map(|s| s.result).unwrap_or_default(),
                })
            },
        )
        .await
    }

    /// The whole run of `task`: fetch it (it must be this task), log `ran task <id>`, succeed.
    pub async fn run(&self, task: i64) -> Task {
        let t = self.fetch().await;
        assert_eq!(t.id, task, "the facade hands out the caller's own task");
        self.finish(task, &[&format!("ran task {task}")]).await;
        t
    }
}
