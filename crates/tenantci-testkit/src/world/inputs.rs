//! The dispatcher's inputs in a [`World`]: made with the library (as `dispatch init` would
//! write them, with short timings, so tests exercise `run`) or by `tenantci dispatch init`
//! itself. Either way they become the config every dispatcher starts from.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;
use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::client::{ClientConfig, RunnerClient};
use tenantci_core::forge::gitea::proto::RegisterRequest;
use tenantci_dispatch::config::{self, Config};

use super::{CLUSTER, EXECUTOR_IMAGE, NAMESPACE, PROXY_IMAGE, World};
use crate::nats::NatsServer;
use crate::sim::Gitea;

impl World {
    /// The config dispatchers started from now on are written from; panics before the
    /// inputs are made.
    pub fn base(&self) -> &Config {
        self.base
            .as_ref()
            .expect("the dispatcher's inputs are made")
    }

    /// [`World::base`], to change.
    pub fn base_mut(&mut self) -> &mut Config {
        self.base
            .as_mut()
            .expect("the dispatcher's inputs are made")
    }

    /// Replaces the config dispatchers start from (one a test loaded another way).
    pub fn set_base(&mut self, cfg: Config) {
        self.base = Some(cfg);
    }

    /// Makes the inputs with the library: the namespace, registration, keys and facade PKI,
    /// short timings, the tenant-admin kubeconfig, `pod_capacity` pods at once.
    pub async fn write_inputs(&mut self, pod_capacity: u32) {
        let ns = json!({"metadata": {"name": NAMESPACE}});
        Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .unwrap();
        let dir = self.dir.path().join("dispatch");
        let mut base = write_inputs(&dir, &self.gitea, &self.nats, &self.tenant_admin).await;
        base.capacity
            .set(tenantci_dispatch::backend::pod::KIND, pod_capacity);
        if self.forgejo {
            base.gitea.forge = Forge::Forgejo;
        }
        self.base = Some(base);
    }

    /// Runs `tenantci dispatch init --state-dir` for cluster `ci` with `flags` (images,
    /// backends, identity: whatever the caller's run differs in); loads what it wrote as the
    /// base config and returns the file (`dispatch/config.toml`).
    pub fn init<S: AsRef<std::ffi::OsStr>>(&mut self, flags: &[S]) -> PathBuf {
        let cluster: Vec<OsString> = vec![
            "--cluster".into(),
            CLUSTER.into(),
            "--state-dir".into(),
            self.state_dir().into(),
        ];
        self.init_with(cluster, flags)
    }

    /// As [`World::init`] with `--kubeconfig` (the tenant-admin one) instead of a state dir,
    /// the path for any cluster: the config names no kubeconfig.
    pub fn init_with_kubeconfig<S: AsRef<std::ffi::OsStr>>(&mut self, flags: &[S]) -> PathBuf {
        let cluster = vec!["--kubeconfig".into(), self.tenant_admin.clone().into()];
        self.init_with(cluster, flags)
    }

    /// The flags of the tests' `dispatch init`: namespace [`NAMESPACE`], the fixed images.
    pub fn test_init_flags() -> Vec<OsString> {
        ["--namespace", NAMESPACE, "--executor-image", EXECUTOR_IMAGE]
            .into_iter()
            .chain(["--proxy-image", PROXY_IMAGE])
            .map(OsString::from)
            .collect()
    }

    fn init_with<S: AsRef<std::ffi::OsStr>>(
        &mut self,
        cluster: Vec<OsString>,
        flags: &[S],
    ) -> PathBuf {
        let mut all = cluster;
        all.extend(flags.iter().map(|f| f.as_ref().to_os_string()));
        let out = crate::dispatch::init_command(
            self.command(),
            self.dir.path(),
            &self.gitea,
            &self.nats,
            &all,
        );
        self.base = Some(Config::load(&out).unwrap());
        out
    }
}

/// Registers the dispatcher at the Gitea double and writes its credential, keys and facade
/// PKI into `dir`, as `dispatch init` would; the config naming them.
async fn write_inputs(dir: &Path, gitea: &Gitea, nats: &NatsServer, kubeconfig: &Path) -> Config {
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
    let day = Duration::from_secs(86400);
    let ca = tenantci_core::pki::CertificateAuthority::generate("facade CA", day).unwrap();
    let leaf =
        tenantci_core::pki::issue::server_cert(&ca, "facade", &["127.0.0.1".into()], day).unwrap();
    secret(config::files::FACADE_CA_CERT, ca.cert_pem());
    secret(config::files::FACADE_CERT, &leaf.cert_pem);
    secret(config::files::FACADE_KEY, &leaf.key_pem);
    base_config(gitea, nats, kubeconfig)
}

/// The config of [`write_inputs`]: short timings, so a killed dispatcher's work comes back
/// soon; capacity 1 for each backend until the caller says otherwise.
fn base_config(gitea: &Gitea, nats: &NatsServer, kubeconfig: &Path) -> Config {
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
            dispatcher_namespace: None,
            resync: None,
        },
        nats: config::Nats {
            url: nats.url.clone(),
            secrets_dir: nats.secrets_dir(),
            sealing_key_file: config::files::SEALING_KEY.into(),
            // Short, so an assignment a killed dispatcher held comes back soon.
            ack_wait: Duration::from_secs(2).into(),
            ca_file: None,
        },
        capacity: {
            let mut c = config::Capacity::default();
            c.set(tenantci_dispatch::backend::pod::KIND, 1);
            c.set(tenantci_dispatch::backend::vm::KIND, 1);
            c
        },
        facade: tenantci_dispatch::facade::settings::Facade {
            listen: "127.0.0.1:0".parse().unwrap(),
            url: "https://127.0.0.1:0".into(),
            capability_key_file: config::files::CAPABILITY_KEY.into(),
            ca_cert_file: config::files::FACADE_CA_CERT.into(),
            cert_file: config::files::FACADE_CERT.into(),
            key_file: config::files::FACADE_KEY.into(),
        },
        executor: tenantci_dispatch::sizing::ExecutorSettings::with_images(
            EXECUTOR_IMAGE,
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
        history: Default::default(),
    }
}
