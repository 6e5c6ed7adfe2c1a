//! The dispatcher's configuration file (`tenantci dispatch init --out CONFIG.toml` writes it,
//! `tenantci dispatch run --config CONFIG.toml` reads it). Schema in
//! docs/runbooks/gitea-dispatcher.md. The sections are the modules' own (`claim::settings`,
//! `facade::settings`, `sizing`, `leader`, `task`, `backend::vm`, `identity`, `cache`); this
//! module composes them, adds `[cluster]`, `[nats]`, `[capacity]` and `[status]`, and checks
//! the whole.
//!
//! The file holds no secret: it names the files that do (scheduler credential, capability
//! key, sealing key, facade key, NATS passwords), each 0600. Relative paths are relative to
//! the config file's directory, so a config directory can be moved as a whole.
//! Each key listed in [`OVERRIDE_KEYS`] can be overridden by an environment variable
//! `TENANTCI_DISPATCH_<SECTION>_<KEY>` (e.g. `TENANTCI_DISPATCH_NATS_URL`), so a Deployment
//! can change one value without a new ConfigMap.
//!
//! Invariant: a loaded [`Config`] is valid. Durations are parsed into [`GoDuration`]s while the
//! file is read, and [`Config::validate`] checks the rest, so `run` never meets a bad value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::catalog;
use crate::backend_kind::BackendKind;
use crate::claim::settings::{Gitea, WaitingJobs, Webhook};
use crate::facade::settings::Facade;
use crate::leader::Leader;
use crate::sizing::ExecutorSettings;
use crate::sizing::class::BackendOfClass;
use crate::task::Claim;
use tenantci_core::duration::GoDuration;
use tenantci_core::input::url_host;
use tenantci_core::{Error, Result};

/// The schema version this build writes and reads.
pub const VERSION: u32 = 1;

/// File names `init` uses beside the config (each 0600).
pub mod files {
    /// The scheduler's Gitea registration (`claim::registration`).
    pub const SCHEDULER_CREDENTIAL: &str = "scheduler.json";
    /// The HMAC key of the per-task capabilities.
    pub const CAPABILITY_KEY: &str = "capability.key";
    /// The key assignments are sealed with.
    pub const SEALING_KEY: &str = "sealing.key";
    /// The facade CA's certificate, which executors trust.
    pub const FACADE_CA_CERT: &str = "facade-ca.crt";
    /// The facade CA's key, which `renew` issues new facade certificates with.
    pub const FACADE_CA_KEY: &str = "facade-ca.key";
    /// The facade's serving certificate.
    pub const FACADE_CERT: &str = "facade.crt";
    /// The facade's serving key.
    pub const FACADE_KEY: &str = "facade.key";
    /// The dispatcher's own client credential (ca.crt, tls.crt, tls.key, kubeconfig).
    pub const KUBE_DIR: &str = "kube";
    /// The kubeconfig of that credential, which `cluster.kubeconfig` names.
    pub const KUBECONFIG: &str = "kube/kubeconfig";
}

/// The files `init` keeps beside the config, absolute. Serialized as part of `-o json`'s
/// `files` (docs/cli.md): the files themselves, not the directories.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paths {
    /// The config file.
    #[serde(skip)]
    pub config: PathBuf,
    /// Its directory, where the files below are.
    #[serde(skip)]
    pub dir: PathBuf,
    /// [`files::KUBE_DIR`].
    #[serde(skip)]
    pub kube_dir: PathBuf,
    /// [`files::SCHEDULER_CREDENTIAL`].
    #[serde(rename = "schedulerCredential")]
    pub scheduler: PathBuf,
    /// [`files::CAPABILITY_KEY`].
    pub capability_key: PathBuf,
    /// [`files::SEALING_KEY`].
    pub sealing_key: PathBuf,
    /// [`files::FACADE_CA_CERT`].
    pub facade_ca_cert: PathBuf,
    /// [`files::FACADE_CA_KEY`].
    pub facade_ca_key: PathBuf,
    /// [`files::FACADE_CERT`].
    pub facade_cert: PathBuf,
    /// [`files::FACADE_KEY`].
    pub facade_key: PathBuf,
}

impl Paths {
    /// The files in the directory of `config` (a parentless path: `/`).
    pub fn beside(config: &Path) -> Paths {
        let dir = config.parent().unwrap_or(Path::new("/")).to_path_buf();
        Paths {
            config: config.to_path_buf(),
            kube_dir: dir.join(files::KUBE_DIR),
            scheduler: dir.join(files::SCHEDULER_CREDENTIAL),
            capability_key: dir.join(files::CAPABILITY_KEY),
            sealing_key: dir.join(files::SEALING_KEY),
            facade_ca_cert: dir.join(files::FACADE_CA_CERT),
            facade_ca_key: dir.join(files::FACADE_CA_KEY),
            facade_cert: dir.join(files::FACADE_CERT),
            facade_key: dir.join(files::FACADE_KEY),
            dir,
        }
    }
}

/// The dispatcher's configuration; one that [`Config::load`] returned is valid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The schema version ([`VERSION`]).
    pub version: u32,
    /// The forge, the scheduler's registration, polling and keep-alive.
    pub gitea: Gitea,
    /// The tenant cluster and the executors' namespace.
    pub cluster: Cluster,
    /// The NATS server of the queue and the claim ledger.
    pub nats: Nats,
    /// Each backend's concurrent executors; absent: every backend's default.
    #[serde(default)]
    pub capacity: Capacity,
    /// The RunnerService executors call.
    pub facade: Facade,
    /// The executors' images, resources, placement and resource classes.
    pub executor: ExecutorSettings,
    /// The status API and the metrics listener; absent: loopback defaults.
    #[serde(default)]
    pub status: Status,
    /// The Lease election's timings and this instance's identity.
    #[serde(default)]
    pub leader: Leader,
    /// Gitea's `workflow_job` webhook as a nudge; absent: polling alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// Forgejo's waiting-jobs API as a nudge and a demand metric; absent: not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_jobs: Option<WaitingJobs>,
    /// The start deadline and the attempts per task.
    #[serde(default)]
    pub claim: Claim,
    /// The VM backend (OpenSandbox); absent: off, and `vm` is not registered at Gitea.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<crate::backend::vm::Vm>,
    /// Executor identity (SPIFFE mTLS at the facade); absent: the capability alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::identity::Identity>,
    /// The shared actions cache, per repository; absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::cache::settings::CacheSettings>,
    /// How long and how many finished tasks' histories are kept (the `CI_HISTORY` bucket);
    /// absent: a week, 10000 tasks.
    #[serde(
        default,
        skip_serializing_if = "crate::queue::history_bucket::HistorySettings::is_default"
    )]
    pub history: crate::queue::history_bucket::HistorySettings,
}

/// The `[cluster]` section: the tenant cluster as the dispatcher reaches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Kubeconfig of the dispatcher's own scoped credential; absent (or overridden with an
    /// empty `TENANTCI_DISPATCH_CLUSTER_KUBECONFIG`): in-cluster (ServiceAccount) or
    /// `KUBECONFIG`, as kube's `Config::infer` finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// Where the executors' objects live (the pod backend's Pods and Secrets, the warm pools).
    pub namespace: String,
    /// Where the dispatcher's own objects live: the leader Lease, and in the cluster its
    /// Deployment, ServiceAccount, ConfigMap and Secret (manifests/dispatch). Absent: the
    /// executors' `namespace`, as on a gateway host and in every config written before the
    /// key existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatcher_namespace: Option<String>,
    /// A watching backend's (the pod backend's) reconciler pass when no watch event, freed
    /// slot or start deadline woke it (the watches carry every change); absent: 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<GoDuration>,
}

impl Cluster {
    fn check(&self) -> std::result::Result<(), String> {
        if self.resync() < Duration::from_secs(1) {
            return Err(format!(
                "has cluster.resync = `{}` (at least 1s: the watches carry every change, the resync only backs them up)",
                self.resync.as_ref().map_or("", GoDuration::as_str)
            ));
        }
        Ok(())
    }

    /// The namespace of the leader Lease: `dispatcher_namespace`, or the executors'.
    pub fn dispatcher_namespace(&self) -> &str {
        self.dispatcher_namespace
            .as_deref()
            .unwrap_or(&self.namespace)
    }

    /// `resync`, or its default.
    pub fn resync(&self) -> Duration {
        self.resync
            .as_ref()
            .map_or(defaults::RESYNC, GoDuration::get)
    }
}

/// The `[nats]` section: the queue's server and the dispatcher's keys to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nats {
    /// The server's URL (`nats://` or `tls://`); several, comma-separated, for a cluster.
    pub url: String,
    /// The `<user>.password` files of `tenantci queue nats-config` (ci-admin is optional: with
    /// it, `run` applies the topology with this config's capacities at start).
    pub secrets_dir: PathBuf,
    /// The 256-bit key assignments are sealed with (0600; created by `init`).
    pub sealing_key_file: PathBuf,
    /// Redelivery of an assignment a crashed worker held, when `run` applies the topology.
    #[serde(default = "defaults::ack_wait")]
    pub ack_wait: GoDuration,
    /// PEM CA certificate(s) the NATS server's TLS certificate must chain to (a private CA
    /// for `tls://`); absent: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// `[capacity]`: each backend's concurrent executors, keyed by its name (`pod = 4`, `vm = 1`).
/// A backend it does not name runs at its registered default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Capacity(BTreeMap<BackendKind, u32>);

impl Default for Capacity {
    /// Every backend's default, except an opt-in backend's (which a capacity turns on).
    fn default() -> Self {
        Capacity(
            catalog::all()
                .filter(|f| !f.opt_in)
                .map(|f| (f.kind, f.default_capacity))
                .collect(),
        )
    }
}

impl Capacity {
    /// `backend`'s capacity: as set, else its default (0: no such backend in this build).
    pub fn of(&self, backend: BackendKind) -> u32 {
        self.0
            .get(&backend)
            .copied()
            .or_else(|| catalog::facts(backend).map(|f| f.default_capacity))
            .unwrap_or(0)
    }

    /// Sets `backend`'s capacity.
    pub fn set(&mut self, backend: BackendKind, n: u32) {
        self.0.insert(backend, n);
    }

    /// What the file sets, by backend (an opt-in backend is on when it is here).
    pub fn explicit(&self) -> &BTreeMap<BackendKind, u32> {
        &self.0
    }

    /// Every capacity names a backend of this build and is at least 1.
    fn validate(&self) -> std::result::Result<(), String> {
        for (backend, n) in &self.0 {
            if catalog::facts(*backend).is_none() {
                return Err(format!(
                    "has capacity.{backend}, which is not a backend of this build (expected {})",
                    catalog::named_for_a_sentence()
                ));
            }
            if *n == 0 {
                return Err(format!("has capacity.{backend} = 0 (at least 1)"));
            }
        }
        Ok(())
    }
}

/// The `[status]` section: where the status API and the metrics are served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// Loopback address of the status API: /healthz, /readyz, /metrics, /v1/status and the
    /// page.
    #[serde(default = "defaults::status_listen")]
    pub listen: SocketAddr,
    /// A second listener serving /metrics only, for a scraper outside the Pod or host (e.g.
    /// `0.0.0.0:9465` in the cluster); absent: /metrics on the status API only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// The opt-in a non-loopback `metrics_listen` needs: whoever reaches that address reads
    /// the metrics (task counts, queue depth, certificate expiry; never a secret).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expose_metrics: bool,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            listen: defaults::status_listen(),
            metrics_listen: None,
            expose_metrics: false,
        }
    }
}

/// The schema's defaults (`init` uses them for keys it has no flag for).
pub(crate) mod defaults {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::GoDuration;

    pub const RESYNC: Duration = Duration::from_secs(300);

    pub fn ack_wait() -> GoDuration {
        Duration::from_secs(30).into()
    }
    pub fn status_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9464))
    }
}

/// The dotted keys an environment variable may override, each variable named by its key
/// ([`override_var`]).
pub const OVERRIDE_KEYS: &[&str] = &[
    "gitea.url",
    "gitea.forge",
    "gitea.runner_name",
    "gitea.labels",
    "gitea.credential_file",
    "gitea.fetch_interval",
    "gitea.fetch_interval_idle",
    "gitea.keepalive_interval",
    "gitea.ca_file",
    "cluster.kubeconfig",
    "cluster.namespace",
    "cluster.dispatcher_namespace",
    "cluster.resync",
    "nats.url",
    "nats.secrets_dir",
    "nats.sealing_key_file",
    "nats.ack_wait",
    "nats.ca_file",
    "capacity.pod",
    "capacity.vm",
    "facade.listen",
    "facade.url",
    "facade.capability_key_file",
    "facade.ca_cert_file",
    "facade.cert_file",
    "facade.key_file",
    "executor.image",
    "executor.proxy_image",
    "executor.runner_command",
    "executor.shutdown_timeout",
    "executor.runtime_class_name",
    "executor.image_pull_secrets",
    "status.listen",
    "status.metrics_listen",
    "status.expose_metrics",
    "leader.lease_duration",
    "leader.renew_deadline",
    "leader.retry_period",
    "leader.identity",
    "webhook.listen",
    "webhook.secret_file",
    "webhook.fetch_interval",
    "webhook.nudge_spacing",
    "webhook.nudge_burst",
    "webhook.header_read_timeout",
    "claim.start_deadline",
    "claim.max_attempts",
    "waiting_jobs.scope",
    "waiting_jobs.token_file",
    "waiting_jobs.interval",
    // The one key of `[vm]` that differs where the dispatcher runs: the Deployment projects
    // the key from its Secret (manifests/components/vm); the rest of `[vm]` is file only.
    "vm.api_key_file",
    "cache.dir",
    "cache.s3_bucket",
    "cache.s3_endpoint",
    "cache.s3_region",
    "cache.s3_credentials_file",
    "cache.s3_direct_downloads",
    "cache.max_size_mib",
    "cache.max_entry_size_mib",
    "cache.max_age",
    "cache.grant_lifetime",
    "history.max_age",
    "history.max_tasks",
];

/// The variable that overrides the dotted `key`: `TENANTCI_DISPATCH_` and the key upper-cased,
/// its dot an underscore (`nats.ack_wait` -> `TENANTCI_DISPATCH_NATS_ACK_WAIT`).
pub fn override_var(key: &str) -> String {
    format!("TENANTCI_DISPATCH_{}", key.replace('.', "_").to_uppercase())
}

/// Every override: its variable and the key it sets.
pub fn overrides() -> impl Iterator<Item = (String, &'static str)> {
    OVERRIDE_KEYS.iter().map(|key| (override_var(key), *key))
}

/// The TOML value of an override: integers and comma-separated lists where the schema has
/// them, strings elsewhere. A malformed number names the variable.
fn override_value(var: &str, key: &str, raw: &str) -> std::result::Result<toml_edit::Item, String> {
    Ok(match key {
        "capacity.pod"
        | "capacity.vm"
        | "claim.max_attempts"
        | "webhook.nudge_burst"
        | "cache.max_size_mib"
        | "cache.max_entry_size_mib"
        | "history.max_tasks" => {
            let n: i64 = raw.trim().parse().map_err(|_| {
                format!("has {var} = `{raw}` in the environment, which is not a whole number")
            })?;
            toml_edit::value(n)
        }
        "status.expose_metrics" | "cache.s3_direct_downloads" => match raw.trim() {
            "true" => toml_edit::value(true),
            "false" => toml_edit::value(false),
            _ => {
                return Err(format!(
                    "has {var} = `{raw}` in the environment, which is not true or false"
                ));
            }
        },
        "gitea.labels" | "executor.image_pull_secrets" => {
            let mut arr = toml_edit::Array::new();
            for l in raw.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                arr.push(l);
            }
            toml_edit::value(arr)
        }
        _ => toml_edit::value(raw),
    })
}

/// Applies `env` (name -> value) overrides to a parsed document.
fn apply_overrides(
    doc: &mut toml_edit::DocumentMut,
    env: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<(), String> {
    for (var, key) in overrides() {
        let Some(raw) = env(&var) else { continue };
        let (section, field) = key.split_once('.').expect("dotted key");
        if !doc.contains_table(section) {
            doc[section] = toml_edit::table();
        }
        // An empty kubeconfig override means "none": in a Pod the ServiceAccount is used
        // (manifests/dispatch/deployment.yaml), whatever file the host's config names.
        if key == "cluster.kubeconfig" && raw.is_empty() {
            if let Some(t) = doc[section].as_table_mut() {
                t.remove(field);
            }
            continue;
        }
        doc[section][field] = override_value(&var, key, &raw)?;
    }
    Ok(())
}

impl Config {
    /// The queue topology this config asks for: its capacities, ack_wait and history bounds
    /// over `queue init`'s defaults (`dispatch run` keeps what `queue init` chose on top,
    /// `topology::keeping_init_choices`).
    pub fn topology_spec(&self) -> crate::queue::topology::TopologySpec {
        crate::queue::topology::TopologySpec {
            capacities: catalog::kinds()
                .into_iter()
                .map(|b| (b, self.capacity.of(b)))
                .collect(),
            ack_wait: self.nats.ack_wait.get(),
            history: self.history.clone(),
            ..crate::queue::topology::TopologySpec::default()
        }
    }

    /// Reads `path`, applies the environment overrides, resolves relative paths against the
    /// file's directory and validates. Errors name the file, the key and the fix (exit 2).
    pub fn load(path: &Path) -> Result<Config> {
        Self::load_with_env(path, &|k| std::env::var(k).ok())
    }

    /// [`Config::load`], with the overrides read through `env` instead of the process's
    /// environment.
    pub fn load_with_env(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let text = tenantci_core::input::read_text(
            "the dispatcher config",
            path,
            tenantci_core::input::MAX_CONFIG,
        )?;
        let cfg = Self::parse(&text, path, env)?;
        Ok(cfg.resolved(path.parent().unwrap_or(Path::new("."))))
    }

    fn parse(text: &str, path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let bad = |what: String| {
            Error::bad_input(format!("the dispatcher config {} {what}", path.display()))
                .hint("fix the file (schema: docs/runbooks/gitea-dispatcher.md) or re-run `tenantci dispatch init`")
        };
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
            bad(format!("is not valid TOML: {}", e.message()))
        })?;
        apply_overrides(&mut doc, env).map_err(bad)?;
        let cfg: Config = serde_path_to_error::deserialize(toml_edit::de::Deserializer::from(doc))
            .map_err(|e| bad(schema_error(&e)))?;
        if cfg.version != VERSION {
            return Err(bad(format!(
                "has version {}; this build reads version {VERSION}",
                cfg.version
            )));
        }
        cfg.validate().map_err(bad)?;
        Ok(cfg)
    }

    /// Checks every value that `run` would otherwise trip over later, section by section.
    pub fn validate(&self) -> std::result::Result<(), String> {
        url_ok("gitea.url", &self.gitea.url, &["http", "https"])?;
        url_ok("facade.url", &self.facade.url, &["https"])?;
        for one in self.nats.url.split(',') {
            url_ok("nats.url", one.trim(), &["nats", "tls"])?;
        }
        self.validate_gitea()?;
        self.validate_cluster()?;
        self.validate_claiming()?;
        self.validate_executor()?;
        self.validate_status()?;
        self.history.validate()?;
        self.leader_timing()
            .validate()
            .map_err(|e| format!("has leader timings where {e}"))?;
        self.validate_extensions()
    }

    /// `[gitea]`: the registration's name and labels, and a keep-alive Gitea does not outrun.
    fn validate_gitea(&self) -> std::result::Result<(), String> {
        if self.gitea.runner_name.trim().is_empty() {
            return Err("has an empty gitea.runner_name".into());
        }
        if self.gitea.runner_name.len() > MAX_NAME {
            return Err(format!(
                "has a gitea.runner_name of {} bytes, `{}` (at most {MAX_NAME}, Gitea's limit)",
                self.gitea.runner_name.len(),
                tenantci_core::input::shown(&self.gitea.runner_name)
            ));
        }
        if self.gitea.labels.is_empty() {
            return Err("has no gitea.labels (e.g. [\"self-hosted\", \"pod\"])".into());
        }
        if let Some(l) = self.gitea.labels.iter().find(|l| l.len() > MAX_NAME) {
            return Err(format!(
                "has a gitea.labels entry of {} bytes, `{}` (at most {MAX_NAME})",
                l.len(),
                tenantci_core::input::shown(l)
            ));
        }
        if self.gitea.keepalive_interval.get() >= Duration::from_secs(600) {
            return Err("has gitea.keepalive_interval of 10m or more; Gitea fails tasks not updated for 10 minutes".into());
        }
        Ok(())
    }

    /// `[cluster]` and `[capacity]`.
    fn validate_cluster(&self) -> std::result::Result<(), String> {
        let namespaces = [
            ("namespace", Some(&self.cluster.namespace)),
            (
                "dispatcher_namespace",
                self.cluster.dispatcher_namespace.as_ref(),
            ),
        ];
        for (key, value) in namespaces {
            if let Some(v) = value.filter(|v| !tenantci_core::dns::is_label(v)) {
                return Err(format!(
                    "has cluster.{key} = `{}`, which is not a DNS label (lower-case letters, digits and `-`, at most 63)",
                    tenantci_core::input::shown(v)
                ));
            }
        }
        self.cluster.check()?;
        self.capacity.validate()
    }

    /// What wakes and bounds claiming: `[webhook]`, `[waiting_jobs]` (Forgejo only), `[claim]`.
    fn validate_claiming(&self) -> std::result::Result<(), String> {
        if let Some(w) = &self.webhook {
            w.validate()?;
        }
        if let Some(w) = &self.waiting_jobs {
            w.scope()
                .map_err(|e| format!("has waiting_jobs.scope: {e}"))?;
            if !self.gitea.forge.lists_waiting_jobs() {
                return Err(format!(
                    "has [waiting_jobs] with gitea.forge = {}; only Forgejo lists waiting jobs there: remove [waiting_jobs] (a webhook nudges instead) or set gitea.forge = \"forgejo\"",
                    self.gitea.forge
                ));
            }
            if w.interval.get().is_zero() {
                return Err("has waiting_jobs.interval = 0 (at least 1s)".into());
            }
        }
        if self.claim.max_attempts == 0 {
            return Err("has claim.max_attempts = 0 (at least 1: no replacement)".into());
        }
        Ok(())
    }

    /// `[executor]`: pinned images, resources, and the names the Pod spec carries.
    fn validate_executor(&self) -> std::result::Result<(), String> {
        crate::task::spec::check_image_digest(&self.executor.image)
            .map_err(|e| format!("has executor.image: {}", e.message()))?;
        crate::task::spec::check_image_digest(&self.executor.proxy_image)
            .map_err(|e| format!("has executor.proxy_image: {}", e.message()))?;
        self.executor.resources.validate()?;
        if let Some(rc) = &self.executor.runtime_class_name
            && !tenantci_core::dns::is_subdomain(rc)
        {
            return Err(format!(
                "has executor.runtime_class_name = `{rc}`, which is not a DNS subdomain"
            ));
        }
        if let Some(bad) = self
            .executor
            .image_pull_secrets
            .iter()
            .find(|n| !tenantci_core::dns::is_subdomain(n))
        {
            return Err(format!(
                "has executor.image_pull_secrets entry `{}`, which is not a Secret name (a DNS subdomain)",
                tenantci_core::input::shown(bad)
            ));
        }
        Ok(())
    }

    /// `[status]`: the status API on loopback; metrics elsewhere only when said so.
    fn validate_status(&self) -> std::result::Result<(), String> {
        if !self.status.listen.ip().is_loopback() {
            return Err(format!(
                "has status.listen = {}; the status API serves on loopback only",
                self.status.listen
            ));
        }
        if let Some(m) = self.status.metrics_listen
            && !m.ip().is_loopback()
            && !self.status.expose_metrics
        {
            return Err(format!(
                "has status.metrics_listen = {m}, which is not loopback, without status.expose_metrics = true; set it (TENANTCI_DISPATCH_STATUS_EXPOSE_METRICS=true) to let whoever reaches {m} read /metrics, or listen on 127.0.0.1"
            ));
        }
        Ok(())
    }

    /// Whether this config turns `backend` on: an opt-in backend when `[capacity]` names it,
    /// a backend with a section of its own when the section is there (`[vm]`), any other
    /// always.
    pub fn runs(&self, backend: BackendKind) -> bool {
        let Some(facts) = catalog::facts(backend) else {
            return false;
        };
        if facts.opt_in {
            return self.capacity.explicit().contains_key(&backend);
        }
        match facts.section {
            Some("vm") => self.vm.is_some(),
            Some(_) => false,
            None => true,
        }
    }

    /// The optional sections and what they need of each other: `[vm]`, the resource
    /// classes, `[cache]`, `[identity]`.
    fn validate_extensions(&self) -> std::result::Result<(), String> {
        if let Some(vm) = &self.vm {
            vm.validate()?;
        }
        crate::sizing::class::validate(&self.executor.classes, &self.executor.resources, |b| {
            let kind = b.unwrap_or_else(catalog::default_kind);
            let facts = catalog::facts(kind).ok_or_else(|| {
                    format!(
                        "has an executor.class on the backend `{kind}`, which this build does not have (expected {})",
                        catalog::named_for_a_sentence()
                    )
                })?;
            Ok(BackendOfClass {
                facts,
                capacity: self.runs(kind).then(|| self.capacity.of(kind)),
            })
        })?;
        if let Some(cache) = &self.cache {
            cache.validate()?;
        }
        if let Some(identity) = &self.identity {
            identity.validate()?;
            if self.vm.is_some() && identity.server_address.is_none() {
                return Err("has [identity] and [vm] but no identity.server_address; VM executors run no SPIRE agent, so the dispatcher mints their SVIDs at the SPIRE Server API (set it to HOST:PORT, e.g. spire-server.spire:8081)".into());
            }
        }
        Ok(())
    }

    /// Every relative path made absolute against `base` (the config's directory).
    pub(crate) fn resolved(mut self, base: &Path) -> Config {
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        abs(&mut self.gitea.credential_file);
        if let Some(ca) = self.gitea.ca_file.as_mut() {
            abs(ca);
        }
        if let Some(k) = self.cluster.kubeconfig.as_mut() {
            abs(k);
        }
        abs(&mut self.nats.secrets_dir);
        abs(&mut self.nats.sealing_key_file);
        if let Some(ca) = self.nats.ca_file.as_mut() {
            abs(ca);
        }
        abs(&mut self.facade.capability_key_file);
        abs(&mut self.facade.ca_cert_file);
        abs(&mut self.facade.cert_file);
        abs(&mut self.facade.key_file);
        if let Some(w) = self.webhook.as_mut() {
            abs(&mut w.secret_file);
        }
        if let Some(vm) = self.vm.as_mut() {
            abs(&mut vm.api_key_file);
        }
        if let Some(w) = self.waiting_jobs.as_mut() {
            abs(&mut w.token_file);
        }
        if let Some(c) = self.cache.as_mut() {
            c.dir.as_mut().map(abs);
            c.s3_credentials_file.as_mut().map(abs);
        }
        self
    }

    /// The labels registered at Gitea: `gitea.labels` and every class label.
    pub fn declared_labels(&self) -> Vec<String> {
        crate::sizing::class::declared_labels(&self.gitea.labels, &self.executor.classes)
    }

    /// The `[leader]` timings as durations.
    pub fn leader_timing(&self) -> crate::leader::Timing {
        crate::leader::Timing {
            lease_duration: self.leader.lease_duration.get(),
            renew_deadline: self.leader.renew_deadline.get(),
            retry_period: self.leader.retry_period.get(),
        }
    }

    /// The config as `init` writes it: TOML with a header comment.
    pub fn to_toml(&self) -> String {
        let body = toml_edit::ser::to_string_pretty(self).expect("the config serializes");
        format!(
            "# tenantci dispatcher configuration, written by `tenantci dispatch init`.\n\
             # Schema: docs/runbooks/gitea-dispatcher.md. No secrets here: the files named below\n\
             # hold them (0600). Override any key with TENANTCI_DISPATCH_<SECTION>_<KEY>.\n\n{body}"
        )
    }
}

/// What the schema refused, at its dotted key (`... at gitea.fetch_interval: `1d` has an
/// unknown unit ...`).
fn schema_error(e: &serde_path_to_error::Error<toml_edit::de::Error>) -> String {
    let path = e.path().to_string();
    let why = e.inner().message();
    if path == "." {
        format!("does not match the schema: {why}")
    } else {
        format!("does not match the schema at {path}: {why}")
    }
}

fn url_ok(key: &str, value: &str, schemes: &[&str]) -> std::result::Result<(), String> {
    match url_host(value, schemes) {
        Some(_) if value.len() <= MAX_URL => Ok(()),
        _ => Err(format!(
            "has {key} = `{}`, which is not a {} URL with a host",
            tenantci_core::input::shown(value),
            schemes.join("/")
        )),
    }
}

/// Longest runner name or label: Gitea stores them in VARCHAR(255) columns.
const MAX_NAME: usize = 255;

/// Longest URL a config value may hold (browsers and proxies stop near here too).
const MAX_URL: usize = 2048;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn sample() -> Config {
        Config {
            version: VERSION,
            gitea: Gitea {
                url: "https://gitea.example.com".into(),
                forge: Default::default(),
                runner_name: "tenantci-dispatch".into(),
                labels: vec!["self-hosted".into(), "pod".into(), "vm".into()],
                credential_file: files::SCHEDULER_CREDENTIAL.into(),
                fetch_interval: crate::claim::settings::defaults::fetch_interval(),
                fetch_interval_idle: crate::claim::settings::defaults::fetch_interval_idle(),
                keepalive_interval: crate::claim::settings::defaults::keepalive_interval(),
                ca_file: Some("/etc/tenantci/gitea-ca.crt".into()),
            },
            cluster: Cluster {
                kubeconfig: Some(files::KUBECONFIG.into()),
                namespace: "dynamic-runner".into(),
                dispatcher_namespace: None,
                resync: None,
            },
            nats: Nats {
                url: "nats://127.0.0.1:4222".into(),
                secrets_dir: "nats".into(),
                sealing_key_file: files::SEALING_KEY.into(),
                ack_wait: defaults::ack_wait(),
                ca_file: None,
            },
            capacity: Capacity::default(),
            facade: Facade {
                listen: "127.0.0.1:8443".parse().unwrap(),
                url: "https://127.0.0.1:8443".into(),
                capability_key_file: files::CAPABILITY_KEY.into(),
                ca_cert_file: files::FACADE_CA_CERT.into(),
                cert_file: files::FACADE_CERT.into(),
                key_file: files::FACADE_KEY.into(),
            },
            executor: ExecutorSettings::with_images(
                format!("gitea/act_runner@sha256:{}", "a".repeat(64)),
                format!("tenantci@sha256:{}", "c".repeat(64)),
            ),
            status: Status::default(),
            leader: Leader::default(),
            webhook: None,
            waiting_jobs: None,
            claim: Claim::default(),
            vm: None,
            identity: None,
            cache: Some(crate::cache::settings::CacheSettings {
                max_size_mib: 4096,
                ..crate::cache::settings::CacheSettings::in_dir("cache")
            }),
            history: crate::queue::history_bucket::HistorySettings {
                max_age: Some("48h".parse().unwrap()),
                max_tasks: Some(500),
            },
        }
    }

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<Config> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(text, Path::new("/etc/d/config.toml"), &|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn written_config_reads_back() {
        let cfg = sample();
        assert_eq!(parse(&cfg.to_toml(), &[]).unwrap(), cfg);
    }

    #[test]
    fn relative_paths_resolve_against_the_config_dir() {
        let cfg = sample().resolved(Path::new("/etc/d"));
        assert_eq!(
            cfg.gitea.credential_file,
            Path::new("/etc/d/scheduler.json")
        );
        assert_eq!(cfg.nats.secrets_dir, Path::new("/etc/d/nats"));
    }

    #[test]
    fn environment_overrides_win() {
        let cfg = parse(
            &sample().to_toml(),
            &[
                ("TENANTCI_DISPATCH_NATS_URL", "nats://10.0.0.9:4222"),
                ("TENANTCI_DISPATCH_CAPACITY_POD", "9"),
                ("TENANTCI_DISPATCH_GITEA_LABELS", "a, b"),
            ],
        )
        .unwrap();
        assert_eq!(cfg.nats.url, "nats://10.0.0.9:4222");
        assert_eq!(cfg.capacity.of(BackendKind::new("pod")), 9);
        assert_eq!(cfg.gitea.labels, ["a", "b"]);
        let in_pod = parse(
            &sample().to_toml(),
            &[("TENANTCI_DISPATCH_CLUSTER_KUBECONFIG", "")],
        )
        .unwrap();
        assert_eq!(in_pod.cluster.kubeconfig, None, "empty: the ServiceAccount");
    }

    /// A config written before `cluster.dispatcher_namespace` existed keeps its Lease where it
    /// was (the executors' namespace) and is written back without the key; the key, or its
    /// variable (the Deployment sets it from the Pod's namespace), moves only the Lease.
    #[test]
    fn the_dispatcher_namespace_defaults_to_the_executors_and_is_checked() {
        let old = parse(&sample().to_toml(), &[]).unwrap();
        assert_eq!(old.cluster.dispatcher_namespace, None);
        assert_eq!(old.cluster.dispatcher_namespace(), "dynamic-runner");
        assert!(!old.to_toml().contains("dispatcher_namespace"));
        let var = "TENANTCI_DISPATCH_CLUSTER_DISPATCHER_NAMESPACE";
        let moved = parse(&sample().to_toml(), &[(var, "tenantci-system")]).unwrap();
        assert_eq!(moved.cluster.dispatcher_namespace(), "tenantci-system");
        assert_eq!(moved.cluster.namespace, "dynamic-runner");
        assert_eq!(parse(&moved.to_toml(), &[]).unwrap(), moved);
        let e = parse(&sample().to_toml(), &[(var, "Tenantci_System")]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message().contains(
                "has cluster.dispatcher_namespace = `Tenantci_System`, which is not a DNS label"
            ),
            "{}",
            e.message()
        );
    }

    #[test]
    fn executor_placement_and_resources_are_written_as_the_runbook_shows() {
        let text = format!(
            "{}\n[executor.resources]\ncpu = \"1500m\"\nmemory = \"1Gi\"\nephemeral_storage = \"4Gi\"\n\
             ephemeral_storage_limit = \"6Gi\"\n\n[executor.node_selector]\n\"socialweb.computer/pool\" = \"ci\"\n\n\
             [[executor.tolerations]]\nkey = \"rented\"\noperator = \"Exists\"\neffect = \"NoSchedule\"\n",
            {
                let mut doc: toml_edit::DocumentMut = sample().to_toml().parse().unwrap();
                doc["executor"].as_table_mut().unwrap().remove("resources");
                doc.to_string()
            }
        );
        let cfg = parse(&text, &[]).unwrap();
        let x = &cfg.executor;
        assert_eq!(x.resources.cpu, "1500m");
        assert_eq!(x.resources.ephemeral_storage_limit(), "6Gi");
        assert_eq!(x.node_selector["socialweb.computer/pool"], "ci");
        assert_eq!(x.tolerations[0].operator.as_deref(), Some("Exists"));
        assert_eq!(
            parse(&cfg.to_toml(), &[]).unwrap(),
            cfg,
            "written back as read"
        );
        let low = text.replace("\"6Gi\"", "\"1Gi\"");
        assert!(
            parse(&low, &[])
                .unwrap_err()
                .message()
                .contains("ephemeral_storage_limit")
        );
    }

    #[test]
    fn executor_classes_are_written_as_the_runbook_shows() {
        let text = format!(
            "{}\n[[executor.class]]\nname = \"small\"\nlabel = \"small\"\ncpu = \"500m\"\nmemory = \"512Mi\"\ncapacity = 3\n\n\
             [[executor.class]]\nname = \"large\"\nlabel = \"large\"\ncpu = \"1800m\"\nmemory = \"1536Mi\"\n\
             ephemeral_storage = \"8Gi\"\ncapacity = 1\nruntime_class_name = \"gvisor\"\n\n\
             [executor.class.node_selector]\n\"socialweb.computer/pool\" = \"large\"\n",
            sample().to_toml()
        );
        let cfg = parse(&text, &[]).unwrap();
        let c = &cfg.executor.classes;
        assert_eq!((c[0].name.as_str(), c[0].capacity), ("small", 3));
        assert_eq!(c[0].backend, None, "the default backend");
        assert_eq!(
            c[1].node_selector.as_ref().unwrap()["socialweb.computer/pool"],
            "large"
        );
        assert_eq!(c[1].runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(
            parse(&cfg.to_toml(), &[]).unwrap(),
            cfg,
            "written back as read"
        );
        assert_eq!(
            cfg.declared_labels(),
            ["self-hosted", "pod", "vm", "small", "large"]
        );
        let e = parse(&text.replace("capacity = 3", "capacity = 9"), &[]).unwrap_err();
        assert!(
            e.message().contains("capacity = 9 above capacity.pod = 4"),
            "{}",
            e.message()
        );
        let e = parse(&text.replace("label = \"large\"", "label = \"small\""), &[]).unwrap_err();
        assert!(e.message().contains("label `small`"), "{}", e.message());
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let text = sample().to_toml();
        for (var, value, needle) in [
            ("TENANTCI_DISPATCH_CAPACITY_POD", "0", "capacity.pod"),
            (
                "TENANTCI_DISPATCH_CLUSTER_RESYNC",
                "500ms",
                "cluster.resync",
            ),
            (
                "TENANTCI_DISPATCH_CAPACITY_POD",
                "many",
                "TENANTCI_DISPATCH_CAPACITY_POD",
            ),
            (
                "TENANTCI_DISPATCH_EXECUTOR_IMAGE",
                "act_runner:latest",
                "executor.image",
            ),
            (
                "TENANTCI_DISPATCH_EXECUTOR_PROXY_IMAGE",
                "tenantci:latest",
                "executor.proxy_image",
            ),
            (
                "TENANTCI_DISPATCH_EXECUTOR_RUNNER_COMMAND",
                "runner",
                "at executor.runner_command",
            ),
            ("TENANTCI_DISPATCH_FACADE_URL", "http://x:1", "facade.url"),
            (
                "TENANTCI_DISPATCH_STATUS_LISTEN",
                "0.0.0.0:9464",
                "loopback",
            ),
            (
                "TENANTCI_DISPATCH_STATUS_METRICS_LISTEN",
                "0.0.0.0:9465",
                "has status.metrics_listen = 0.0.0.0:9465, which is not loopback, without status.expose_metrics = true",
            ),
            (
                "TENANTCI_DISPATCH_STATUS_EXPOSE_METRICS",
                "yes",
                "TENANTCI_DISPATCH_STATUS_EXPOSE_METRICS",
            ),
            (
                "TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL",
                "11m",
                "10 minutes",
            ),
            ("TENANTCI_DISPATCH_LEADER_RENEW_DEADLINE", "20s", "leader"),
            (
                "TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL",
                "1d",
                "at gitea.fetch_interval: `1d` has an unknown unit `d`",
            ),
            (
                "TENANTCI_DISPATCH_LEADER_RETRY_PERIOD",
                "0s",
                "at leader.retry_period: `0s` is zero",
            ),
        ] {
            let err = parse(&text, &[(var, value)]).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.message().contains(needle), "{var}: {}", err.message());
        }
        let in_file = text.replace("ack_wait = \"30s\"", "ack_wait = \"30\"");
        let err = parse(&in_file, &[]).unwrap_err();
        assert!(
            err.message().contains("at nats.ack_wait: `30` has no unit"),
            "{}",
            err.message()
        );
        assert!(parse("version = 1\n[nonsense]\n", &[]).is_err());
        assert!(
            parse("not toml [", &[])
                .unwrap_err()
                .message()
                .contains("TOML")
        );
    }

    #[test]
    fn the_identity_section_reads_back_and_needs_the_spire_server_with_the_vm_backend() {
        let mut cfg = sample();
        cfg.identity = Some(crate::identity::settings::tests::identity());
        let text = cfg.to_toml();
        assert!(text.contains("[identity]"), "{text}");
        assert_eq!(parse(&text, &[]).unwrap(), cfg);
        assert!(
            !sample().to_toml().contains("[identity]"),
            "absent: not written"
        );
        let bad = text.replace("source = \"workload-api\"", "source = \"sds\"");
        let e = parse(&bad, &[]).unwrap_err();
        assert!(e.message().contains("identity.source"), "{}", e.message());
        cfg.vm = Some(crate::backend::vm::Vm {
            opensandbox_url: "https://sandbox.example".into(),
            api_key_file: "/k".into(),
            image: None,
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: crate::backend::vm::settings::defaults::timeout(),
        });
        let e = parse(&cfg.to_toml(), &[]).unwrap_err();
        assert!(
            e.message().contains("identity.server_address"),
            "{}",
            e.message()
        );
        if let Some(i) = cfg.identity.as_mut() {
            i.server_address = Some("spire-server.spire:8081".into());
        }
        let text = cfg.to_toml();
        assert!(
            text.contains("server_address = \"spire-server.spire:8081\""),
            "{text}"
        );
        assert_eq!(parse(&text, &[]).unwrap(), cfg);
    }

    #[test]
    fn durations_keep_the_operators_spelling() {
        let text = sample()
            .to_toml()
            .replace("ack_wait = \"30s\"", "ack_wait = \"90s\"");
        let cfg = parse(&text, &[]).unwrap();
        assert_eq!(cfg.nats.ack_wait.get(), Duration::from_secs(90));
        assert_eq!(cfg.to_toml(), text, "written back as read");
        assert_eq!(
            crate::claim::settings::defaults::fetch_interval().as_str(),
            "200ms"
        );
        assert_eq!(
            crate::claim::settings::defaults::keepalive_interval().as_str(),
            "1m"
        );
    }

    /// Every key set, none at its default, so an override that sets nothing is seen.
    fn tuned() -> Config {
        let mut cfg = sample();
        cfg.gitea.forge = tenantci_core::forge::Forge::Forgejo;
        cfg.gitea.fetch_interval = Duration::from_millis(300).into();
        cfg.gitea.fetch_interval_idle = Duration::from_secs(3).into();
        cfg.gitea.keepalive_interval = Duration::from_secs(120).into();
        cfg.nats.ack_wait = Duration::from_secs(45).into();
        cfg.cluster.resync = Some(Duration::from_secs(600).into());
        cfg.cluster.dispatcher_namespace = Some("tenantci-system".into());
        cfg.capacity.set(BackendKind::new("pod"), 5);
        cfg.capacity.set(BackendKind::new("vm"), 2);
        cfg.executor.runner_command = crate::sizing::RunnerCommand::GiteaRunner;
        cfg.executor.shutdown_timeout = Duration::from_secs(90).into();
        cfg.executor.runtime_class_name = Some("gvisor".into());
        cfg.executor.image_pull_secrets = vec!["registry".into(), "mirror".into()];
        cfg.status.listen = "127.0.0.1:9999".parse().unwrap();
        cfg.status.metrics_listen = Some("0.0.0.0:9465".parse().unwrap());
        cfg.nats.ca_file = Some("/etc/tenantci/nats/ca.crt".into());
        cfg.status.expose_metrics = true;
        cfg.leader = Leader {
            lease_duration: Duration::from_secs(20).into(),
            renew_deadline: Duration::from_secs(12).into(),
            retry_period: Duration::from_secs(3).into(),
            identity: Some("me".into()),
        };
        cfg.webhook = Some(Webhook {
            listen: "127.0.0.1:9000".parse().unwrap(),
            secret_file: "webhook.secret".into(),
            fetch_interval: Duration::from_secs(7).into(),
            nudge_spacing: Duration::from_millis(300).into(),
            nudge_burst: 2,
            header_read_timeout: Duration::from_secs(30).into(),
        });
        cfg.claim = Claim {
            start_deadline: Duration::from_secs(100).into(),
            max_attempts: 5,
        };
        cfg.waiting_jobs = Some(WaitingJobs {
            scope: "orgs/acme".into(),
            token_file: "forgejo-api.token".into(),
            interval: Duration::from_secs(9).into(),
        });
        cfg
    }

    #[test]
    fn waiting_jobs_need_forgejo_and_a_scope_forgejo_knows() {
        let mut cfg = tuned();
        let bad = |cfg: &Config| {
            parse(&cfg.to_toml(), &[])
                .unwrap_err()
                .message()
                .to_string()
        };
        cfg.gitea.forge = tenantci_core::forge::Forge::Gitea;
        assert!(
            bad(&cfg).contains("only Forgejo lists waiting jobs"),
            "{}",
            bad(&cfg)
        );
        cfg.gitea.forge = tenantci_core::forge::Forge::Forgejo;
        cfg.waiting_jobs.as_mut().unwrap().scope = "orgs/../admin".into();
        assert!(bad(&cfg).contains("waiting_jobs.scope"), "{}", bad(&cfg));
        let ok = parse(&tuned().to_toml(), &[]).unwrap();
        let resolved = ok.resolved(Path::new("/etc/d"));
        assert_eq!(
            resolved.waiting_jobs.unwrap().token_file,
            Path::new("/etc/d/forgejo-api.token")
        );
    }

    /// The dotted keys of every value of the schema (all of `tuned`'s leaves but `version`).
    /// Nested tables (`executor.resources`, `executor.node_selector`, `executor.tolerations`)
    /// are set in the file only.
    /// [`tuned`] with the cache in an S3 bucket instead of a directory: the keys one config
    /// cannot hold together.
    fn tuned_s3() -> Config {
        let mut cfg = tuned();
        cfg.cache = Some(crate::cache::settings::CacheSettings {
            dir: None,
            s3_bucket: Some("ci-cache".into()),
            s3_endpoint: Some("http://10.0.0.7:9000".into()),
            s3_region: Some("eu-central-1".into()),
            s3_credentials_file: Some("/etc/tenantci/s3.credentials".into()),
            s3_direct_downloads: true,
            max_entry_size_mib: 256,
            max_age: Duration::from_secs(86400).into(),
            ..crate::cache::settings::CacheSettings::in_dir("unused")
        });
        cfg
    }

    /// `section.key` of every value `cfg` writes.
    fn keys_of(cfg: &Config) -> Vec<String> {
        let doc: toml_edit::DocumentMut = cfg.to_toml().parse().unwrap();
        let mut keys = Vec::new();
        for (section, item) in doc.iter() {
            for (key, value) in item.as_table().into_iter().flat_map(|t| t.iter()) {
                if value.is_value() && !value.is_inline_table() {
                    keys.push(format!("{section}.{key}"));
                }
            }
        }
        keys
    }

    fn schema_keys() -> Vec<String> {
        let mut keys = keys_of(&tuned());
        keys.extend(keys_of(&tuned_s3()));
        keys.sort();
        keys.dedup();
        keys
    }

    /// A TOML value as an operator writes it in the environment.
    fn as_env(value: &toml_edit::Value) -> String {
        match value {
            toml_edit::Value::String(s) => s.value().clone(),
            toml_edit::Value::Array(a) => a.iter().map(as_env).collect::<Vec<_>>().join(","),
            other => other.to_string().trim().to_string(),
        }
    }

    #[test]
    fn the_vm_api_key_file_is_overridden_only_with_its_section() {
        let mut cfg = tuned();
        cfg.vm = Some(crate::backend::vm::settings::Vm {
            opensandbox_url: "https://sandbox.example".into(),
            api_key_file: "/host/opensandbox.key".into(),
            image: None,
            cpu: "2".into(),
            memory: "4Gi".into(),
            timeout: crate::backend::vm::settings::defaults::timeout(),
        });
        let var = "TENANTCI_DISPATCH_VM_API_KEY_FILE";
        let got = parse(
            &cfg.to_toml(),
            &[(var, "/etc/tenantci/dispatch/opensandbox-api.key")],
        )
        .unwrap();
        assert_eq!(
            got.vm.unwrap().api_key_file,
            Path::new("/etc/tenantci/dispatch/opensandbox-api.key")
        );
        // Without `[vm]`, the variable alone is no VM backend: refused naming the section.
        let e = parse(&tuned().to_toml(), &[(var, "/k")]).unwrap_err();
        assert!(e.message().contains("vm"), "{}", e.message());
    }

    #[test]
    fn every_key_has_an_override_and_every_override_sets_its_key() {
        // `[vm]` is absent from `tuned` (its other keys are file only): its one override has
        // a test of its own.
        let mut keys: Vec<&str> = OVERRIDE_KEYS
            .iter()
            .copied()
            .filter(|k| !k.starts_with("vm."))
            .collect();
        keys.sort();
        let mut schema = schema_keys();
        schema.sort();
        assert_eq!(keys, schema, "OVERRIDES against the schema");
        for (var, key) in overrides().filter(|(_, k)| !k.starts_with("vm.")) {
            let want = if keys_of(&tuned()).iter().any(|k| k == key) {
                tuned()
            } else {
                tuned_s3()
            };
            let (section, field) = key.split_once('.').unwrap();
            assert_eq!(
                var,
                format!("TENANTCI_DISPATCH_{section}_{field}").to_uppercase(),
                "the variable's name follows the key"
            );
            let mut doc: toml_edit::DocumentMut = want.to_toml().parse().unwrap();
            let value = as_env(doc[section][field].as_value().unwrap());
            doc[section].as_table_mut().unwrap().remove(field);
            let got = parse(&doc.to_string(), &[(&var, &value)])
                .unwrap_or_else(|e| panic!("{var}={value}: {}", e.message()));
            assert_eq!(got, want, "{var}={value} sets {key}");
        }
    }

    #[test]
    fn the_runbooks_config_table_lists_the_same_overrides() {
        const RUNBOOK: &str = include_str!("../../../docs/runbooks/gitea-dispatcher.md");
        // The first `code` span of a cell.
        let tick = |cell: &str| {
            let rest = cell.trim().strip_prefix('`')?;
            Some(rest[..rest.find('`')?].to_string())
        };
        let mut documented: Vec<(String, String)> = RUNBOOK
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').collect();
                let key = tick(cells.get(1)?)?;
                let var = tick(cells.get(3)?)?;
                var.starts_with("TENANTCI_DISPATCH_").then_some((var, key))
            })
            .collect();
        documented.sort();
        let mut table: Vec<(String, String)> =
            overrides().map(|(v, k)| (v, k.to_string())).collect();
        table.sort();
        assert_eq!(documented, table);
    }

    #[test]
    fn override_variables_follow_their_keys() {
        let table: Vec<(String, &str)> = overrides().collect();
        assert_eq!(table.len(), 63);
        for pair in [
            ("TENANTCI_DISPATCH_GITEA_URL", "gitea.url"),
            (
                "TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL_IDLE",
                "gitea.fetch_interval_idle",
            ),
            ("TENANTCI_DISPATCH_CLUSTER_KUBECONFIG", "cluster.kubeconfig"),
            ("TENANTCI_DISPATCH_NATS_URL", "nats.url"),
            ("TENANTCI_DISPATCH_WAITING_JOBS_SCOPE", "waiting_jobs.scope"),
            ("TENANTCI_DISPATCH_VM_API_KEY_FILE", "vm.api_key_file"),
            (
                "TENANTCI_DISPATCH_CACHE_S3_DIRECT_DOWNLOADS",
                "cache.s3_direct_downloads",
            ),
            (
                "TENANTCI_DISPATCH_CACHE_GRANT_LIFETIME",
                "cache.grant_lifetime",
            ),
            ("TENANTCI_DISPATCH_HISTORY_MAX_TASKS", "history.max_tasks"),
        ] {
            assert!(
                table.iter().any(|(v, k)| (v.as_str(), *k) == pair),
                "{pair:?}"
            );
        }
        let mut vars: Vec<&str> = table.iter().map(|(v, _)| v.as_str()).collect();
        vars.sort();
        vars.dedup();
        assert_eq!(vars.len(), table.len(), "one variable per key");
    }
}
