//! The bench's world: one `tenantci sim --gitea --opensandbox`, one nats-server, `dispatch
//! init` with both backends, and `dispatch run` children with a JSON log.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantci_core::opensandbox::{LifecycleClient, ListFilter};
use tenantci_testkit::nats::NatsServer;
use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::process::Process;
use tenantci_testkit::sim::{Gitea, SimProcess};

use crate::logtail::LogTail;
use crate::progress;
use crate::report::parse_time;

const IMAGE: &str =
    "gitea/act_runner@sha256:0000000000000000000000000000000000000000000000000000000000000000";

pub struct World {
    bin: PathBuf,
    pub dir: PathBuf,
    _sim: SimProcess,
    pub gitea: Gitea,
    _nats: NatsServer,
    pub sandboxes: LifecycleClient,
    pub config: PathBuf,
    pub http: reqwest::Client,
    runs: usize,
    jobs: usize,
}

/// One `tenantci dispatch run` child.
pub struct Dispatcher {
    proc: Process,
    pub tail: LogTail,
}

impl World {
    /// Everything up; the directory goes when the returned guard drops. `bin` must have the
    /// `sim` feature.
    pub async fn start(bin: PathBuf, vm_capacity: usize) -> (tempfile::TempDir, World) {
        let tmp = tempfile::tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let dir = tmp.path().to_path_buf();
        // Pods stay Pending (`--max-nodes 0`) and nothing is saved to disk (`--in-memory`: the
        // persister rewrites every object after each burst of writes, a cost growing with the
        // objects): the simulator does API work only.
        let mut sim_cmd = Command::new(&bin);
        sim_cmd.stderr(std::fs::File::create(dir.join("sim.log")).unwrap());
        let sim = SimProcess::start(
            sim_cmd,
            &dir.join("state"),
            &["ci"],
            &[
                "--gitea",
                "--opensandbox",
                "--max-nodes",
                "0",
                "--in-memory",
            ],
        );
        let gitea = sim.gitea();
        let opensandbox = OpenSandbox::from_state_dir(&dir.join("state"));
        let nats = NatsServer::start_in(&dir.join("nats"));
        let flags: Vec<std::ffi::OsString> = vec![
            "--executor-image".into(),
            IMAGE.into(),
            "--proxy-image".into(),
            IMAGE.into(),
            "--labels".into(),
            "self-hosted,pod,vm".into(),
            "--vm-capacity".into(),
            vm_capacity.to_string().into(),
            "--opensandbox-url".into(),
            opensandbox.url.clone().into(),
            "--opensandbox-api-key-file".into(),
            opensandbox.api_key_file.clone().into(),
        ];
        let config = tenantci_testkit::dispatch::init(&bin, &dir, &gitea, &nats, &flags);
        let w = World {
            bin,
            dir,
            _sim: sim,
            gitea,
            _nats: nats,
            sandboxes: opensandbox.client(),
            config,
            http: reqwest::Client::new(),
            runs: 0,
            jobs: 0,
        };
        (tmp, w)
    }

    /// Starts a dispatcher with `capacity` for both backends and waits until it leads.
    pub async fn dispatcher(&mut self, name: &str, capacity: usize) -> Dispatcher {
        self.runs += 1;
        let log = self
            .dir
            .join(format!("dispatcher-{}-{name}.log", self.runs));
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--log-format", "json", "dispatch", "run", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_CAPACITY_POD", capacity.to_string())
            .env("TENANTCI_DISPATCH_CAPACITY_VM", capacity.to_string())
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0")
            .env("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL", "50ms")
            // Longer than a phase: no keep-alive UpdateTask calls inside the latency windows.
            .env("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5m")
            // Longer than the run: no executor is replaced for never fetching its task (none
            // does; nothing executes them).
            .env("TENANTCI_DISPATCH_CLAIM_START_DEADLINE", "1h");
        let proc = Process::spawn(
            cmd.stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap()),
        );
        let mut d = Dispatcher {
            proc,
            tail: LogTail::open(&log),
        };
        d.tail
            .until("the scheduler lease", |t| t.leading, || {})
            .await;
        d
    }

    /// SIGTERM (the dispatcher must drain and exit 0); its executors and sandboxes stay.
    pub fn stop(&self, name: &str, mut d: Dispatcher) {
        let code = d.proc.terminate(Duration::from_secs(30));
        assert_eq!(code, Some(0), "{name}: the dispatcher drains and exits 0");
        d.tail.poll();
        if let Some(first) = d.tail.errors.first() {
            progress(&format!(
                "{name}: {} warnings/errors in the dispatcher log, first: {first}",
                d.tail.errors.len()
            ));
        }
    }

    pub async fn enqueue(&mut self, runs_on: &[&str]) {
        self.jobs += 1;
        let name = format!("bench-{}", self.jobs);
        let secret = format!("bench-secret-{}-{}", self.jobs, "x".repeat(32));
        self.gitea
            .enqueue(&self.http, &name, runs_on, &secret)
            .await;
    }

    /// The double's claim time of each task.
    pub async fn claimed_at(
        &self,
        tasks: impl Iterator<Item = i64>,
    ) -> BTreeMap<i64, DateTime<Utc>> {
        let mut out = BTreeMap::new();
        for t in tasks {
            let v = self.gitea.admin(&self.http, &format!("tasks/{t}")).await;
            out.insert(t, parse_time(v["started_at"].as_str().unwrap()));
        }
        out
    }

    /// Deletes every sandbox (the raw loops' own: no dispatcher knows them), so the next
    /// phase lists and creates against as few as this one did.
    pub async fn clear_sandboxes(&self) {
        let all = ListFilter {
            states: Vec::new(),
            metadata: BTreeMap::new(),
        };
        for s in self.sandboxes.list(&all).await.unwrap() {
            self.sandboxes.delete(&s.id).await.unwrap();
        }
    }
}
