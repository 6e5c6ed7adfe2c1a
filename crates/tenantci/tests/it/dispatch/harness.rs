//! A dispatcher under test: the simulator with its Gitea double, a real nats-server with the
//! generated users, `tenantci dispatch run` as a child process (killable with SIGKILL), and
//! an executor played by the test through the facade using only the executor Secret's files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use tenantci_app::dispatch::config::{self, Config};
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, LogRow, RegisterRequest, Task, TaskResult, TaskState, UpdateLogRequest,
    UpdateTaskRequest,
};

use crate::sim::harness::{DEADLINE, SimProcess, kube_client};
use crate::util::{self, scratch};
use crate::util_nats::NatsServer;

pub const NAMESPACE: &str = "dynamic-runner";

/// Polls `f` until it yields Some; a deadlock guard, not a timing assertion.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Everything one test's dispatchers share.
pub struct World {
    /// First, so it stops before the simulator does.
    pub watch: PodWatch,
    pub dir: tempfile::TempDir,
    /// Kept for its lifetime: the simulator stops when the world is dropped.
    _sim: SimProcess,
    pub nats: NatsServer,
    pub admin_url: String,
    pub kube: kube::Client,
    http: reqwest::Client,
    /// The config every dispatcher starts from (facade and status ports differ per instance).
    base: Config,
}

impl World {
    /// A world whose dispatcher inputs are made by the test with the library (namespace,
    /// registration, keys, facade PKI), with short timings; the dispatcher uses the
    /// tenant-admin kubeconfig.
    pub async fn start(pod_capacity: u32) -> World {
        Self::build(Some(pod_capacity)).await
    }

    /// A world whose dispatcher inputs come from `tenantci dispatch init` (its scoped
    /// credential, RBAC, registration, keys and facade PKI), with init's default timings.
    pub async fn start_via_init() -> World {
        Self::build(None).await
    }

    async fn build(manual: Option<u32>) -> World {
        let dir = scratch();
        let state = dir.path().join("state");
        let sim = SimProcess::start_with(&state, &["ci"], &["--gitea"]);
        let gitea: Value =
            serde_json::from_slice(&std::fs::read(state.join("gitea.json")).unwrap()).unwrap();
        let gitea_url = gitea["url"].as_str().unwrap().to_string();
        let admin_url = gitea["adminUrl"].as_str().unwrap().to_string();
        let token = gitea["registrationToken"].as_str().unwrap();
        let nats = NatsServer::start();
        let kubeconfig = sim.tenant_admin("ci");
        let kube = kube_client(&kubeconfig).await;
        let cfg_dir = dir.path().join("dispatch");
        std::fs::create_dir_all(&cfg_dir).unwrap();
        let base = match manual {
            Some(pod_capacity) => {
                Api::<Namespace>::all(kube.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
                    )
                    .await
                    .unwrap();
                write_inputs(
                    &cfg_dir,
                    &gitea_url,
                    token,
                    &nats,
                    &kubeconfig,
                    pod_capacity,
                )
                .await
            }
            None => init(dir.path(), &cfg_dir, &state, &gitea_url, token, &nats),
        };
        let watch = PodWatch::start(kube.clone());
        World {
            dir,
            _sim: sim,
            nats,
            admin_url,
            kube,
            watch,
            http: reqwest::Client::new(),
            base,
        }
    }

    /// Starts a dispatcher instance named `name` (its own facade and status ports, kept
    /// when the same name is started again, as a restarted Pod keeps its Service).
    pub fn dispatcher(&self, name: &str) -> Dispatcher {
        let path = self
            .dir
            .path()
            .join("dispatch")
            .join(format!("{name}.toml"));
        if !path.exists() {
            let mut cfg = self.base.clone();
            let facade = free_port();
            cfg.facade.listen = format!("127.0.0.1:{facade}").parse().unwrap();
            cfg.facade.url = format!("https://127.0.0.1:{facade}");
            cfg.status.listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            cfg.leader.identity = Some(name.to_string());
            std::fs::write(&path, cfg.to_toml()).unwrap();
        }
        let status = Config::load(&path).unwrap().status.listen;
        // TENANTCI_TEST_LOG_DIR keeps the dispatcher logs after the test (for debugging).
        let log_dir = std::env::var_os("TENANTCI_TEST_LOG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.path().to_path_buf());
        Dispatcher::spawn(name, &path, &log_dir.join(format!("{name}.log")), status)
    }

    /// Enqueues a job at the Gitea double; returns the job id.
    pub async fn enqueue(&self, name: &str, secret: &str) -> i64 {
        let body = json!({
            "name": name,
            "runs_on": ["self-hosted", "pod"],
            "workflow_payload": format!("name: {name}\njobs:\n  build:\n    runs-on: [self-hosted, pod]\n    steps:\n      - run: echo hi\n"),
            "secrets": {"DEPLOY_KEY": secret},
        });
        let resp: Value = self
            .http
            .post(format!("{}/jobs", self.admin_url))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        resp["job_id"].as_i64().unwrap()
    }

    /// GET `<adminUrl>/<path>` as JSON.
    async fn admin(&self, path: &str) -> Value {
        let resp = self
            .http
            .get(format!("{}/{path}", self.admin_url))
            .send()
            .await
            .unwrap();
        resp.json().await.unwrap()
    }

    pub async fn job(&self, id: i64) -> Value {
        self.admin(&format!("jobs/{id}")).await
    }

    pub async fn task(&self, id: i64) -> Value {
        self.admin(&format!("tasks/{id}")).await
    }

    /// The task id of a job once it is claimed.
    pub async fn claimed(&self, job: i64) -> i64 {
        eventually("the job to be claimed", || async {
            self.job(job).await["task_id"].as_i64()
        })
        .await
    }

    pub async fn secrets(&self) -> Vec<Secret> {
        Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE)
            .list(&Default::default())
            .await
            .unwrap()
            .items
    }

    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.kube.clone(), NAMESPACE)
            .list(&Default::default())
            .await
            .unwrap()
            .items
    }

    /// Waits until the executor Secret of `task` exists, then returns an executor for it.
    pub async fn executor(&self, task: i64) -> Executor {
        let api = Api::<Secret>::namespaced(self.kube.clone(), NAMESPACE);
        let secret = eventually("the executor Secret", || async {
            api.get_opt(&format!("gitea-task-{task}")).await.unwrap()
        })
        .await;
        Executor::from_secret(&secret)
    }

    /// Waits until every executor Pod and Secret is gone.
    pub async fn all_cleaned_up(&self) {
        eventually("executor Pods and Secrets to be deleted", || async {
            (self.pods().await.is_empty() && self.secrets().await.is_empty()).then_some(())
        })
        .await
    }

    /// Every file under the JetStream store, as bytes (to search for secrets in clear).
    pub fn jetstream_store(&self) -> Vec<u8> {
        let mut out = Vec::new();
        collect_files(&self.nats.store_dir(), &mut out);
        out
    }
}

fn collect_files(dir: &Path, out: &mut Vec<u8>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(&p, out);
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.extend(bytes);
        }
    }
}

/// Runs `tenantci dispatch init` (registration token from a 0600 file) and loads its config.
fn init(
    root: &Path,
    cfg_dir: &Path,
    state: &Path,
    gitea_url: &str,
    token: &str,
    nats: &NatsServer,
) -> Config {
    let token_file = root.join("registration-token");
    tenantci_core::fsutil::write_new_atomic(&token_file, token.as_bytes(), 0o600).unwrap();
    let out = cfg_dir.join("config.toml");
    let o = util::run(
        util::tenantci()
            .args([
                "dispatch",
                "init",
                "--gitea-url",
                gitea_url,
                "--registration-token-file",
            ])
            .arg(&token_file)
            .arg("--state-dir")
            .arg(state)
            .args([
                "--cluster",
                "ci",
                "--namespace",
                NAMESPACE,
                "--nats",
                &nats.url,
                "--nats-secrets-dir",
            ])
            .arg(nats.secrets_dir())
            .args(["--facade-listen", &format!("127.0.0.1:{}", free_port())])
            .args([
                "--executor-image",
                &format!("gitea/act_runner@sha256:{}", "0".repeat(64)),
            ])
            .arg("--out")
            .arg(&out),
    );
    util::assert_exit(&o, 0);
    Config::load(&out).unwrap()
}

/// What `dispatch init` would write, made with the library so these tests exercise `run`.
async fn write_inputs(
    dir: &Path,
    gitea_url: &str,
    registration_token: &str,
    nats: &NatsServer,
    kubeconfig: &Path,
    pod_capacity: u32,
) -> Config {
    use tenantci_app::dispatch::capability::{CapabilityKey, encode_key};
    let runner = RunnerClient::new(ClientConfig::new(gitea_url))
        .unwrap()
        .register(&RegisterRequest {
            name: "tenantci-dispatch".into(),
            token: registration_token.into(),
            labels: vec!["self-hosted".into(), "pod".into()],
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
    tenantci_app::queue::assignment::SealingKey::load_or_create(
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
        gitea: config::Gitea {
            url: gitea_url.into(),
            runner_name: "tenantci-dispatch".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            credential_file: config::files::SCHEDULER_CREDENTIAL.into(),
            fetch_interval: Duration::from_millis(50).into(),
            fetch_interval_idle: Duration::from_secs(1).into(),
            keepalive_interval: Duration::from_secs(1).into(),
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
        },
        capacity: config::Capacity {
            pod: pod_capacity,
            vm: 1,
        },
        facade: config::Facade {
            listen: "127.0.0.1:0".parse().unwrap(),
            url: "https://127.0.0.1:0".into(),
            capability_key_file: config::files::CAPABILITY_KEY.into(),
            ca_cert_file: config::files::FACADE_CA_CERT.into(),
            cert_file: config::files::FACADE_CERT.into(),
            key_file: config::files::FACADE_KEY.into(),
        },
        executor: config::Executor {
            image: format!("gitea/act_runner@sha256:{}", "0".repeat(64)),
        },
        status: config::Status::default(),
        leader: config::Leader {
            lease_duration: Duration::from_secs(3).into(),
            renew_deadline: Duration::from_secs(2).into(),
            retry_period: Duration::from_millis(250).into(),
            identity: None,
        },
    }
}

/// A `tenantci dispatch run` child process.
pub struct Dispatcher {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
    status: std::net::SocketAddr,
}

impl Dispatcher {
    fn spawn(name: &str, config: &Path, log: &Path, status: std::net::SocketAddr) -> Dispatcher {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = util::tenantci()
            .args(["dispatch", "run", "--config"])
            .arg(config)
            .env("RUST_LOG", "tenantci=debug")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn tenantci dispatch run");
        Dispatcher {
            name: name.into(),
            child: Some(child),
            log: log.to_path_buf(),
            status,
        }
    }

    pub async fn metrics(&self) -> Option<String> {
        let r = reqwest::get(format!("http://{}/metrics", self.status))
            .await
            .ok()?;
        r.text().await.ok()
    }

    /// A metric's value (first sample whose line starts with `name`).
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.metrics().await?;
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
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

    /// SIGKILL: no drain, no lease release.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        c.wait().ok()?.code()
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

/// The official runner's part, played from the executor Secret's files only.
pub struct Executor {
    pub uuid: String,
    pub token: String,
    pub address: String,
    pub ca_pem: String,
}

impl Executor {
    pub fn from_secret(secret: &Secret) -> Executor {
        let data = secret.data.as_ref().unwrap();
        let runner: tenantci_app::runner::gitea_files::Registration =
            serde_json::from_slice(&data[".runner"].0).unwrap();
        Executor {
            uuid: runner.uuid,
            token: runner.token.expose().to_string(),
            address: runner.address,
            ca_pem: String::from_utf8(data["ca.crt"].0.clone()).unwrap(),
        }
    }

    /// A client for the facade with these credentials (or forged ones).
    pub fn client(&self, uuid: &str, token: &str) -> RunnerClient {
        let mut cfg = ClientConfig::new(&self.address);
        cfg.ca_pem = Some(self.ca_pem.clone());
        cfg.request_timeout = Duration::from_secs(10);
        cfg.retry.initial_backoff = Duration::from_millis(50);
        RunnerClient::new(cfg)
            .unwrap()
            .with_credentials(Credentials {
                uuid: uuid.into(),
                token: token.into(),
            })
    }

    pub fn own(&self) -> RunnerClient {
        self.client(&self.uuid, &self.token)
    }

    /// Declare, then FetchTask until the task arrives (the facade may be restarting).
    pub async fn fetch(&self) -> Task {
        let c = self.own();
        eventually("the facade to hand out the task", || async {
            c.declare(&DeclareRequest {
                version: "v0.2.11".into(),
                labels: vec!["pod".into()],
                ..Default::default()
            })
            .await
            .ok()?;
            c.fetch_task(0).await.ok()?.task
        })
        .await
    }

    /// Logs one line and reports SUCCESS (retrying while the facade is away).
    pub async fn finish(&self, task: i64, line: &str) {
        let c = self.own();
        eventually(
            "the facade to accept the log and the final state",
            || async {
                c.update_log(&UpdateLogRequest {
                    task_id: task,
                    index: 0,
                    rows: vec![LogRow {
                        time: None,
                        content: line.into(),
                    }],
                    no_more: true,
                })
                .await
                .ok()?;
                c.update_task(&UpdateTaskRequest {
                    state: Some(TaskState {
                        id: task,
                        result: TaskResult::Success as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await
                .ok()
            },
        )
        .await;
    }

    /// The whole run of one task: fetch it, check it, log, succeed.
    pub async fn run(&self, task: i64) -> Task {
        let t = self.fetch().await;
        assert_eq!(t.id, task, "the facade hands out the caller's own task");
        self.finish(task, &format!("ran task {task}")).await;
        t
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
                        s.live.insert(name);
                        s.max_live = s.max_live.max(s.live.len());
                    }
                    watcher::Event::Delete(p) => {
                        s.live.remove(&p.metadata.name.clone().unwrap_or_default());
                    }
                    // A relist: the live set is rebuilt from the InitApply events that follow.
                    watcher::Event::Init => s.live.clear(),
                    watcher::Event::InitDone => {}
                }
            }
        });
        PodWatch { inner, task }
    }

    pub fn max_live(&self) -> usize {
        self.inner.lock().unwrap().max_live
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
