//! The dispatcher's configuration file (`tenantci dispatch init --out CONFIG.toml` writes it,
//! `tenantci dispatch run --config CONFIG.toml` reads it). Schema in docs/runbooks/gitea-dispatcher.md.
//!
//! The file holds no secret: it names the files that do (scheduler credential, capability
//! key, sealing key, facade key, NATS passwords), each 0600. Relative paths are relative to
//! the config file's directory, so a config directory can be moved as a whole.
//! Every value can be overridden by an environment variable `TENANTCI_DISPATCH_<SECTION>_<KEY>`
//! (e.g. `TENANTCI_DISPATCH_NATS_URL`), listed in [`OVERRIDES`], so a Deployment can change one
//! value without a new ConfigMap.
//!
//! Invariant: a loaded [`Config`] is valid. Durations are parsed into [`GoDuration`]s while the
//! file is read, and [`Config::validate`] checks the rest, so `run` never meets a bad value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use k8s_openapi::api::core::v1::Toleration;

pub use crate::backend::pod::resources::Resources;
use crate::queue::Backend;
use crate::run::leader::Timing;
use tenantci_core::duration::{self, DurationError};
use tenantci_core::{Error, Result};

/// The schema version this build writes and reads.
pub const VERSION: u32 = 1;

/// A positive Go-style duration (`"200ms"`, `"1m30s"`), parsed when the config is read and
/// written back as it was spelled, so a re-run of `init` leaves an operator's edit byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDuration {
    value: Duration,
    text: String,
}

impl GoDuration {
    pub fn get(&self) -> Duration {
        self.value
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Spelled by [`duration::format`]; for durations the program chooses (defaults, tests), which
/// are positive.
impl From<Duration> for GoDuration {
    fn from(value: Duration) -> Self {
        GoDuration {
            value,
            text: duration::format(value),
        }
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> std::result::Result<Self, DurationError> {
        Ok(GoDuration {
            value: duration::parse_positive(text)?,
            text: text.to_string(),
        })
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The error names the value; [`Config::parse`] adds the key.
impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e| serde::de::Error::custom(format!("`{text}` {e}")))
    }
}

/// File names `init` uses beside the config (each 0600).
pub mod files {
    pub const SCHEDULER_CREDENTIAL: &str = "scheduler.json";
    pub const CAPABILITY_KEY: &str = "capability.key";
    pub const SEALING_KEY: &str = "sealing.key";
    pub const FACADE_CA_CERT: &str = "facade-ca.crt";
    pub const FACADE_CA_KEY: &str = "facade-ca.key";
    pub const FACADE_CERT: &str = "facade.crt";
    pub const FACADE_KEY: &str = "facade.key";
    /// The dispatcher's own client credential (ca.crt, tls.crt, tls.key, kubeconfig).
    pub const KUBE_DIR: &str = "kube";
    pub const KUBECONFIG: &str = "kube/kubeconfig";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub version: u32,
    pub gitea: Gitea,
    pub cluster: Cluster,
    pub nats: Nats,
    #[serde(default)]
    pub capacity: Capacity,
    pub facade: Facade,
    pub executor: Executor,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub leader: Leader,
    /// Gitea's `workflow_job` webhook as a nudge; absent: polling alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// Forgejo's waiting-jobs API as a nudge and a demand metric; absent: not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_jobs: Option<WaitingJobs>,
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
    pub cache: Option<crate::cache::settings::Cache>,
}

/// What happens to a claimed task whose executor never fetches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// How long an executor may take from creation to its first FetchTask before it is
    /// replaced by a new attempt (image pull stuck, crash loop, sandbox never boots).
    #[serde(default = "defaults::start_deadline")]
    pub start_deadline: GoDuration,
    /// Attempts before the task is reported as FAILURE (1: no replacement).
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
}

impl Default for Claim {
    fn default() -> Self {
        Claim {
            start_deadline: defaults::start_deadline(),
            max_attempts: defaults::max_attempts(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gitea {
    /// Gitea's base URL (the RunnerService is under `<url>/api/actions`).
    pub url: String,
    /// The forge at `url`: `gitea` or `forgejo` (`init` reads it from the version API, or
    /// takes `--forge`). It decides what one FetchTask asks for (`forge::kind`).
    #[serde(default)]
    pub forge: tenantci_core::forge::Forge,
    /// The registration's name at Gitea (also the executors' runner name).
    pub runner_name: String,
    /// Labels registered at Gitea; a task's runs-on picks the backend (`vm` -> vm, else pod).
    pub labels: Vec<String>,
    /// `{id, uuid, token, name}` of the registration, 0600 (written by `init`).
    pub credential_file: PathBuf,
    /// FetchTask interval while a slot is free and Gitea had nothing (Go duration).
    #[serde(default = "defaults::fetch_interval")]
    pub fetch_interval: GoDuration,
    /// Longest FetchTask interval after a long idle spell.
    #[serde(default = "defaults::fetch_interval_idle")]
    pub fetch_interval_idle: GoDuration,
    /// Non-final UpdateTask for claimed tasks no executor has fetched yet (Gitea fails tasks
    /// not updated for 10 minutes).
    #[serde(default = "defaults::keepalive_interval")]
    pub keepalive_interval: GoDuration,
    /// The CA (PEM) that signed Gitea's certificate, when it is not in the system's trust
    /// store: trusted by the dispatcher's own calls and by every executor's proxy on its way
    /// to Gitea (checkout, artifacts, the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// The webhook receiver (`POST /webhooks/gitea`, plain HTTP: deliveries are authenticated by
/// their HMAC signature, and one only ever triggers a FetchTask).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// Where the receiver listens; Gitea must reach it (directly or through a proxy).
    pub listen: SocketAddr,
    /// The webhook secret as typed into Gitea (a trailing newline is ignored), 0600.
    pub secret_file: PathBuf,
    /// FetchTask interval while a webhook is configured: the safety net for a lost delivery
    /// (replaces `gitea.fetch_interval` / `_idle`).
    #[serde(default = "defaults::webhook_fetch_interval")]
    pub fetch_interval: GoDuration,
    /// Nudged FetchTasks after the burst: at most one per this (`claim::nudge`).
    #[serde(default = "defaults::nudge_spacing")]
    pub nudge_spacing: GoDuration,
    /// Nudged FetchTasks that may go at once, before the spacing applies (at least 1).
    #[serde(default = "defaults::nudge_burst")]
    pub nudge_burst: u32,
}

impl Webhook {
    /// A receiver on `listen` with the secret in `secret_file`, tuned by the defaults.
    pub fn new(listen: SocketAddr, secret_file: PathBuf) -> Self {
        Webhook {
            listen,
            secret_file,
            fetch_interval: defaults::webhook_fetch_interval(),
            nudge_spacing: defaults::nudge_spacing(),
            nudge_burst: defaults::nudge_burst(),
        }
    }

    /// How often nudges may cause a FetchTask.
    pub fn nudge_budget(&self) -> crate::claim::nudge::NudgeBudget {
        crate::claim::nudge::NudgeBudget {
            spacing: self.nudge_spacing.get(),
            burst: self.nudge_burst,
        }
    }
}

/// Forgejo's waiting-jobs API (`forge::waiting`), read by the leader: a job it can serve wakes
/// the claim loop, and the waiting jobs are exported by their labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitingJobs {
    /// Whose jobs: `admin`, `user`, `orgs/ORG` or `repos/OWNER/REPO` (the scope the runner
    /// is registered in).
    pub scope: String,
    /// A Forgejo API token that may read that scope's runners (read:admin, read:user,
    /// read:organization or read:repository), 0600.
    pub token_file: PathBuf,
    /// How often the list is read.
    #[serde(default = "defaults::waiting_jobs_interval")]
    pub interval: GoDuration,
}

impl WaitingJobs {
    /// The parsed scope (`validate` has checked it).
    pub fn scope(&self) -> std::result::Result<tenantci_core::forge::waiting::Scope, String> {
        self.scope.parse()
    }

    /// The API token, from its file: private (0600), bounded, not empty. `run` reads it at
    /// start, `init` before it writes the section.
    pub fn read_token(&self) -> Result<tenantci_core::secret::Secret> {
        const WHAT: &str = "the Forgejo API token file (waiting_jobs.token_file)";
        tenantci_core::input::check_private(WHAT, &self.token_file)?;
        Ok(tenantci_core::secret::Secret::new(
            tenantci_core::secret::read_file(
                WHAT,
                &self.token_file,
                Some(
                    "put a Forgejo API token that may read the scope's runners into it (runbook: Forgejo)",
                ),
            )?,
        ))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Kubeconfig of the dispatcher's own scoped credential; absent (or overridden with an
    /// empty `TENANTCI_DISPATCH_CLUSTER_KUBECONFIG`): in-cluster (ServiceAccount) or
    /// `KUBECONFIG`, as kube's `Config::infer` finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// Where executor Pods, their Secrets and the leader Lease live.
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nats {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Concurrent executor Pods.
    #[serde(default = "defaults::pod_capacity")]
    pub pod: u32,
    /// Concurrent VM sandboxes (used when the `[vm]` section is present).
    #[serde(default = "defaults::vm_capacity")]
    pub vm: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            pod: defaults::pod_capacity(),
            vm: defaults::vm_capacity(),
        }
    }
}

impl Capacity {
    pub fn of(&self, backend: Backend) -> u32 {
        match backend {
            Backend::Pod => self.pod,
            Backend::Vm => self.vm,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Facade {
    /// Where the facade listens (HTTPS).
    pub listen: SocketAddr,
    /// The base URL executors use; its host is in the serving cert (an IP SAN for an address).
    pub url: String,
    /// The HMAC key of the per-task capabilities, at least 32 bytes, 0600.
    pub capability_key_file: PathBuf,
    /// The facade's own CA (its cert goes into each executor Secret as `ca.crt`).
    pub ca_cert_file: PathBuf,
    pub cert_file: PathBuf,
    /// 0600.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Executor {
    /// The official runner image, pinned by digest (`IMAGE@sha256:<64 hex>`). It runs the job
    /// in host mode, so it holds the job's tools (runbook: the executor image).
    pub image: String,
    /// The tenantci image whose `tenantci executor-proxy` runs beside the runner (the only
    /// holder of the facade CA), pinned by digest.
    pub proxy_image: String,
    /// The runner binary in `image`: `act_runner` (gitea/act_runner), `gitea-runner`
    /// (gitea/runner 1.0 and later) or `forgejo-runner` (Forgejo's runner).
    #[serde(default)]
    pub runner_command: RunnerCommand,
    /// The runner container's requests and limits (defaults: the runbook's node; `init`
    /// derives them from the node image).
    #[serde(default)]
    pub resources: Resources,
    /// How long the runner may finish its job after SIGTERM (its `shutdown_timeout`); the
    /// Pod's grace period adds 15 s for the final reports.
    #[serde(default = "defaults::shutdown_timeout")]
    pub shutdown_timeout: GoDuration,
    /// Pod nodeSelector (e.g. the rented nodes' pool label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations, as in a Pod spec (`{key, operator, value, effect}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Pod runtimeClassName (e.g. a sandboxed runtime for untrusted jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Resource classes (`[[executor.class]]`), selected by a `runs-on` label; none: every
    /// executor is sized by the keys above (`claim::class`).
    #[serde(default, rename = "class", skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<crate::claim::class::ExecutorClass>,
    /// Pod imagePullSecrets: names of `kubernetes.io/dockerconfigjson` Secrets in the
    /// namespace, for executor and proxy images in a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
}

impl Executor {
    /// The two images with every other key at its default.
    pub fn with_images(image: impl Into<String>, proxy_image: impl Into<String>) -> Executor {
        Executor {
            image: image.into(),
            proxy_image: proxy_image.into(),
            runner_command: RunnerCommand::default(),
            resources: Resources::default(),
            shutdown_timeout: defaults::shutdown_timeout(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            runtime_class_name: None,
            classes: Vec::new(),
            image_pull_secrets: Vec::new(),
        }
    }
}

/// The runner binary the executor image ships.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunnerCommand {
    #[default]
    #[serde(rename = "act_runner")]
    ActRunner,
    #[serde(rename = "gitea-runner")]
    GiteaRunner,
    #[serde(rename = "forgejo-runner")]
    ForgejoRunner,
}

impl RunnerCommand {
    pub fn binary(self) -> &'static str {
        match self {
            RunnerCommand::ActRunner => "act_runner",
            RunnerCommand::GiteaRunner => "gitea-runner",
            RunnerCommand::ForgejoRunner => "forgejo-runner",
        }
    }

    /// The command line that runs one task and exits, before `--config FILE`: act_runner and
    /// gitea-runner have `daemon --once`; forgejo-runner has no `--once` but `one-job`
    /// (docs/forgejo-protocol.md).
    pub fn run_once(self) -> &'static [&'static str] {
        match self {
            RunnerCommand::ActRunner => &["act_runner", "daemon", "--once"],
            RunnerCommand::GiteaRunner => &["gitea-runner", "daemon", "--once"],
            RunnerCommand::ForgejoRunner => &["forgejo-runner", "one-job"],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// Loopback address of /healthz, /readyz and /metrics.
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leader {
    #[serde(default = "defaults::lease_duration")]
    pub lease_duration: GoDuration,
    #[serde(default = "defaults::renew_deadline")]
    pub renew_deadline: GoDuration,
    #[serde(default = "defaults::retry_period")]
    pub retry_period: GoDuration,
    /// This instance's holder identity; absent: `<hostname>-<pid>` (the Pod name in-cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl Default for Leader {
    fn default() -> Self {
        Leader {
            lease_duration: defaults::lease_duration(),
            renew_deadline: defaults::renew_deadline(),
            retry_period: defaults::retry_period(),
            identity: None,
        }
    }
}

/// The schema's defaults (`init` uses them for keys it has no flag for).
pub(crate) mod defaults {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::GoDuration;

    pub fn fetch_interval() -> GoDuration {
        Duration::from_millis(200).into()
    }
    pub fn fetch_interval_idle() -> GoDuration {
        Duration::from_secs(2).into()
    }
    pub fn keepalive_interval() -> GoDuration {
        Duration::from_secs(60).into()
    }
    pub fn ack_wait() -> GoDuration {
        Duration::from_secs(30).into()
    }
    pub fn pod_capacity() -> u32 {
        4
    }
    pub fn vm_capacity() -> u32 {
        1
    }
    pub fn status_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9464))
    }
    pub fn lease_duration() -> GoDuration {
        Duration::from_secs(15).into()
    }
    pub fn renew_deadline() -> GoDuration {
        Duration::from_secs(10).into()
    }
    pub fn retry_period() -> GoDuration {
        Duration::from_secs(2).into()
    }
    pub fn shutdown_timeout() -> GoDuration {
        Duration::from_secs(30).into()
    }
    /// 5 s: 0.2 FetchTask/s idle, 2.5x less than one act_runner (2 s), while a lost delivery
    /// costs at most 5 s of pickup latency (2.5 s on average), no worse than act_runner.
    pub fn webhook_fetch_interval() -> GoDuration {
        Duration::from_secs(5).into()
    }
    /// 200 ms: a flood of deliveries costs Gitea no more than polling alone does at its
    /// default `gitea.fetch_interval` (5 FetchTask/s).
    pub fn nudge_spacing() -> GoDuration {
        Duration::from_millis(200).into()
    }
    /// 5: jobs pushed together by several pipelines are each picked up at once; a FetchTask
    /// that returns a task is followed by the next without waiting for any nudge anyway.
    pub fn nudge_burst() -> u32 {
        5
    }
    /// 3 min: a node rental plus a cold image pull take 30-90 s, so a healthy start has
    /// twice that; a stuck one is replaced well inside Gitea's 10-minute zombie limit (the
    /// keep-alive keeps the task open meanwhile, so the limit is never the one that bites).
    pub fn start_deadline() -> GoDuration {
        Duration::from_secs(180).into()
    }
    /// 3 attempts: one retry for a bad node, a second for bad luck; a third failure is the
    /// image or the job, and more attempts would only delay the FAILURE the user must see.
    pub fn max_attempts() -> u32 {
        3
    }
    /// 5 s: as the webhook's safety-net poll; a list call costs Forgejo one indexed query.
    pub fn waiting_jobs_interval() -> GoDuration {
        Duration::from_secs(5).into()
    }
}

/// Environment overrides: variable, and the dotted key it sets.
pub const OVERRIDES: &[(&str, &str)] = &[
    ("TENANTCI_DISPATCH_GITEA_URL", "gitea.url"),
    ("TENANTCI_DISPATCH_GITEA_FORGE", "gitea.forge"),
    ("TENANTCI_DISPATCH_GITEA_RUNNER_NAME", "gitea.runner_name"),
    ("TENANTCI_DISPATCH_GITEA_LABELS", "gitea.labels"),
    (
        "TENANTCI_DISPATCH_GITEA_CREDENTIAL_FILE",
        "gitea.credential_file",
    ),
    (
        "TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL",
        "gitea.fetch_interval",
    ),
    (
        "TENANTCI_DISPATCH_GITEA_FETCH_INTERVAL_IDLE",
        "gitea.fetch_interval_idle",
    ),
    (
        "TENANTCI_DISPATCH_GITEA_KEEPALIVE_INTERVAL",
        "gitea.keepalive_interval",
    ),
    ("TENANTCI_DISPATCH_GITEA_CA_FILE", "gitea.ca_file"),
    ("TENANTCI_DISPATCH_CLUSTER_KUBECONFIG", "cluster.kubeconfig"),
    ("TENANTCI_DISPATCH_CLUSTER_NAMESPACE", "cluster.namespace"),
    ("TENANTCI_DISPATCH_NATS_URL", "nats.url"),
    ("TENANTCI_DISPATCH_NATS_SECRETS_DIR", "nats.secrets_dir"),
    (
        "TENANTCI_DISPATCH_NATS_SEALING_KEY_FILE",
        "nats.sealing_key_file",
    ),
    ("TENANTCI_DISPATCH_NATS_ACK_WAIT", "nats.ack_wait"),
    ("TENANTCI_DISPATCH_NATS_CA_FILE", "nats.ca_file"),
    ("TENANTCI_DISPATCH_CAPACITY_POD", "capacity.pod"),
    ("TENANTCI_DISPATCH_CAPACITY_VM", "capacity.vm"),
    ("TENANTCI_DISPATCH_FACADE_LISTEN", "facade.listen"),
    ("TENANTCI_DISPATCH_FACADE_URL", "facade.url"),
    (
        "TENANTCI_DISPATCH_FACADE_CAPABILITY_KEY_FILE",
        "facade.capability_key_file",
    ),
    (
        "TENANTCI_DISPATCH_FACADE_CA_CERT_FILE",
        "facade.ca_cert_file",
    ),
    ("TENANTCI_DISPATCH_FACADE_CERT_FILE", "facade.cert_file"),
    ("TENANTCI_DISPATCH_FACADE_KEY_FILE", "facade.key_file"),
    ("TENANTCI_DISPATCH_EXECUTOR_IMAGE", "executor.image"),
    (
        "TENANTCI_DISPATCH_EXECUTOR_PROXY_IMAGE",
        "executor.proxy_image",
    ),
    (
        "TENANTCI_DISPATCH_EXECUTOR_RUNNER_COMMAND",
        "executor.runner_command",
    ),
    (
        "TENANTCI_DISPATCH_EXECUTOR_SHUTDOWN_TIMEOUT",
        "executor.shutdown_timeout",
    ),
    (
        "TENANTCI_DISPATCH_EXECUTOR_RUNTIME_CLASS_NAME",
        "executor.runtime_class_name",
    ),
    (
        "TENANTCI_DISPATCH_EXECUTOR_IMAGE_PULL_SECRETS",
        "executor.image_pull_secrets",
    ),
    ("TENANTCI_DISPATCH_STATUS_LISTEN", "status.listen"),
    (
        "TENANTCI_DISPATCH_STATUS_METRICS_LISTEN",
        "status.metrics_listen",
    ),
    (
        "TENANTCI_DISPATCH_STATUS_EXPOSE_METRICS",
        "status.expose_metrics",
    ),
    (
        "TENANTCI_DISPATCH_LEADER_LEASE_DURATION",
        "leader.lease_duration",
    ),
    (
        "TENANTCI_DISPATCH_LEADER_RENEW_DEADLINE",
        "leader.renew_deadline",
    ),
    (
        "TENANTCI_DISPATCH_LEADER_RETRY_PERIOD",
        "leader.retry_period",
    ),
    ("TENANTCI_DISPATCH_LEADER_IDENTITY", "leader.identity"),
    ("TENANTCI_DISPATCH_WEBHOOK_LISTEN", "webhook.listen"),
    (
        "TENANTCI_DISPATCH_WEBHOOK_SECRET_FILE",
        "webhook.secret_file",
    ),
    (
        "TENANTCI_DISPATCH_WEBHOOK_FETCH_INTERVAL",
        "webhook.fetch_interval",
    ),
    (
        "TENANTCI_DISPATCH_WEBHOOK_NUDGE_SPACING",
        "webhook.nudge_spacing",
    ),
    (
        "TENANTCI_DISPATCH_WEBHOOK_NUDGE_BURST",
        "webhook.nudge_burst",
    ),
    (
        "TENANTCI_DISPATCH_CLAIM_START_DEADLINE",
        "claim.start_deadline",
    ),
    ("TENANTCI_DISPATCH_CLAIM_MAX_ATTEMPTS", "claim.max_attempts"),
    ("TENANTCI_DISPATCH_WAITING_JOBS_SCOPE", "waiting_jobs.scope"),
    (
        "TENANTCI_DISPATCH_WAITING_JOBS_TOKEN_FILE",
        "waiting_jobs.token_file",
    ),
    (
        "TENANTCI_DISPATCH_WAITING_JOBS_INTERVAL",
        "waiting_jobs.interval",
    ),
    // The one key of `[vm]` that differs where the dispatcher runs: the Deployment projects
    // the key from its Secret (manifests/components/vm); the rest of `[vm]` is file only.
    ("TENANTCI_DISPATCH_VM_API_KEY_FILE", "vm.api_key_file"),
    ("TENANTCI_DISPATCH_CACHE_DIR", "cache.dir"),
    ("TENANTCI_DISPATCH_CACHE_S3_BUCKET", "cache.s3_bucket"),
    ("TENANTCI_DISPATCH_CACHE_S3_ENDPOINT", "cache.s3_endpoint"),
    ("TENANTCI_DISPATCH_CACHE_S3_REGION", "cache.s3_region"),
    (
        "TENANTCI_DISPATCH_CACHE_S3_CREDENTIALS_FILE",
        "cache.s3_credentials_file",
    ),
    (
        "TENANTCI_DISPATCH_CACHE_S3_DIRECT_DOWNLOADS",
        "cache.s3_direct_downloads",
    ),
    ("TENANTCI_DISPATCH_CACHE_MAX_SIZE_MIB", "cache.max_size_mib"),
    (
        "TENANTCI_DISPATCH_CACHE_MAX_ENTRY_SIZE_MIB",
        "cache.max_entry_size_mib",
    ),
    ("TENANTCI_DISPATCH_CACHE_MAX_AGE", "cache.max_age"),
    (
        "TENANTCI_DISPATCH_CACHE_GRANT_LIFETIME",
        "cache.grant_lifetime",
    ),
];

/// The TOML value of an override: integers and comma-separated lists where the schema has
/// them, strings elsewhere. A malformed number names the variable.
fn override_value(var: &str, key: &str, raw: &str) -> std::result::Result<toml_edit::Item, String> {
    Ok(match key {
        "capacity.pod"
        | "capacity.vm"
        | "claim.max_attempts"
        | "webhook.nudge_burst"
        | "cache.max_size_mib"
        | "cache.max_entry_size_mib" => {
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
    for (var, key) in OVERRIDES {
        let Some(raw) = env(var) else { continue };
        let (section, field) = key.split_once('.').expect("dotted key");
        if !doc.contains_table(section) {
            doc[section] = toml_edit::table();
        }
        // An empty kubeconfig override means "none": in a Pod the ServiceAccount is used
        // (manifests/dispatch/deployment.yaml), whatever file the host's config names.
        if *key == "cluster.kubeconfig" && raw.is_empty() {
            if let Some(t) = doc[section].as_table_mut() {
                t.remove(field);
            }
            continue;
        }
        doc[section][field] = override_value(var, key, &raw)?;
    }
    Ok(())
}

impl Config {
    /// Reads `path`, applies the environment overrides, resolves relative paths against the
    /// file's directory and validates. Errors name the file, the key and the fix (exit 2).
    pub fn load(path: &Path) -> Result<Config> {
        Self::load_with_env(path, &|k| std::env::var(k).ok())
    }

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

    /// Checks every value that `run` would otherwise trip over later.
    pub fn validate(&self) -> std::result::Result<(), String> {
        url_ok("gitea.url", &self.gitea.url, &["http", "https"])?;
        url_ok("facade.url", &self.facade.url, &["https"])?;
        for one in self.nats.url.split(',') {
            url_ok("nats.url", one.trim(), &["nats", "tls"])?;
        }
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
        if !tenantci_core::dns::is_label(&self.cluster.namespace) {
            return Err(format!(
                "has cluster.namespace = `{}`, which is not a DNS label (lower-case letters, digits and `-`, at most 63)",
                tenantci_core::input::shown(&self.cluster.namespace)
            ));
        }
        if self.capacity.pod == 0 {
            return Err("has capacity.pod = 0 (at least 1)".into());
        }
        if self.capacity.vm == 0 {
            return Err("has capacity.vm = 0 (at least 1)".into());
        }
        if self.webhook.as_ref().is_some_and(|w| w.nudge_burst == 0) {
            return Err(
                "has webhook.nudge_burst = 0 (at least 1: a delivery's FetchTask goes at once)"
                    .into(),
            );
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
        crate::backend::spec::check_image_digest(&self.executor.image)
            .map_err(|e| format!("has executor.image: {}", e.message()))?;
        crate::backend::spec::check_image_digest(&self.executor.proxy_image)
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
        if self.gitea.keepalive_interval.get() >= Duration::from_secs(600) {
            return Err("has gitea.keepalive_interval of 10m or more; Gitea fails tasks not updated for 10 minutes".into());
        }
        self.leader_timing()
            .validate()
            .map_err(|e| format!("has leader timings where {e}"))?;
        if let Some(vm) = &self.vm {
            vm.validate()?;
        }
        crate::claim::class::validate(&self.executor.classes, &self.executor.resources, |b| {
            (b == Backend::Pod || self.vm.is_some()).then(|| self.capacity.of(b))
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
        crate::claim::class::declared_labels(&self.gitea.labels, &self.executor.classes)
    }

    pub fn leader_timing(&self) -> Timing {
        Timing {
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

/// The host of `url` when its scheme is one of `schemes` (brackets of an IPv6 address taken
/// off): what a certificate must cover, and the check that a URL names a host at all.
pub fn url_host(url: &str, schemes: &[&str]) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    if !schemes.contains(&uri.scheme_str()?) || url.contains(char::is_whitespace) {
        return None;
    }
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| host.to_string())
}

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
                fetch_interval: defaults::fetch_interval(),
                fetch_interval_idle: defaults::fetch_interval_idle(),
                keepalive_interval: defaults::keepalive_interval(),
                ca_file: Some("/etc/tenantci/gitea-ca.crt".into()),
            },
            cluster: Cluster {
                kubeconfig: Some(files::KUBECONFIG.into()),
                namespace: "dynamic-runner".into(),
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
            executor: Executor::with_images(
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
            cache: Some(crate::cache::settings::Cache {
                max_size_mib: 4096,
                ..crate::cache::settings::Cache::in_dir("cache")
            }),
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
        assert_eq!(cfg.capacity.pod, 9);
        assert_eq!(cfg.gitea.labels, ["a", "b"]);
        let in_pod = parse(
            &sample().to_toml(),
            &[("TENANTCI_DISPATCH_CLUSTER_KUBECONFIG", "")],
        )
        .unwrap();
        assert_eq!(in_pod.cluster.kubeconfig, None, "empty: the ServiceAccount");
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
        assert_eq!(c[0].backend, Backend::Pod, "the default backend");
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
        assert_eq!(defaults::fetch_interval().as_str(), "200ms");
        assert_eq!(defaults::keepalive_interval().as_str(), "1m");
    }

    /// Every key set, none at its default, so an override that sets nothing is seen.
    fn tuned() -> Config {
        let mut cfg = sample();
        cfg.gitea.forge = tenantci_core::forge::Forge::Forgejo;
        cfg.gitea.fetch_interval = Duration::from_millis(300).into();
        cfg.gitea.fetch_interval_idle = Duration::from_secs(3).into();
        cfg.gitea.keepalive_interval = Duration::from_secs(120).into();
        cfg.nats.ack_wait = Duration::from_secs(45).into();
        cfg.capacity = Capacity { pod: 5, vm: 2 };
        cfg.executor.runner_command = RunnerCommand::GiteaRunner;
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
        cfg.cache = Some(crate::cache::settings::Cache {
            dir: None,
            s3_bucket: Some("ci-cache".into()),
            s3_endpoint: Some("http://10.0.0.7:9000".into()),
            s3_region: Some("eu-central-1".into()),
            s3_credentials_file: Some("/etc/tenantci/s3.credentials".into()),
            s3_direct_downloads: true,
            max_entry_size_mib: 256,
            max_age: Duration::from_secs(86400).into(),
            ..crate::cache::settings::Cache::in_dir("unused")
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
        let mut keys: Vec<&str> = OVERRIDES
            .iter()
            .map(|(_, k)| *k)
            .filter(|k| !k.starts_with("vm."))
            .collect();
        keys.sort();
        let mut schema = schema_keys();
        schema.sort();
        assert_eq!(keys, schema, "OVERRIDES against the schema");
        for (var, key) in OVERRIDES.iter().filter(|(_, k)| !k.starts_with("vm.")) {
            let want = if keys_of(&tuned()).iter().any(|k| k == key) {
                tuned()
            } else {
                tuned_s3()
            };
            let (section, field) = key.split_once('.').unwrap();
            assert_eq!(
                *var,
                format!("TENANTCI_DISPATCH_{section}_{field}").to_uppercase(),
                "the variable's name follows the key"
            );
            let mut doc: toml_edit::DocumentMut = want.to_toml().parse().unwrap();
            let value = as_env(doc[section][field].as_value().unwrap());
            doc[section].as_table_mut().unwrap().remove(field);
            let got = parse(&doc.to_string(), &[(var, &value)])
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
        let mut table: Vec<(String, String)> = OVERRIDES
            .iter()
            .map(|(v, k)| (v.to_string(), k.to_string()))
            .collect();
        table.sort();
        assert_eq!(documented, table);
    }
}
