//! A dispatcher under test: the simulator with its Gitea double, a real nats-server with the
//! generated users, `tenantci dispatch run` as a child process (killable with SIGKILL), and
//! an executor played by the test through the facade using only the executor Secret's files
//! (tenantci_testkit::executor). [`World::start_with_spire`] adds the simulator's SPIRE
//! stand-in and [`World::with_identity`] turns executor identity on (issue 15).
//!
//! Every dispatcher listens on port 0 and reports its addresses on stdout. Its executors are
//! given a fixed facade URL per instance name, a [`Forward`] pointed at whichever process
//! serves that name, as a restarted Pod keeps its Service.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::client::{ClientConfig, RunnerClient};
use tenantci_core::forge::gitea::proto::RegisterRequest;
use tenantci_dispatch::config::{self, Config};
use tenantci_dispatch::identity::{self, Identity, entries};
use tenantci_testkit::executor::Executor;
use tenantci_testkit::forward::Forward;
use tenantci_testkit::kube::kube_client;
use tenantci_testkit::nats::{NatsCluster, NatsServer};
use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::process::{Process, first_line};
use tenantci_testkit::sim::{Gitea, SimProcess};
use tenantci_testkit::spire::{Spire, admin_entry_yaml, entry_yaml};
use tenantci_testkit::wait::{DEADLINE, eventually};

use crate::util::{self, scratch, tenantci};

pub const NAMESPACE: &str = "dynamic-runner";
/// The sidecar image of the executor Pods (the simulator pulls nothing; only the digest form
/// matters).
pub const PROXY_IMAGE: &str =
    "tenantci@sha256:1111111111111111111111111111111111111111111111111111111111111111";
/// The webhook secret of [`World::with_webhook`].
pub const WEBHOOK_SECRET: &str = "webhook-s3cret-typed-into-gitea";
/// The SPIRE stand-in's trust domain, and the dispatcher's SPIFFE ID and entry in it.
pub const TD: &str = "example.org";
pub const FACADE_ID: &str = "spiffe://example.org/ns/dynamic-runner/sa/tenantci-dispatcher";
pub const DISPATCHER_ENTRY: &str = "tenantci-dispatcher";

/// Everything one test's dispatchers share.
pub struct World {
    /// First, so it stops before the simulator does.
    pub watch: PodWatch,
    pub dir: tempfile::TempDir,
    /// Kept for its lifetime: the simulator stops when the world is dropped.
    _sim: SimProcess,
    pub nats: NatsServer,
    pub gitea: Gitea,
    /// The simulator's OpenSandbox double (the VM backend's Lifecycle API).
    pub opensandbox: OpenSandbox,
    /// The simulator's SPIRE stand-in, when started with one ([`World::start_with_spire`]).
    pub spire: Option<Spire>,
    /// Environment of every dispatcher started from now on (the Workload API endpoint).
    dispatcher_env: Vec<(String, String)>,
    pub kube: kube::Client,
    /// The tenant-admin kubeconfig of the simulated cluster.
    pub tenant_admin: PathBuf,
    http: reqwest::Client,
    /// The config every dispatcher starts from (facade URL and identity differ per name).
    base: Config,
    /// Each instance name's fixed facade address.
    services: Mutex<BTreeMap<String, Arc<Forward>>>,
    /// With a three-node NATS cluster: `nats` is n1, these are n2 and n3.
    pub peers: Vec<NatsServer>,
    /// The cluster's files; last, so every server is killed before they go.
    _nats_dir: Option<tempfile::TempDir>,
}

impl World {
    /// A world whose dispatcher inputs are made by the test with the library (namespace,
    /// registration, keys, facade PKI), with short timings; the dispatcher uses the
    /// tenant-admin kubeconfig.
    pub async fn start(pod_capacity: u32) -> World {
        Self::build(MadeBy::Test(pod_capacity), None, false, &[]).await
    }

    /// As [`World::start`], the simulator started with `sim_flags` too (its rented nodes:
    /// `--node-boot 1s`).
    pub async fn start_with_sim_flags(pod_capacity: u32, sim_flags: &[&str]) -> World {
        Self::build(MadeBy::Test(pod_capacity), None, false, sim_flags).await
    }

    /// As [`World::start`], with the simulator's SPIRE stand-in for trust domain [`TD`].
    pub async fn start_with_spire(pod_capacity: u32) -> World {
        Self::build(MadeBy::Test(pod_capacity), None, true, &[]).await
    }

    /// As [`World::start`], on a three-node JetStream cluster (`NatsCluster`) whose topology
    /// `tenantci queue init --replicas 3` created; dispatchers get every server's URL.
    pub async fn start_clustered(pod_capacity: u32) -> World {
        let (servers, dir) = NatsCluster::start().into_parts();
        let mut w = Self::build(MadeBy::Test(pod_capacity), Some((servers, dir)), false, &[]).await;
        let urls: Vec<String> = std::iter::once(&w.nats)
            .chain(&w.peers)
            .map(|s| s.url.clone())
            .collect();
        w.base.nats.url = urls.join(",");
        let url = w.base.nats.url.clone();
        let password = w.nats.password_file("ci-admin");
        // Until the cluster has elected its JetStream meta leader, init exits 3.
        tenantci_testkit::wait::eventually_blocking("queue init --replicas 3", || {
            let o = util::run(
                util::tenantci()
                    .args(["queue", "init", "--nats", &url, "--user", "ci-admin"])
                    .arg("--password-file")
                    .arg(&password)
                    .args([
                        "--replicas",
                        "3",
                        "--pod-capacity",
                        &pod_capacity.to_string(),
                    ]),
            );
            o.status.success().then_some(())
        });
        w
    }

    /// As [`World::start`], on a NATS server that speaks TLS only, its certificate from a
    /// private CA that dispatchers trust through `nats.ca_file` (`tls://` URL).
    pub async fn start_tls_nats(pod_capacity: u32) -> World {
        let server = NatsServer::start_tls();
        let ca = server.ca_file();
        let no_cluster_dir = tempfile::tempdir().unwrap();
        let servers = Some((vec![server], no_cluster_dir));
        let mut w = Self::build(MadeBy::Test(pod_capacity), servers, false, &[]).await;
        w.base.nats.ca_file = Some(ca);
        w
    }

    /// A world whose dispatcher inputs come from `tenantci dispatch init` (its scoped
    /// credential, RBAC, registration, keys and facade PKI), with init's default timings.
    pub async fn start_via_init() -> World {
        Self::build(MadeBy::Init, None, false, &[]).await
    }

    /// As [`World::start`], against the Gitea double playing Forgejo (`sim --forgejo`).
    pub async fn start_forgejo(pod_capacity: u32) -> World {
        Self::build_as(MadeBy::Test(pod_capacity), None, false, &[], Forge::Forgejo).await
    }

    /// As [`World::start_with_spire`], against the double playing Forgejo.
    pub async fn start_forgejo_with_spire(pod_capacity: u32) -> World {
        Self::build_as(MadeBy::Test(pod_capacity), None, true, &[], Forge::Forgejo).await
    }

    /// A world whose dispatcher inputs come from `tenantci dispatch init --kubeconfig` with the
    /// tenant-admin kubeconfig and no state dir (the path for any cluster): the config names no
    /// kubeconfig, and every dispatcher runs as the `tenantci-dispatcher` ServiceAccount.
    ///
    /// kube's in-cluster config reads the token from a fixed path under /var/run/secrets, and
    /// the simulator authenticates client certificates only; so the ServiceAccount identity
    /// reaches it the way an apiserver's authorizer sees it: `KUBECONFIG` (which kube's
    /// inferred config reads first, as in a Pod it reads the token) impersonates the
    /// ServiceAccount with its groups, and the RBAC init applied decides every request.
    pub async fn start_via_kubeconfig_init() -> World {
        Self::as_service_account(MadeBy::KubeconfigInit).await
    }

    /// As [`World::start_via_kubeconfig_init`], with `--apply-secret`: every dispatcher runs
    /// from the ConfigMap and Secret init applied, projected as the Deployment projects them,
    /// with the Deployment's environment (`dispatch::mounted`).
    pub async fn start_from_in_cluster_objects() -> World {
        Self::as_service_account(MadeBy::InClusterObjects).await
    }

    async fn as_service_account(made: MadeBy) -> World {
        let mut w = Self::build(made, None, false, &[]).await;
        let sa = w.dir.path().join("service-account.kubeconfig");
        std::fs::write(&sa, impersonating(&w.tenant_admin, NAMESPACE)).unwrap();
        w.dispatcher_env
            .push(("KUBECONFIG".into(), sa.display().to_string()));
        w
    }

    async fn build(
        made: MadeBy,
        cluster: Option<(Vec<NatsServer>, tempfile::TempDir)>,
        spire: bool,
        sim_flags: &[&str],
    ) -> World {
        Self::build_as(made, cluster, spire, sim_flags, Forge::Gitea).await
    }

    async fn build_as(
        made: MadeBy,
        cluster: Option<(Vec<NatsServer>, tempfile::TempDir)>,
        spire: bool,
        sim_flags: &[&str],
        forge: Forge,
    ) -> World {
        let dir = scratch();
        let state = dir.path().join("state");
        let mut flags = vec!["--gitea", "--opensandbox"];
        flags.extend(sim_flags);
        if forge == Forge::Forgejo {
            flags.push("--forgejo");
        }
        if spire {
            flags.extend(["--spire", TD]);
        }
        let sim = SimProcess::start(tenantci(), &state, &["ci"], &flags);
        let spire = spire.then(|| Spire::from_state_dir(&state));
        let gitea = sim.gitea();
        let opensandbox = OpenSandbox::from_state_dir(&state);
        let (nats, peers, nats_dir) = match cluster {
            Some((mut servers, d)) => (servers.remove(0), servers, Some(d)),
            None => (NatsServer::start(), Vec::new(), None),
        };
        let kubeconfig = sim.tenant_admin("ci");
        let kube = kube_client(&kubeconfig).await;
        let cfg_dir = dir.path().join("dispatch");
        std::fs::create_dir_all(&cfg_dir).unwrap();
        let base = match made {
            MadeBy::Test(pod_capacity) => {
                Api::<Namespace>::all(kube.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
                    )
                    .await
                    .unwrap();
                let mut base =
                    write_inputs(&cfg_dir, &gitea, &nats, &kubeconfig, pod_capacity).await;
                base.gitea.forge = forge;
                base
            }
            MadeBy::Init => init(dir.path(), &cfg_dir, &state, &gitea, &nats),
            MadeBy::KubeconfigInit => {
                let flags = kubeconfig_flags(&kubeconfig);
                init_with(dir.path(), &cfg_dir, flags, &gitea, &nats)
            }
            MadeBy::InClusterObjects => {
                let mut flags = kubeconfig_flags(&kubeconfig);
                flags.push("--apply-secret".into());
                init_with(dir.path(), &cfg_dir, flags, &gitea, &nats);
                let rendered = crate::ship::kustomize("manifests/dispatch");
                let deployment: Value =
                    serde_json::to_value(crate::ship::of_kind(&rendered, "Deployment")[0]).unwrap();
                let k = tenantci_testkit::kube::Kubectl::new(&kubeconfig, dir.path());
                let pod_dir = dir.path().join("pod-volume");
                let m = super::mounted::mount(&k, NAMESPACE, &deployment, &pod_dir);
                m.assert_every_file_resolves();
                m.config()
            }
        };
        let watch = PodWatch::start(kube.clone());
        World {
            dir,
            _sim: sim,
            nats,
            gitea,
            opensandbox,
            spire,
            dispatcher_env: Vec::new(),
            kube,
            tenant_admin: kubeconfig,
            watch,
            http: reqwest::Client::new(),
            base,
            services: Mutex::default(),
            peers,
            _nats_dir: nats_dir,
        }
    }

    /// Configures every dispatcher started from now on with a webhook receiver (port 0,
    /// secret [`WEBHOOK_SECRET`] in a 0600 file with a trailing newline, as an operator
    /// writes it) polling every `fetch_interval` as the safety net.
    pub fn with_webhook(&mut self, fetch_interval: Duration) {
        let file = self.dir.path().join("dispatch").join("webhook.secret");
        if !file.exists() {
            tenantci_core::fsutil::write_new_atomic(
                &file,
                format!("{WEBHOOK_SECRET}\n").as_bytes(),
                0o600,
            )
            .unwrap();
        }
        self.base.webhook = Some(tenantci_dispatch::claim::settings::Webhook {
            fetch_interval: fetch_interval.into(),
            ..tenantci_dispatch::claim::settings::Webhook::new("127.0.0.1:0".parse().unwrap(), file)
        });
    }

    /// Configures every dispatcher started from now on to read the Forgejo double's
    /// waiting-jobs API (`scope`, every `interval`) with `token` in a 0600 file.
    pub fn with_waiting_jobs(&mut self, scope: &str, token: &str, interval: Duration) {
        let file = self.dir.path().join("dispatch").join("forgejo-api.token");
        let _ = std::fs::remove_file(&file);
        tenantci_core::fsutil::write_new_atomic(&file, format!("{token}\n").as_bytes(), 0o600)
            .unwrap();
        self.base.waiting_jobs = Some(tenantci_dispatch::claim::settings::WaitingJobs {
            scope: scope.into(),
            token_file: file,
            interval: interval.into(),
        });
    }

    /// Polls Gitea only every `interval` (also after an idle spell): a claim sooner than that
    /// was woken by a nudge.
    pub fn with_fetch_interval(&mut self, interval: Duration) {
        self.base.gitea.fetch_interval = interval.into();
        self.base.gitea.fetch_interval_idle = interval.into();
    }

    /// Turns executor identity on for every dispatcher started from now on: the dispatcher's
    /// entry ([`FACADE_ID`]) exists and is served, the dispatchers get its Workload API
    /// socket, and `[identity]` has the defaults with that facade ID.
    pub async fn with_identity(&mut self) {
        self.create_entry(DISPATCHER_ENTRY, FACADE_ID).await;
        self.identity_config();
    }

    /// [`World::with_identity`] for VM executors too: `[identity]` names the stand-in's SPIRE
    /// Server API, where the dispatcher mints the sandboxes' SVIDs, and the dispatcher's entry
    /// is an admin one when `admin` (SPIRE mints only for admin workloads).
    pub async fn with_vm_identity(&mut self, admin: bool) {
        self.create_entry_with(DISPATCHER_ENTRY, FACADE_ID, admin)
            .await;
        self.identity_config();
        let spire = self
            .spire
            .as_ref()
            .expect("a world with the SPIRE stand-in");
        let identity = self.base.identity.as_mut().expect("identity_config set it");
        identity.server_address = Some(spire.server_address.clone());
        identity.server_id = Some(spire.server_id.clone());
    }

    /// Makes the entry `name` an admin one (as an operator would, when the mints are refused).
    pub async fn make_admin(&self, name: &str) {
        let patch = json!({"spec": {"admin": true}});
        self.entries_api()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    fn identity_config(&mut self) {
        let spire = self
            .spire
            .as_ref()
            .expect("a world with the SPIRE stand-in");
        self.dispatcher_env = vec![(
            "SPIFFE_ENDPOINT_SOCKET".into(),
            spire.endpoint("ci", DISPATCHER_ENTRY),
        )];
        self.base.identity = Some(Identity {
            trust_domain: TD.into(),
            id_template: identity::settings::defaults::id_template(),
            parent_template: identity::settings::defaults::parent_template(),
            cluster: Some("ci".into()),
            facade_id: FACADE_ID.into(),
            source: "workload-api".into(),
            server_address: None,
            server_id: None,
            class_name: identity::settings::defaults::class_name(),
        });
    }

    /// Creates the ClusterStaticEntry `name` for `spiffe_id` (as an operator does for the
    /// dispatcher's own identity) and waits until the stand-in serves its SVID.
    pub async fn create_entry(&self, name: &str, spiffe_id: &str) {
        self.create_entry_with(name, spiffe_id, false).await
    }

    /// [`World::create_entry`], an admin entry when `admin`.
    pub async fn create_entry_with(&self, name: &str, spiffe_id: &str, admin: bool) {
        let yaml = if admin { admin_entry_yaml } else { entry_yaml }(
            name,
            spiffe_id,
            "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-1",
            &format!("pod-uid-of-{name}"),
        );
        let obj: DynamicObject = serde_yaml::from_str(&yaml).unwrap();
        self.entries_api()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        let spire = self
            .spire
            .as_ref()
            .expect("a world with the SPIRE stand-in");
        spire.served(&self.http, "ci", name).await;
    }

    fn entries_api(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterStaticEntry"),
            "clusterstaticentries",
        );
        Api::all_with(self.kube.clone(), &ar)
    }

    /// The ClusterStaticEntries the dispatchers of [`NAMESPACE`] made for their executors.
    pub async fn task_entries(&self) -> Vec<DynamicObject> {
        let lp = kube::api::ListParams::default().labels(&entries::selector(NAMESPACE));
        self.entries_api().list(&lp).await.unwrap().items
    }

    /// Waits until the dispatcher wrote `task`'s entry and the stand-in serves it; its name.
    pub async fn task_entry_served(&self, task: i64) -> String {
        let name = entries::entry_name(NAMESPACE, &format!("gitea-task-{task}"));
        let spire = self
            .spire
            .as_ref()
            .expect("a world with the SPIRE stand-in");
        spire.served(&self.http, "ci", &name).await;
        name
    }

    /// Waits until no executor entry of [`NAMESPACE`] is left.
    pub async fn no_task_entries(&self) {
        eventually("the executors' SPIRE entries to be deleted", || async {
            self.task_entries().await.is_empty().then_some(())
        })
        .await
    }

    /// Every dispatcher started from now on replaces an executor that has not fetched its
    /// task after `start_deadline`, up to `max_attempts`.
    pub fn with_start_deadline(&mut self, start_deadline: Duration, max_attempts: u32) {
        self.base.claim = tenantci_dispatch::task::Claim {
            start_deadline: start_deadline.into(),
            max_attempts,
        };
    }

    /// Every dispatcher started from now on runs the VM backend against the simulator's
    /// OpenSandbox double with the key in `api_key_file`, `capacity` sandboxes at once.
    pub fn with_vm(&mut self, capacity: u32, api_key_file: &Path) {
        self.base.capacity.vm = capacity;
        self.base.gitea.labels.push("vm".into());
        self.base.vm = Some(tenantci_dispatch::backend::vm::Vm {
            opensandbox_url: self.opensandbox.url.clone(),
            api_key_file: api_key_file.to_path_buf(),
            image: None,
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: Duration::from_secs(3 * 3600 + 600).into(),
        });
    }

    /// The environment every dispatcher started from now on gets.
    pub fn dispatcher_env(&self) -> &[(String, String)] {
        &self.dispatcher_env
    }

    /// The config dispatchers started from now on are written from.
    pub fn base_mut(&mut self) -> &mut Config {
        &mut self.base
    }

    /// `tenantci dispatch run` with `name`'s config and the dispatchers' environment, to its
    /// exit (for the starts that must be refused).
    pub fn run_dispatcher_to_exit(&self, name: &str) -> std::process::Output {
        let config = self.config_only(name);
        util::run(
            tenantci()
                .args(["dispatch", "run", "--config"])
                .arg(&config)
                .envs(self.dispatcher_env().iter().map(|(k, v)| (k, v))),
        )
    }

    /// Writes `name`'s config as [`World::dispatcher`] would, without starting it.
    pub fn config_only(&self, name: &str) -> PathBuf {
        self.write_config(name, self.base.clone());
        self.config_path(name)
    }

    /// Registers `d`'s webhook receiver at the Gitea double, with the right secret.
    pub async fn register_hook(&self, d: &Dispatcher) {
        let addr = d.webhook.expect("the dispatcher has a webhook receiver");
        self.gitea
            .add_hook(
                &self.http,
                &format!("http://{addr}/webhooks/gitea"),
                WEBHOOK_SECRET,
            )
            .await;
    }

    /// FetchTask calls the Gitea double answered so far.
    pub async fn fetch_calls(&self) -> u64 {
        self.gitea.admin(&self.http, "stats").await["fetch_task_calls"]
            .as_u64()
            .unwrap()
    }

    /// The double's webhook deliveries so far.
    pub async fn deliveries(&self) -> Vec<Value> {
        self.gitea
            .admin(&self.http, "hooks/deliveries")
            .await
            .as_array()
            .unwrap()
            .clone()
    }

    /// Starts a dispatcher instance named `name` and waits until it listens. Its executors
    /// are given the name's fixed facade address, which follows the instance when the same
    /// name is started again (as a restarted Pod keeps its Service).
    pub async fn dispatcher(&self, name: &str) -> Dispatcher {
        let service = self.services.lock().unwrap().get(name).cloned();
        let service = match service {
            Some(s) => s,
            None => {
                let s = Arc::new(Forward::start().await);
                let mut cfg = self.base.clone();
                cfg.facade.url = format!("https://{}", s.addr());
                self.write_config(name, cfg);
                self.services
                    .lock()
                    .unwrap()
                    .insert(name.to_string(), s.clone());
                s
            }
        };
        let d = self.spawn(name).await;
        assert_eq!(
            d.facade_url,
            format!("https://{}", service.addr()),
            "a facade URL with a fixed port is advertised as configured"
        );
        service.point_at(d.facade);
        d
    }

    /// Starts a dispatcher instance named `name` whose config has port 0 in the facade URL:
    /// executors are given the port its facade was bound to.
    pub async fn dispatcher_on_any_port(&self, name: &str) -> Dispatcher {
        let mut cfg = self.base.clone();
        cfg.facade.url = "https://127.0.0.1:0".into();
        self.write_config(name, cfg);
        self.spawn(name).await
    }

    /// The simulator's state directory (the gateway's: `--state-dir`, cluster `ci`).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn config_path(&self, name: &str) -> PathBuf {
        self.dir
            .path()
            .join("dispatch")
            .join(format!("{name}.toml"))
    }

    /// Writes `name`'s config: `cfg` listening on port 0, with `name` as its identity.
    fn write_config(&self, name: &str, mut cfg: Config) {
        cfg.facade.listen = "127.0.0.1:0".parse().unwrap();
        cfg.status.listen = "127.0.0.1:0".parse().unwrap();
        cfg.leader.identity = Some(name.to_string());
        std::fs::write(self.config_path(name), cfg.to_toml()).unwrap();
    }

    async fn spawn(&self, name: &str) -> Dispatcher {
        // TENANTCI_TEST_LOG_DIR keeps the dispatcher logs after the test (for debugging).
        let log_dir = std::env::var_os("TENANTCI_TEST_LOG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.path().to_path_buf());
        Dispatcher::spawn(
            name,
            &self.config_path(name),
            &log_dir.join(format!("{name}.log")),
            &self.dispatcher_env,
        )
        .await
    }

    /// Enqueues a job at the Gitea double; returns the job id.
    pub async fn enqueue(&self, name: &str, secret: &str) -> i64 {
        self.gitea
            .enqueue(&self.http, name, &["self-hosted", "pod"], secret)
            .await
    }

    /// Enqueues a job that runs on the VM backend (`runs-on: [self-hosted, vm]`).
    pub async fn enqueue_vm(&self, name: &str, secret: &str) -> i64 {
        self.gitea
            .enqueue(&self.http, name, &["self-hosted", "vm"], secret)
            .await
    }

    /// The live sandboxes of `task` as the OpenSandbox double's admin view shows them.
    pub async fn sandboxes_of(&self, task: i64) -> Vec<Value> {
        let id = task.to_string();
        self.opensandbox
            .sandboxes(&self.http)
            .await
            .into_iter()
            .filter(|s| s["metadata"]["tenantci.io/task-id"].as_str() == Some(id.as_str()))
            .collect()
    }

    /// Waits until `task`'s sandbox exists; an executor for it from the sandbox's env.
    pub async fn vm_executor(&self, task: i64) -> Executor {
        let sandbox = eventually("the task's VM sandbox", || async {
            self.sandboxes_of(task).await.into_iter().next()
        })
        .await;
        Executor::from_sandbox(&sandbox)
    }

    /// Waits until no sandbox is left at the double.
    pub async fn no_sandboxes_left(&self) {
        eventually("every VM sandbox to be deleted", || async {
            self.opensandbox
                .sandboxes(&self.http)
                .await
                .is_empty()
                .then_some(())
        })
        .await
    }

    /// The OpenSandbox double's figures (`{created, deleted, live, maxLive, ...}`).
    pub async fn sandbox_stats(&self) -> Value {
        self.opensandbox.stats(&self.http).await
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub async fn job(&self, id: i64) -> Value {
        self.gitea.admin(&self.http, &format!("jobs/{id}")).await
    }

    pub async fn task(&self, id: i64) -> Value {
        self.gitea.admin(&self.http, &format!("tasks/{id}")).await
    }

    /// Every job of `jobs` is done and its task SUCCESS with one log line: it ran, once.
    pub async fn assert_ran_once(&self, jobs: &[i64]) {
        for job in jobs {
            let j = self.job(*job).await;
            assert_eq!(j["status"], "done", "{j}");
            let t = self.task(j["task_id"].as_i64().unwrap()).await;
            assert_eq!(t["result"], "RESULT_SUCCESS", "{t}");
            assert_eq!(t["logs"].as_array().unwrap().len(), 1, "ran once: {t}");
        }
    }

    /// `task` is SUCCESS at the double and its executor's "ran task N" line is there exactly
    /// once (other lines, such as a replaced attempt's, may be there too).
    pub async fn assert_succeeded_once(&self, task: i64) {
        let t = self.task(task).await;
        assert_eq!(t["result"], "RESULT_SUCCESS", "{t}");
        let line = format!("ran task {task}");
        let n = t["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l.as_str() == Some(&line))
            .count();
        assert_eq!(n, 1, "the task ran and logged once: {t}");
    }

    /// The task id of a job once it is claimed.
    pub async fn claimed(&self, job: i64) -> i64 {
        eventually("the job to be claimed", || async {
            self.job(job).await["task_id"].as_i64()
        })
        .await
    }

    /// The executors' Secrets (not the dispatcher's own, which `init --apply-secret` made).
    pub async fn secrets(&self) -> Vec<Secret> {
        let own = tenantci_dispatch::init::in_cluster::SECRET;
        Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|s| s.metadata.name.as_deref() != Some(own))
            .collect()
    }

    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE)
            .list(&Default::default())
            .await
            .unwrap()
            .items
    }

    /// Waits until the executor objects of `task` exist, then returns an executor for it that
    /// goes straight to the facade (`from_objects`).
    pub async fn executor(&self, task: i64) -> Executor {
        let (secret, pod) = self.objects(task).await;
        Executor::from_objects(&secret, &pod)
    }

    /// Waits until the executor Secret and Pod of `task` exist.
    pub async fn objects(&self, task: i64) -> (Secret, Pod) {
        let secrets = Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE);
        let pods = Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE);
        let name = format!("gitea-task-{task}");
        eventually("the executor Secret and Pod", || async {
            Some((
                secrets.get_opt(&name).await.unwrap()?,
                pods.get_opt(&name).await.unwrap()?,
            ))
        })
        .await
    }

    /// Deletes `task`'s executor Pod and Secret, as someone (or a restored apiserver) might
    /// while no dispatcher leads.
    pub async fn delete_executor(&self, task: i64) {
        let (dp, name) = (DeleteParams::default(), format!("gitea-task-{task}"));
        Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE)
            .delete(&name, &dp)
            .await
            .unwrap();
        Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE)
            .delete(&name, &dp)
            .await
            .unwrap();
    }

    /// Deletes only `task`'s executor Pod (its Secret stays), as a node drain or an operator
    /// might before its runner fetched the task.
    pub async fn delete_pod(&self, task: i64) {
        Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE)
            .delete(
                &format!("gitea-task-{task}"),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }

    /// Waits until the pod backend's consumer has no assignment delivered and not acked, nor
    /// one waiting: every start so far is acked, and the queue will redeliver none of them.
    pub async fn pod_assignments_acked(&self) {
        use tenantci_dispatch::queue::{Backend, STREAM};
        let js = async_nats::jetstream::new(self.nats.client("ci-admin").await);
        eventually("every pod assignment acked", || async {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
                .get_consumer_from_stream(Backend::Pod.consumer(), STREAM)
                .await
                .ok()?;
            let info = consumer.info().await.ok()?;
            (info.num_ack_pending == 0 && info.num_pending == 0).then_some(())
        })
        .await
    }

    /// Deletes every executor Pod and Secret, as a restored or wiped apiserver loses them.
    pub async fn lose_every_executor(&self) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let lp = ListParams::default();
        Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
        Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE)
            .delete_collection(&dp, &lp)
            .await
            .unwrap();
        self.all_cleaned_up().await;
    }

    /// Cancels `task` at the Gitea double, as a user cancelling the run.
    pub async fn cancel(&self, task: i64) {
        let resp = self
            .http
            .post(format!("{}/tasks/{task}/cancel", self.gitea.admin_url))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }

    /// Waits until every executor Pod and Secret is gone.
    pub async fn all_cleaned_up(&self) {
        eventually("executor Pods and Secrets to be deleted", || async {
            (self.pods().await.is_empty() && self.secrets().await.is_empty()).then_some(())
        })
        .await
    }

    /// Stores a marker on the `vm` subject as ci-producer and returns it. No dispatcher
    /// consumes `vm` (that backend does not exist yet), so the marker stays, and with it the
    /// stream's message block: nats-server drops the bytes of a block whose messages were all
    /// acked, and a search of the store for secrets must see the acked assignments' bytes.
    pub async fn pin_store(&self) -> String {
        let marker = format!("positive-control-{:016x}", rand::random::<u64>());
        let js = async_nats::jetstream::new(self.nats.client("ci-producer").await);
        js.publish(
            tenantci_dispatch::queue::Backend::Vm.subject(),
            marker.clone().into(),
        )
        .await
        .unwrap()
        .await
        .expect("the stream stores the marker");
        marker
    }

    /// Stops nats-server (SIGTERM: JetStream writes its store out) and returns every file
    /// of the store, to search for secrets in clear. Panics when there is none.
    pub fn stop_nats_and_read_store(&mut self) -> Vec<(PathBuf, Vec<u8>)> {
        self.nats.stop();
        let files: Vec<_> = util::snapshot(&self.nats.store_dir())
            .into_iter()
            .filter(|(p, _)| p.is_file())
            .collect();
        assert!(
            !files.is_empty(),
            "no files in the JetStream store {}",
            self.nats.store_dir().display()
        );
        files
    }
}

/// Whether any file of a store snapshot ([`World::stop_nats_and_read_store`]) holds `needle`.
pub fn store_contains(store: &[(PathBuf, Vec<u8>)], needle: &str) -> bool {
    store.iter().any(|(_, bytes)| {
        bytes
            .windows(needle.len())
            .any(|win| win == needle.as_bytes())
    })
}

/// Who makes the dispatcher's inputs.
enum MadeBy {
    /// The test, with the library (the pod capacity).
    Test(u32),
    /// `dispatch init --state-dir` (the gateway path).
    Init,
    /// `dispatch init --kubeconfig` (any cluster), no state dir.
    KubeconfigInit,
    /// `dispatch init --kubeconfig --apply-secret`, and the dispatcher run from the ConfigMap
    /// and Secret it applied, as the Deployment mounts them.
    InClusterObjects,
}

/// `admin` (a kubeconfig file) impersonating the dispatcher's ServiceAccount in `namespace`.
fn impersonating(admin: &Path, namespace: &str) -> String {
    let mut kc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let user = &mut kc["users"][0]["user"];
    user["as"] = format!("system:serviceaccount:{namespace}:tenantci-dispatcher").into();
    user["as-groups"] = serde_yaml::to_value([
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_string(),
    ])
    .unwrap();
    serde_yaml::to_string(&kc).unwrap()
}

/// Runs `tenantci dispatch init --state-dir` (registration token from a 0600 file) and loads
/// its config.
fn init(root: &Path, cfg_dir: &Path, state: &Path, gitea: &Gitea, nats: &NatsServer) -> Config {
    let flags = vec![
        "--state-dir".into(),
        state.into(),
        "--cluster".into(),
        "ci".into(),
    ];
    init_with(root, cfg_dir, flags, gitea, nats)
}

/// `--kubeconfig ADMIN`, no state dir, no cluster name (the kubeconfig's is used).
fn kubeconfig_flags(admin: &Path) -> Vec<std::ffi::OsString> {
    vec!["--kubeconfig".into(), admin.into()]
}

/// `dispatch init` with `cluster_flags` saying which cluster and how.
fn init_with(
    root: &Path,
    cfg_dir: &Path,
    cluster_flags: Vec<std::ffi::OsString>,
    gitea: &Gitea,
    nats: &NatsServer,
) -> Config {
    let token_file = root.join("registration-token");
    tenantci_core::fsutil::write_new_atomic(
        &token_file,
        gitea.registration_token.as_bytes(),
        0o600,
    )
    .unwrap();
    let out = cfg_dir.join("config.toml");
    let o = util::run(
        util::tenantci()
            .args([
                "dispatch",
                "init",
                "--gitea-url",
                &gitea.url,
                "--registration-token-file",
            ])
            .arg(&token_file)
            .args(cluster_flags)
            .args([
                "--namespace",
                NAMESPACE,
                "--nats",
                &nats.url,
                "--nats-secrets-dir",
            ])
            .arg(nats.secrets_dir())
            .args(["--facade-listen", "127.0.0.1:0"])
            .args([
                "--executor-image",
                &format!("gitea/act_runner@sha256:{}", "0".repeat(64)),
            ])
            .args(["--proxy-image", PROXY_IMAGE])
            .arg("--out")
            .arg(&out),
    );
    util::assert_exit(&o, 0);
    Config::load(&out).unwrap()
}

/// What `dispatch init` would write, made with the library so these tests exercise `run`.
async fn write_inputs(
    dir: &Path,
    gitea: &Gitea,
    nats: &NatsServer,
    kubeconfig: &Path,
    pod_capacity: u32,
) -> Config {
    use tenantci_dispatch::capability::{CapabilityKey, encode_key};
    let runner = RunnerClient::new(ClientConfig::new(&gitea.url))
        .unwrap()
        .register(&RegisterRequest {
            name: "tenantci-dispatch".into(),
            token: gitea.registration_token.clone(),
            // `vm` too, so a world `with_vm` gets vm jobs; a dispatcher without the VM
            // backend never sees one (no test enqueues a vm job there).
            labels: vec!["self-hosted".into(), "pod".into(), "vm".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let secret = |name: &str, text: &str| {
        tenantci_core::fsutil::write_new_atomic(&dir.join(name), text.as_bytes(), 0o600).unwrap();
    };
    secret(
        config::files::SCHEDULER_CREDENTIAL,
        &json!({"id": runner.id, "uuid": runner.uuid, "token": runner.token, "name": runner.name})
            .to_string(),
    );
    secret(
        config::files::CAPABILITY_KEY,
        &encode_key(&CapabilityKey::generate()),
    );
    tenantci_dispatch::queue::assignment::SealingKey::load_or_create(
        &dir.join(config::files::SEALING_KEY),
    )
    .unwrap();
    let ca =
        tenantci_core::pki::CertificateAuthority::generate("facade CA", Duration::from_secs(86400))
            .unwrap();
    let leaf = tenantci_core::pki::issue::server_cert(
        &ca,
        "facade",
        &["127.0.0.1".into()],
        Duration::from_secs(86400),
    )
    .unwrap();
    secret(config::files::FACADE_CA_CERT, ca.cert_pem());
    secret(config::files::FACADE_CERT, &leaf.cert_pem);
    secret(config::files::FACADE_KEY, &leaf.key_pem);
    Config {
        version: config::VERSION,
        gitea: tenantci_dispatch::claim::settings::Gitea {
            url: gitea.url.clone(),
            forge: Default::default(),
            runner_name: "tenantci-dispatch".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            credential_file: config::files::SCHEDULER_CREDENTIAL.into(),
            fetch_interval: Duration::from_millis(50).into(),
            fetch_interval_idle: Duration::from_secs(1).into(),
            keepalive_interval: Duration::from_secs(1).into(),
            ca_file: None,
        },
        cluster: config::Cluster {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            namespace: NAMESPACE.into(),
        },
        nats: config::Nats {
            url: nats.url.clone(),
            secrets_dir: nats.secrets_dir(),
            sealing_key_file: config::files::SEALING_KEY.into(),
            // Short, so an assignment a killed dispatcher held comes back soon.
            ack_wait: Duration::from_secs(2).into(),
            ca_file: None,
        },
        capacity: config::Capacity {
            pod: pod_capacity,
            vm: 1,
        },
        facade: tenantci_dispatch::facade::settings::Facade {
            listen: "127.0.0.1:0".parse().unwrap(),
            url: "https://127.0.0.1:0".into(),
            capability_key_file: config::files::CAPABILITY_KEY.into(),
            ca_cert_file: config::files::FACADE_CA_CERT.into(),
            cert_file: config::files::FACADE_CERT.into(),
            key_file: config::files::FACADE_KEY.into(),
        },
        executor: tenantci_dispatch::executor::Executor::with_images(
            format!("gitea/act_runner@sha256:{}", "0".repeat(64)),
            PROXY_IMAGE,
        ),
        status: config::Status::default(),
        leader: tenantci_dispatch::leader::Leader {
            lease_duration: Duration::from_secs(3).into(),
            renew_deadline: Duration::from_secs(2).into(),
            retry_period: Duration::from_millis(250).into(),
            identity: None,
        },
        webhook: None,
        waiting_jobs: None,
        claim: tenantci_dispatch::task::Claim::default(),
        vm: None,
        identity: None,
        cache: None,
    }
}

/// A `tenantci dispatch run` child process, after its listening line.
pub struct Dispatcher {
    pub name: String,
    process: Process,
    pub log: PathBuf,
    /// Where its facade listens, and the facade URL its executors are given.
    pub facade: SocketAddr,
    pub facade_url: String,
    status: SocketAddr,
    /// The metrics listener, when `status.metrics_listen` is configured.
    pub metrics_listener: Option<SocketAddr>,
    /// The webhook receiver, when configured.
    pub webhook: Option<SocketAddr>,
}

impl Dispatcher {
    async fn spawn(name: &str, config: &Path, log: &Path, env: &[(String, String)]) -> Dispatcher {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut process = Process::spawn(
            tenantci()
                .args(["dispatch", "run", "--config"])
                .arg(config)
                .env("RUST_LOG", "tenantci=debug")
                .envs(env.iter().map(|(k, v)| (k, v)))
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

/// Watches executor Pods for the whole test: the most alive at once, and how many distinct
/// Pods (by uid) each name had.
pub struct PodWatch {
    inner: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct WatchState {
    live: BTreeSet<String>,
    max_live: usize,
    /// Live Pods by their `tenantci.io/class`, and the most of each class live at once.
    live_of_class: BTreeMap<String, BTreeSet<String>>,
    max_live_of_class: BTreeMap<String, usize>,
    uids: BTreeMap<String, BTreeSet<String>>,
}

impl PodWatch {
    fn start(kube: kube::Client) -> PodWatch {
        let inner = Arc::new(Mutex::new(WatchState::default()));
        let state = inner.clone();
        let api = Api::<Pod>::namespaced(kube, NAMESPACE);
        let task = tokio::spawn(async move {
            // With backoff: once the simulator is gone, errors must not spin this task.
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut s = state.lock().unwrap();
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        s.uids
                            .entry(name.clone())
                            .or_default()
                            .insert(p.metadata.uid.clone().unwrap_or_default());
                        s.live.insert(name.clone());
                        s.max_live = s.max_live.max(s.live.len());
                        let labels = p.metadata.labels.as_ref();
                        if let Some(class) = labels.and_then(|l| l.get("tenantci.io/class")) {
                            let live = s.live_of_class.entry(class.clone()).or_default();
                            live.insert(name);
                            let n = live.len();
                            let max = s.max_live_of_class.entry(class.clone()).or_default();
                            *max = (*max).max(n);
                        }
                    }
                    watcher::Event::Delete(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        s.live.remove(&name);
                        for live in s.live_of_class.values_mut() {
                            live.remove(&name);
                        }
                    }
                    // A relist: the live set is rebuilt from the InitApply events that follow.
                    watcher::Event::Init => {
                        s.live.clear();
                        s.live_of_class.clear();
                    }
                    watcher::Event::InitDone => {}
                }
            }
        });
        PodWatch { inner, task }
    }

    pub fn max_live(&self) -> usize {
        self.inner.lock().unwrap().max_live
    }

    /// The most executor Pods of resource class `class` alive at once.
    pub fn max_live_of_class(&self, class: &str) -> usize {
        let s = self.inner.lock().unwrap();
        s.max_live_of_class.get(class).copied().unwrap_or(0)
    }

    /// Waits until no executor Pod is live, then counts the most live at once afresh.
    pub async fn reset_max_live_once_none_is_live(&self) {
        eventually("no executor Pod live", || async {
            let mut s = self.inner.lock().unwrap();
            s.live.is_empty().then(|| s.max_live = 0)
        })
        .await
    }

    /// Pods ever created per name.
    pub fn creations(&self) -> BTreeMap<String, usize> {
        self.inner
            .lock()
            .unwrap()
            .uids
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }
}
