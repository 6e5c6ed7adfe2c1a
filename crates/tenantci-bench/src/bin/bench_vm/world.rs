//! The bench's world: the testkit's dispatcher world ([`tenantci_testkit::world`]) with the
//! simulator's OpenSandbox double, `dispatch init` with both backends, and `dispatch run`
//! children with a JSON log read as it grows. What only this bench does stays here: the
//! dispatchers' environment overrides, job naming, the raw loops' sandbox cleanup.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantci_core::opensandbox::{LifecycleClient, ListFilter};
use tenantci_testkit::world::{self, EXECUTOR_IMAGE, Options};

use crate::logtail::LogTail;
use crate::progress;
use crate::report::parse_time;

pub struct World {
    inner: world::World,
    pub sandboxes: LifecycleClient,
    pub config: PathBuf,
    runs: usize,
    jobs: usize,
}

impl Deref for World {
    type Target = world::World;
    fn deref(&self) -> &world::World {
        &self.inner
    }
}

/// One `tenantci dispatch run` child.
pub struct Dispatcher {
    proc: world::Dispatcher,
    pub tail: LogTail,
}

impl World {
    /// Everything up, in a directory under /var/tmp. `bin` must have the `sim` feature.
    pub async fn start(bin: PathBuf, vm_capacity: usize) -> World {
        let tmp = tempfile::tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let mut inner = Options::new(bin)
            .dir(tmp)
            .sim_log()
            .nats_in_dir()
            .opensandbox()
            .api_only()
            .start()
            .await;
        let opensandbox = inner.opensandbox().clone();
        let flags: Vec<std::ffi::OsString> = vec![
            "--executor-image".into(),
            EXECUTOR_IMAGE.into(),
            "--proxy-image".into(),
            EXECUTOR_IMAGE.into(),
            "--labels".into(),
            "self-hosted,pod,vm".into(),
            "--vm-capacity".into(),
            vm_capacity.to_string().into(),
            "--opensandbox-url".into(),
            opensandbox.url.clone().into(),
            "--opensandbox-api-key-file".into(),
            opensandbox.api_key_file.clone().into(),
        ];
        let config = inner.init(&flags);
        World {
            inner,
            sandboxes: opensandbox.client(),
            config,
            runs: 0,
            jobs: 0,
        }
    }

    /// Keeps the directory with every log once the processes are gone; its path.
    pub fn keep_dir(self) -> PathBuf {
        self.inner.keep_dir()
    }

    /// Starts a dispatcher with `capacity` for both backends and waits until it leads.
    pub async fn dispatcher(&mut self, name: &str, capacity: usize) -> Dispatcher {
        self.runs += 1;
        let log = self
            .dir
            .path()
            .join(format!("dispatcher-{}-{name}.log", self.runs));
        let mut cmd = self.command();
        cmd.args(["--log-format", "json"])
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
        let proc = world::Dispatcher::spawn(cmd, name, &self.config, &log).await;
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
        let code = d.proc.terminate_within(Duration::from_secs(30));
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
        let http = self.inner.http();
        self.gitea.enqueue(http, &name, runs_on, &secret).await;
    }

    /// The double's claim time of each task.
    pub async fn claimed_at(
        &self,
        tasks: impl Iterator<Item = i64>,
    ) -> BTreeMap<i64, DateTime<Utc>> {
        let mut out = BTreeMap::new();
        for t in tasks {
            let v = self.task(t).await;
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
