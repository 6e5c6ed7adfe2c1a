//! The bench's world: one `tenantci sim --gitea --spire example.org`, one nats-server, one
//! `dispatch init --spiffe-trust-domain` whose config is run twice, once with its
//! `[identity]` section removed (server-only TLS) and once as written (SPIFFE mTLS), one
//! dispatcher after the other; a claimed task per dispatcher with its executor objects.
//!
//! The ClusterStaticEntries (the facade's and each executor's) are created here by hand,
//! without labels and with names outside the dispatcher's `<namespace>.` prefix: nothing the
//! dispatcher creates or collects is relied on or touched.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use tenantci_dispatch::config::Config;
use tenantci_testkit::nats::NatsServer;
use tenantci_testkit::process::{Process, first_line};
use tenantci_testkit::sim::{Gitea, SimProcess};
use tenantci_testkit::spire::{Spire, entry_yaml};
use tenantci_testkit::wait::eventually;

use crate::progress;

pub const TRUST_DOMAIN: &str = "example.org";
const NAMESPACE: &str = "dynamic-runner";
const CLUSTER: &str = "ci";
const IMAGE: &str =
    "gitea/act_runner@sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// The facade's entry (the dispatcher's SVID).
const FACADE_ENTRY: &str = "bench-identity-facade";
/// Annotation of an executor Pod naming its task's SPIFFE ID (identity on).
const SPIFFE_ID_ANNOTATION: &str = "tenantci.io/spiffe-id";

pub struct World {
    pub bin: PathBuf,
    pub dir: PathBuf,
    _sim: SimProcess,
    pub gitea: Gitea,
    _nats: NatsServer,
    pub spire: Spire,
    kube: kube::Client,
    pub http: reqwest::Client,
    /// `dispatch init`'s config, with `[identity]`.
    mtls_config: PathBuf,
    /// The same without `[identity]`.
    plain_config: PathBuf,
    /// The facade's SPIFFE ID (`identity.facade_id`).
    pub facade_id: String,
    jobs: usize,
}

/// One `tenantci dispatch run` child, after its listening line.
pub struct Dispatcher {
    proc: Process,
    pub log: PathBuf,
}

/// A claimed task and its executor objects.
pub struct Claimed {
    pub task: i64,
    pub secret: Secret,
    pub pod: Pod,
}

impl World {
    /// Everything up; the directory goes when the returned guard drops.
    pub async fn start(bin: PathBuf) -> (tempfile::TempDir, World) {
        let tmp = tempfile::tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let state = dir.join("state");
        // Pods stay Pending (`--max-nodes 0`) and nothing is saved to disk: the simulator does
        // API work only, and the Gitea double keeps the log rows in memory.
        let mut sim_cmd = Command::new(&bin);
        sim_cmd.stderr(std::fs::File::create(dir.join("sim.log")).unwrap());
        let sim = SimProcess::start(
            sim_cmd,
            &state,
            &[CLUSTER],
            &[
                "--gitea",
                "--spire",
                TRUST_DOMAIN,
                "--max-nodes",
                "0",
                "--in-memory",
            ],
        );
        let gitea = sim.gitea();
        let spire = Spire::from_state_dir(&state);
        let kube = tenantci_testkit::kube::kube_client(&sim.tenant_admin(CLUSTER)).await;
        let nats = NatsServer::start_in(&dir.join("nats"));
        let mtls_config = init(&bin, &dir, &gitea, &nats);
        let mut cfg = Config::load(&mtls_config).unwrap();
        let facade_id = cfg
            .identity
            .as_ref()
            .expect("init with --spiffe-trust-domain writes [identity]")
            .facade_id
            .clone();
        cfg.identity = None;
        let plain_config = mtls_config.with_file_name("plain.toml");
        std::fs::write(&plain_config, cfg.to_toml()).unwrap();
        let w = World {
            bin,
            dir,
            _sim: sim,
            gitea,
            _nats: nats,
            spire,
            kube,
            http: reqwest::Client::new(),
            mtls_config,
            plain_config,
            facade_id,
            jobs: 0,
        };
        (tmp, w)
    }

    /// Starts a dispatcher, identity on or off, and waits for its listening line. With
    /// identity on, the facade's entry is created first and the dispatcher gets its socket.
    pub async fn dispatcher(&mut self, identity: bool) -> Dispatcher {
        let name = if identity { "mtls" } else { "plain" };
        let log = self.dir.join(format!("dispatcher-{name}.log"));
        let mut cmd = Command::new(&self.bin);
        let config = if identity {
            &self.mtls_config
        } else {
            &self.plain_config
        };
        cmd.args(["--log-format", "json", "dispatch", "run", "--config"])
            .arg(config)
            .env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0")
            .env("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL", "50ms")
            // Longer than a phase: no keep-alive UpdateTask calls inside the measurements.
            .env("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5m")
            .env("TENANTCI_DISPATCH_CLAIM_START_DEADLINE", "1h");
        if identity {
            self.create_entry(FACADE_ENTRY, &self.facade_id.clone(), "facade")
                .await;
            cmd.env(
                "SPIFFE_ENDPOINT_SOCKET",
                self.spire.endpoint(CLUSTER, FACADE_ENTRY),
            );
        }
        let mut proc = Process::spawn(
            cmd.stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).unwrap()),
        );
        let stdout = proc.child().stdout.take().unwrap();
        let what = format!("dispatcher {name}");
        let line = tokio::task::spawn_blocking(move || first_line(stdout, &what))
            .await
            .unwrap();
        let listening: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{name}: listening line {line:?}: {e}"));
        assert_eq!(listening["type"], "listening", "{line}");
        Dispatcher { proc, log }
    }

    /// Enqueues a pod job, waits until a dispatcher claimed it and its Secret and Pod exist.
    pub async fn claimed_task(&mut self) -> Claimed {
        self.jobs += 1;
        let name = format!("bench-{}", self.jobs);
        let secret = format!("bench-secret-{}-{}", self.jobs, "x".repeat(32));
        let job = self
            .gitea
            .enqueue(&self.http, &name, &["self-hosted", "pod"], &secret)
            .await;
        let task = eventually("the job to be claimed", || async {
            self.gitea.admin(&self.http, &format!("jobs/{job}")).await["task_id"].as_i64()
        })
        .await;
        let secrets = Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE);
        let pods = Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE);
        let object = format!("gitea-task-{task}");
        let (secret, pod) = eventually("the executor Secret and Pod", || async {
            Some((
                secrets.get_opt(&object).await.unwrap()?,
                pods.get_opt(&object).await.unwrap()?,
            ))
        })
        .await;
        Claimed { task, secret, pod }
    }

    /// Creates the executor's entry for `c`'s Pod with the SPIFFE ID its annotation names;
    /// returns the entry's Workload API endpoint.
    pub async fn executor_entry(&self, c: &Claimed) -> String {
        let id = c
            .pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SPIFFE_ID_ANNOTATION))
            .unwrap_or_else(|| panic!("the executor Pod has {SPIFFE_ID_ANNOTATION}"))
            .clone();
        let name = format!("bench-identity-executor-{}", c.task);
        let uid = c.pod.metadata.uid.clone().unwrap_or_default();
        self.create_entry(&name, &id, &uid).await;
        self.spire.endpoint(CLUSTER, &name)
    }

    /// A ClusterStaticEntry `name` for `spiffe_id` (no labels), once the stand-in serves it.
    async fn create_entry(&self, name: &str, spiffe_id: &str, pod_uid: &str) {
        let yaml = entry_yaml(
            name,
            spiffe_id,
            &format!("spiffe://{TRUST_DOMAIN}/spire/agent/k8s_psat/{CLUSTER}/node-uid-1"),
            pod_uid,
        );
        let obj: DynamicObject = serde_yaml::from_str(&yaml).unwrap();
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterStaticEntry"),
            "clusterstaticentries",
        );
        Api::<DynamicObject>::all_with(self.kube.clone(), &ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        self.spire.served(&self.http, CLUSTER, name).await;
    }

    /// Waits (bounded) until the executor Pods are gone, so the next dispatcher's recovery
    /// has nothing of this one's to do inside its measurements.
    pub async fn executors_gone(&self) {
        let pods = Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE);
        for _ in 0..200 {
            if pods
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        progress("warning: executor Pods still there after 20 s");
    }

    /// SIGTERM: the dispatcher must drain and exit 0.
    pub fn stop(&self, mut d: Dispatcher) {
        let code = d.proc.terminate(Duration::from_secs(30));
        assert_eq!(
            code,
            Some(0),
            "the dispatcher drains and exits 0 (log: {})",
            d.log.display()
        );
    }
}

/// `tenantci dispatch init` with executor identity (trust domain [`TRUST_DOMAIN`], the
/// defaults otherwise); the config's path.
fn init(bin: &Path, dir: &Path, gitea: &Gitea, nats: &NatsServer) -> PathBuf {
    tenantci_testkit::dispatch::init(
        bin,
        dir,
        gitea,
        nats,
        &[
            "--namespace",
            NAMESPACE,
            "--executor-image",
            IMAGE,
            "--proxy-image",
            IMAGE,
            "--spiffe-trust-domain",
            TRUST_DOMAIN,
        ],
    )
}
