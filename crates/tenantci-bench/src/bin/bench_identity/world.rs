//! The bench's world: the testkit's dispatcher world ([`tenantci_testkit::world`]) with the
//! simulator's SPIRE stand-in (`--spire example.org`), one `dispatch init
//! --spiffe-trust-domain` whose config is run twice, once with its `[identity]` section
//! removed (server-only TLS) and once as written (SPIFFE mTLS), one dispatcher after the
//! other; a claimed task per dispatcher with its executor objects.
//!
//! The ClusterStaticEntries (the facade's and each executor's) are created here by hand,
//! without labels and with names outside the dispatcher's `<namespace>.` prefix: nothing the
//! dispatcher creates or collects is relied on or touched.

use std::ops::Deref;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use tenantci_dispatch::config::Config;
use tenantci_testkit::world::{self, CLUSTER, Dispatcher, EXECUTOR_IMAGE, NAMESPACE, Options, TD};

use crate::progress;

/// The facade's entry (the dispatcher's SVID).
const FACADE_ENTRY: &str = "bench-identity-facade";
/// Annotation of an executor Pod naming its task's SPIFFE ID (identity on).
const SPIFFE_ID_ANNOTATION: &str = "tenantci.io/spiffe-id";

pub struct World {
    inner: world::World,
    /// `dispatch init`'s config, with `[identity]`.
    mtls_config: PathBuf,
    /// The same without `[identity]`.
    plain_config: PathBuf,
    /// The facade's SPIFFE ID (`identity.facade_id`).
    pub facade_id: String,
    jobs: usize,
}

impl Deref for World {
    type Target = world::World;
    fn deref(&self) -> &world::World {
        &self.inner
    }
}

/// A claimed task and its executor objects.
pub struct Claimed {
    pub task: i64,
    pub secret: Secret,
    pub pod: Pod,
}

impl World {
    /// Everything up, in a directory under /var/tmp.
    pub async fn start(bin: PathBuf) -> World {
        let tmp = tempfile::tempdir_in("/var/tmp")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        // The Gitea double keeps the log rows in memory.
        let mut inner = Options::new(bin)
            .dir(tmp)
            .sim_log()
            .nats_in_dir()
            .spire()
            .api_only()
            .start()
            .await;
        let mtls_config = inner.init(&[
            "--namespace",
            NAMESPACE,
            "--executor-image",
            EXECUTOR_IMAGE,
            "--proxy-image",
            EXECUTOR_IMAGE,
            "--spiffe-trust-domain",
            TD,
        ]);
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
        World {
            inner,
            mtls_config,
            plain_config,
            facade_id,
            jobs: 0,
        }
    }

    /// Keeps the directory with every log once the processes are gone; its path.
    pub fn keep_dir(self) -> PathBuf {
        self.inner.keep_dir()
    }

    /// Starts a dispatcher, identity on or off, and waits for its listening line. With
    /// identity on, the facade's entry is created first and the dispatcher gets its socket.
    pub async fn dispatcher(&mut self, identity: bool) -> Dispatcher {
        let name = if identity { "mtls" } else { "plain" };
        let log = self.dir.path().join(format!("dispatcher-{name}.log"));
        let mut cmd = self.command();
        cmd.args(["--log-format", "json"])
            .env("RUST_LOG", "warn,tenantci=info")
            .env("TENANTCI_DISPATCH_STATUS_LISTEN", "127.0.0.1:0")
            .env("TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL", "50ms")
            // Longer than a phase: no keep-alive UpdateTask calls inside the measurements.
            .env("TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL", "5m")
            .env("TENANTCI_DISPATCH_CLAIM_START_DEADLINE", "1h");
        let config = if identity {
            self.inner
                .create_entry_for_pod(FACADE_ENTRY, &self.facade_id, "facade")
                .await;
            let endpoint = self.spire().endpoint(CLUSTER, FACADE_ENTRY);
            cmd.env("SPIFFE_ENDPOINT_SOCKET", endpoint);
            &self.mtls_config
        } else {
            &self.plain_config
        };
        Dispatcher::spawn(cmd, name, config, &log).await
    }

    /// Enqueues a pod job, waits until a dispatcher claimed it and its Secret and Pod exist.
    pub async fn claimed_task(&mut self) -> Claimed {
        self.jobs += 1;
        let name = format!("bench-{}", self.jobs);
        let secret = format!("bench-secret-{}-{}", self.jobs, "x".repeat(32));
        let job = self.inner.enqueue(&name, &secret).await;
        let task = self.claimed(job).await;
        let (secret, pod) = self.objects(task).await;
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
        self.create_entry_for_pod(&name, &id, &uid).await;
        self.spire().endpoint(CLUSTER, &name)
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
        let code = d.terminate_within(Duration::from_secs(30));
        assert_eq!(
            code,
            Some(0),
            "the dispatcher drains and exits 0 (log: {})",
            d.log.display()
        );
    }
}
