//! `tenantci dispatch ...`: set up (`init`) and run (`run`) the Gitea dispatcher, and probe its
//! loopback status API from inside its container (`probe`, for the Deployment's exec probes).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::dispatch_status;
use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_dispatch::backend::{pod, vm};
use tenantci_dispatch::config::Config;
use tenantci_dispatch::init::{self, CapacityFlag, ClusterAccess, Inputs, RegistrationToken};
use tenantci_dispatch::renew;
use tenantci_dispatch::run::status_api;

#[derive(Debug, Subcommand)]
pub enum DispatchCommand {
    /// Register with Gitea once and write everything `dispatch run` needs (idempotent).
    ///
    /// Checks every input first (bad input: exit 2, nothing written, applied or registered),
    /// then registers the dispatcher at Gitea (kept on re-run: scheduler.json). On any
    /// cluster (--kubeconfig): applies its RBAC with that administrator's kubeconfig
    /// (namespaced; cluster-scoped only for executor identity or a warm pool in the config)
    /// and verifies it for the tenantci-dispatcher ServiceAccount, which `dispatch
    /// run` uses in the cluster (no credential to mint or renew). On the gateway path
    /// (--state-dir, --cluster): mints its client credential (<dir>/kube/, CN
    /// tenantci-dispatcher, 720h by default), applies the RBAC with the cluster's tenant-admin
    /// kubeconfig and verifies it with the new credential. Then creates the capability and
    /// sealing keys and the facade's CA and serving cert (all kept
    /// on re-run), and writes the config last. Every file is 0600 in a 0700 directory; the
    /// registration token is never written. With --opensandbox-url the VM backend is on
    /// (its Lifecycle API is reached with the key before anything is written); without it,
    /// `vm` is not registered at Gitea. See docs/runbooks/gitea-dispatcher.md.
    Init(Box<InitArgs>),
    /// Run the dispatcher described by a config until SIGTERM, then drain. Prints one JSON
    /// line `{"type":"listening","facade":ADDR,"facadeUrl":URL,"status":ADDR}` on stdout once
    /// the facade and the status API listen (port 0 in the config: the ports picked), with
    /// `"metrics":ADDR` when a metrics listener (status.metrics_listen) and `"webhook":ADDR`
    /// when a webhook receiver is configured. Logs the FetchTask rate it
    /// will cost Gitea at start.
    Run(RunArgs),
    /// GET the status API (/healthz, /readyz) of a dispatcher in this network namespace:
    /// exit 0 on 2xx, 1 otherwise. For exec probes (the status API binds loopback only).
    Probe(ProbeArgs),
    /// What a running dispatcher holds: capacity per backend and class, and every task with
    /// its state, as `kubectl get` prints it.
    ///
    /// Reads the status API (GET /v1/status on status.listen, loopback): with --config on the
    /// dispatcher's host, at --status-address, or in the cluster through a kubeconfig: the
    /// Pod holding the Lease dynamic-runner-scheduler in --namespace, reached through a
    /// port-forward (pods/portforward; the Role tenantci-status-reader grants what it needs),
    /// and says which Pod answered. States follow the
    /// task state table (docs/architecture.md): Claimed, Queued, Starting, Running (not
    /// fetched), Fetched, Reported, Withdrawn. `-o wide` adds the workflow, run, runs-on,
    /// executor Pod and node; `-o json` prints the document (docs/cli.md); --watch prints again
    /// every --interval. The same data is the HTML page at http://STATUS_LISTEN/. A dispatcher
    /// that does not answer is exit 2.
    ///
    /// --history shows the last finished tasks instead (GET /v1/history): each phase's
    /// duration from claimed to executor gone, and the slowest. Kept in NATS (bucket
    /// CI_HISTORY) across restarts and leader changes, for the config's [history] bounds.
    Status(dispatch_status::StatusArgs),
    /// Why a job waits: each reason in order with its fix, or that it will run.
    ///
    /// Name the job by its web URL, by --repository and --run, by --task, or only by
    /// --runs-on LABELS for a job not yet created. Reasons, in order: no label of this
    /// dispatcher matches (the closest named), no executor class fits, capacity full (its
    /// place in the queue and what runs), the backend's API away, its executor Pod without a
    /// node (booting node, image pull, quota), the forge not seeing this runner online. Exit
    /// 0: it runs or will; 1: it waits for a reason named; 2: bad input (a job this
    /// dispatcher never saw, a URL of another forge, no dispatcher at the address).
    ///
    /// A job it no longer holds is looked up in its task history: where its time went,
    /// phase by phase, and the slowest phase with its likely cause (a node booting, an image
    /// pull, a full queue, the forge's own queue); exit 0 once finished.
    /// See docs/runbooks/gitea-dispatcher.md, "A job is waiting" and "Where did my job's
    /// time go".
    Explain(dispatch_status::ExplainArgs),
    /// Serve the status page on a local address, so a browser opens an in-cluster
    /// dispatcher's page without kubectl.
    ///
    /// Prints the page's URL (http://127.0.0.1:PORT/) on stdout and serves until Ctrl-C or
    /// SIGTERM. In the cluster (a kubeconfig, no --config or --status-address) every browser
    /// connection is carried through a port-forward (pods/portforward) to the Pod that holds
    /// the Lease dynamic-runner-scheduler when it opens, so a page left open follows a leader
    /// change; the Role tenantci-status-reader (manifests/dispatch/status-reader.yaml) grants
    /// what it needs. With --config or --status-address it serves the dispatcher on this
    /// host. No leader, a forbidden forward, a wrong namespace or kubeconfig: exit 2.
    Page(super::dispatch_reach::PageArgs),
    /// Renew the facade certificate and (gateway path) the dispatcher's client credential
    /// when due, while `dispatch run` keeps running.
    ///
    /// Due: a third or less of its life left (the credential's 720h: its last 240h; the
    /// facade certificate's year: its last ~4 months), or ending within --within, or with
    /// --force. Everything is issued and proven first (the facade pair checked as `dispatch
    /// run` checks it; the new credential's access reviews at the apiserver); a refusal is
    /// exit 2, an apiserver that does not answer exit 3, with every file as it was. Then the
    /// new files replace the old ones (0600; the old credential kept as *.old-<time>). A
    /// running dispatcher takes them up within a minute, or at SIGHUP, without a restart:
    /// running tasks are not touched. Nothing due: says so, exit 0. Needs the facade CA key
    /// beside the config, and for the credential --state-dir and --cluster (the gateway's
    /// ClientCA). Run daily by tenantci-dispatch-renew@.timer.
    Renew(RenewArgs),
    /// What this release needs that the installation lacks, one line each with the command
    /// that fixes it; run it before and after an upgrade. Changes nothing.
    ///
    /// Run it where `dispatch run` runs, with its config and credentials (in the cluster:
    /// `kubectl exec deploy/tenantci-dispatcher -- tenantci dispatch check`). Checks: the
    /// config (a key renamed or removed), each NATS user's grants from this release's `queue
    /// nats-config`, tried as that user with requests that store nothing (the writes carry
    /// an expected sequence no subject has, which also proves the buckets' conditional put),
    /// the consumers and buckets against what `queue init` creates for this config (the
    /// stream CI_RUNNER too with ci-admin's password in nats.secrets_dir), and the
    /// dispatcher's RBAC (SelfSubjectAccessReviews, as `dispatch init` verifies it). Exit 0:
    /// nothing needed; 1: something is (each line `<what>; fix: <command>`); 2: bad input (no
    /// such config, not TOML); 3: NATS or the apiserver did not answer. See
    /// docs/runbooks/upgrading.md.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The config `dispatch run` uses.
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The config `dispatch init --out` wrote (the facade CA key is beside it).
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: PathBuf,
    /// The gateway state directory whose ClientCA signed the credential (gateway path).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The gateway's cluster the credential is for (gateway path).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Also renew what ends within this long (Go duration, e.g. 336h).
    #[arg(long, value_name = "DURATION")]
    pub within: Option<String>,
    /// Renew both whatever their dates.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub gitea: GiteaArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub facade: FacadeArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
    #[command(flatten)]
    pub vm: VmArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// The config file to write; the files it names go beside it.
    #[arg(long, value_name = "CONFIG.toml")]
    pub out: PathBuf,
    /// Apply the ConfigMap tenantci-dispatcher-config and the Secret tenantci-dispatcher in
    /// the dispatcher's namespace (--dispatcher-namespace), in exactly the shape manifests/dispatch/deployment.yaml mounts (the
    /// config with the Pod's paths and listeners, one Secret key per file it names), with the
    /// administrator's kubeconfig. Then `kubectl apply -k manifests/dispatch` runs it.
    #[arg(long)]
    pub apply_secret: bool,
    /// Write that ConfigMap and Secret as a manifest (0600) for `kubectl apply -f` or your
    /// secret tooling, instead of or besides --apply-secret.
    #[arg(long, value_name = "FILE")]
    pub secret_out: Option<PathBuf>,
    /// Write the Pod's config.toml alone (no secrets: the ConfigMap's one key) to FILE, e.g.
    /// the config.toml of your copy of manifests/overlays/openbao, whose configMapGenerator
    /// makes the ConfigMap from it while OpenBao holds the Secret's keys (`bao kv put`).
    #[arg(long, value_name = "FILE")]
    pub pod_config_out: Option<PathBuf>,
    /// Check everything and say what would happen; write, apply and register nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Gitea")]
pub struct GiteaArgs {
    /// Gitea's base URL (the RunnerService is under /api/actions).
    #[arg(long, value_name = "URL")]
    pub gitea_url: String,
    /// The CA certificate (PEM) Gitea's certificate chains to, when the system's roots do not
    /// hold it: init's own calls trust it, and the config names it (gitea.ca_file), so
    /// `dispatch run` and every executor's proxy do too. Default: the existing config's.
    #[arg(long, value_name = "FILE")]
    pub gitea_ca: Option<PathBuf>,
    /// Which forge --gitea-url is: gitea or forgejo. Default: read from its version API
    /// (Forgejo reports `<version>+gitea-<compat>`); a version of neither kind is refused.
    #[arg(long, value_name = "FORGE", value_parser = ["gitea", "forgejo"])]
    pub forge: Option<String>,
    /// File holding the runner registration token (Site Administration > Actions > Runners).
    /// Needed only until the first registration; never written anywhere.
    #[arg(long, value_name = "FILE")]
    pub registration_token_file: Option<PathBuf>,
    /// The registration token itself. WARNING: visible to every user in `ps`; prefer
    /// --registration-token-file or the environment variable.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TENANTCI_GITEA_REGISTRATION_TOKEN",
        hide_env_values = true
    )]
    pub registration_token: Option<String>,
    /// The runner's name at Gitea. Default: the kept registration's, else
    /// tenantci-dispatch-<cluster>.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Labels registered at Gitea, comma-separated; runs-on `vm` routes to the VM backend
    /// (registered only with --opensandbox-url), anything else to executor Pods.
    #[arg(
        long,
        value_name = "LABELS",
        value_delimiter = ',',
        default_value = "self-hosted,pod"
    )]
    pub labels: Vec<String>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The tenant cluster")]
pub struct ClusterArgs {
    /// Any cluster: a cluster administrator's kubeconfig, used only to apply the dispatcher's
    /// RBAC and check access (its current context). The dispatcher then runs in the cluster as
    /// the tenantci-dispatcher ServiceAccount: no credential is minted or renewed.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The gateway path: the gateway state directory (resolves --cluster through
    /// gateway.json; the dispatcher's client certificate is minted from its ClientCA).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The cluster's name. Required with --state-dir; with --kubeconfig, default: the name
    /// of the current context's cluster.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Namespace of the executor Pods and their Secrets (and of the leader Lease, unless
    /// --dispatcher-namespace names another).
    #[arg(long, value_name = "NS", default_value = "dynamic-runner")]
    pub namespace: String,
    /// Namespace of the dispatcher itself: its leader Lease and, in the cluster, its
    /// Deployment, ServiceAccount, ConfigMap and Secret (its Role on --namespace is bound
    /// across). Default: the existing config's; else tenantci-system with --kubeconfig (so a
    /// reader of the dispatcher's namespace is given nothing where jobs run), --namespace on
    /// the gateway path.
    #[arg(long, value_name = "NS")]
    pub dispatcher_namespace: Option<String>,
    /// Lifetime of the dispatcher's client certificate on the gateway path (Go duration). A
    /// re-run of init
    /// rotates it once two thirds have passed: re-run init regularly (e.g. weekly) and
    /// restart `dispatch run` after a rotation.
    #[arg(long, value_name = "DURATION", default_value = "720h")]
    pub credential_valid_for: String,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Queue and capacity")]
pub struct NatsArgs {
    /// NATS server URL.
    #[arg(long, value_name = "URL", env = "TENANTCI_NATS_URL")]
    pub nats: String,
    /// The directory `tenantci queue nats-config --secrets-dir` filled (ci-producer.password,
    /// ci-worker.password; ci-admin.password optional).
    #[arg(long, value_name = "DIR")]
    pub nats_secrets_dir: PathBuf,
    /// PEM CA certificate(s) the NATS server's TLS certificate chains to, for a tls:// URL
    /// with a private CA (nats.ca_file). Default: the existing config's, else the system's
    /// roots.
    #[arg(long, value_name = "FILE")]
    pub nats_ca_file: Option<PathBuf>,
    /// Concurrent executor Pods. Default: the existing config's, else 4.
    #[arg(long, value_name = "N")]
    pub pod_capacity: Option<u32>,
    /// Concurrent VMs. Default: the existing config's, else 1.
    #[arg(long, value_name = "N")]
    pub vm_capacity: Option<u32>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Facade and executors")]
pub struct FacadeArgs {
    /// Where the facade listens (HTTPS), an address and port.
    #[arg(long, value_name = "HOST:PORT")]
    pub facade_listen: SocketAddr,
    /// The base URL executors use; its host goes into the serving cert. Default:
    /// https://<facade-listen> (refused for 0.0.0.0 / [::]).
    #[arg(long, value_name = "URL")]
    pub facade_url: Option<String>,
    /// The official runner image, pinned by digest (IMAGE@sha256:<64 hex>); a tag is refused.
    #[arg(long, value_name = "IMAGE@sha256:DIGEST")]
    pub executor_image: String,
    /// The runner binary in --executor-image: act_runner, gitea-runner or forgejo-runner.
    /// Default: the existing config's, else the forge's own runner (forgejo-runner for
    /// Forgejo, act_runner for Gitea).
    #[arg(long, value_name = "COMMAND")]
    pub runner_command: Option<tenantci_dispatch::sizing::RunnerCommand>,
    /// The tenantci image (pinned by digest) whose `tenantci executor-proxy` runs beside each
    /// executor: the only holder of the facade CA in the Pod. Default: the existing config's.
    #[arg(long, value_name = "IMAGE@sha256:DIGEST")]
    pub proxy_image: Option<String>,
    /// The runner container's CPU request (e.g. 1500m). Default: the existing config's, else
    /// the node image's allocatable less the sidecar (1800m on a 2-vCPU node). An executor
    /// that cannot fit the cluster's node image is refused.
    #[arg(long, value_name = "QUANTITY")]
    pub executor_cpu: Option<String>,
    /// The runner container's memory request and limit (e.g. 1536Mi). Default: the existing
    /// config's, else derived from the node image (1728Mi on a 2048 MiB node).
    #[arg(long, value_name = "QUANTITY")]
    pub executor_memory: Option<String>,
    /// The runner container's ephemeral-storage request and limit, which also bounds its
    /// HOME/work/cache emptyDir. Default: the existing config's, else half the node image's
    /// rootfsMiB, else 2Gi.
    #[arg(long, value_name = "QUANTITY")]
    pub executor_ephemeral_storage: Option<String>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Webhook and waiting jobs (faster pickup, less polling)")]
pub struct WebhookArgs {
    /// Where `dispatch run` receives Gitea's `workflow_job` webhook (plain HTTP, POST
    /// /webhooks/gitea; deliveries are verified by their signature). Each delivery for a
    /// queued job makes the leader FetchTask at once; polling drops to every 5s
    /// (webhook.fetch_interval) as the safety net for lost deliveries. Default: the existing
    /// config's webhook, else none (polling only: 5 FetchTask/s after a task, 0.5/s idle).
    #[arg(long, value_name = "HOST:PORT", requires = "webhook_secret_file")]
    pub webhook_listen: Option<SocketAddr>,
    /// File holding the webhook's secret exactly as typed into Gitea (a trailing newline is
    /// ignored); 0600. Gitea signs every delivery with it; unsigned ones are refused.
    #[arg(long, value_name = "FILE", requires = "webhook_listen")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Forgejo only: read its waiting-jobs API for SCOPE (admin, user, orgs/ORG or
    /// repos/OWNER/REPO: where the runner is registered). A waiting job the dispatcher can
    /// serve makes the leader FetchTask at once, and the jobs nobody serves are exported by
    /// their labels. init reads it once with the token before writing anything. Default: the
    /// existing config's [waiting_jobs], else none.
    #[arg(long, value_name = "SCOPE", requires = "waiting_jobs_token_file")]
    pub waiting_jobs_scope: Option<String>,
    /// File (0600) holding a Forgejo API token that may read SCOPE's runners (read:admin,
    /// read:user, read:organization or read:repository).
    #[arg(long, value_name = "FILE", requires = "waiting_jobs_scope")]
    pub waiting_jobs_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Shared actions cache (per repository)")]
pub struct CacheArgs {
    /// Turn the shared actions cache on, its entries in DIR (created by `dispatch run`; in the
    /// cluster the Pod's config names the cache-volume component's claim instead): every
    /// executor's actions/cache and setup-* caching then hit across tasks, each repository
    /// seeing only its own entries. Default: the existing config's [cache], else none.
    #[arg(long, value_name = "DIR", conflicts_with = "cache_s3_bucket")]
    pub cache_dir: Option<PathBuf>,
    /// Keep the cache's entries in an S3-compatible bucket instead (what several replicas
    /// share).
    #[arg(long, value_name = "NAME")]
    pub cache_s3_bucket: Option<String>,
    /// The bucket's endpoint (MinIO, Ceph RGW, Garage; http:// allowed). Default: AWS for the
    /// region.
    #[arg(long, value_name = "URL", requires = "cache_s3_bucket")]
    pub cache_s3_endpoint: Option<String>,
    /// The bucket's region. Default: AWS_REGION.
    #[arg(long, value_name = "REGION", requires = "cache_s3_bucket")]
    pub cache_s3_region: Option<String>,
    /// File (0600) with the access key id on its first line and the secret key on its second.
    /// Default: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in `dispatch run`'s environment.
    #[arg(long, value_name = "FILE", requires = "cache_s3_bucket")]
    pub cache_s3_credentials_file: Option<PathBuf>,
    /// Restores read the bucket directly (a presigned GET, 15 minutes, of the one entry), at
    /// the bucket's speed and at no cost to the dispatcher. Executors must reach the
    /// endpoint by the same name (NetworkPolicy egress).
    #[arg(long, requires = "cache_s3_bucket")]
    pub cache_s3_direct_downloads: bool,
    /// All repositories' entries together; past it the least recently restored go (an
    /// entry's own limit is lowered to it if larger). Default: the existing config's, else
    /// 10240.
    #[arg(long, value_name = "MIB")]
    pub cache_max_size_mib: Option<u64>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "VM backend (OpenSandbox)")]
pub struct VmArgs {
    /// The OpenSandbox server (its Lifecycle API is under /v1). Turns the VM backend on: jobs
    /// whose runs-on has `vm` run in one sandbox each. Without it, `vm` is not registered.
    #[arg(long, value_name = "URL")]
    pub opensandbox_url: Option<String>,
    /// File holding the Lifecycle API key (sent as OPEN-SANDBOX-API-KEY); 0600. The config
    /// names it; the key is never copied.
    #[arg(long, value_name = "FILE")]
    pub opensandbox_api_key_file: Option<PathBuf>,
    /// The executor image for sandboxes, pinned by digest. Default: --executor-image.
    #[arg(long, value_name = "IMAGE@sha256:DIGEST")]
    pub vm_image: Option<String>,
    /// Each sandbox's CPU limit. Default: 2.
    #[arg(long, value_name = "QUANTITY")]
    pub vm_cpu: Option<String>,
    /// Each sandbox's memory limit. Default: 4Gi.
    #[arg(long, value_name = "QUANTITY")]
    pub vm_memory: Option<String>,
    /// Each sandbox's lifetime, at least Gitea's 3h task limit. Default: 3h10m.
    #[arg(long, value_name = "DURATION")]
    pub vm_timeout: Option<String>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Executor identity (SPIFFE)")]
pub struct IdentityArgs {
    /// The SPIFFE trust domain (e.g. example.org). Turns executor identity on: the facade
    /// presents its SVID and serves an executor only with its task's SVID (mTLS), on top of
    /// the capability. Needs SPIRE with its ClusterStaticEntry CRD (checked first), and applies
    /// cluster-scoped RBAC for the per-task entries (docs/runbooks/gitea-dispatcher.md).
    #[arg(long, value_name = "DOMAIN")]
    pub spiffe_trust_domain: Option<String>,
    /// Each task's SPIFFE ID; placeholders {trust_domain}, {repository}, {job}.
    /// Default: spiffe://{trust_domain}/gitea/{repository}/{job}.
    #[arg(long, value_name = "TEMPLATE")]
    pub spiffe_id_template: Option<String>,
    /// The parent (the node's SPIRE agent) of a task's ClusterStaticEntry; placeholders
    /// {trust_domain}, {cluster}, {node_uid}.
    /// Default: spiffe://{trust_domain}/spire/agent/k8s_psat/{cluster}/{node_uid}.
    #[arg(long, value_name = "TEMPLATE")]
    pub spiffe_parent_template: Option<String>,
    /// The cluster's name as SPIRE's k8s_psat node attestor is configured with ({cluster} in
    /// the parent template). Default: the tenant cluster's name (--cluster).
    #[arg(long, value_name = "NAME")]
    pub spiffe_cluster: Option<String>,
    /// The facade's own SPIFFE ID, the only one executors accept.
    /// Default: spiffe://{trust_domain}/ns/{namespace}/sa/tenantci-dispatcher.
    #[arg(long, value_name = "SPIFFE_ID")]
    pub spiffe_facade_id: Option<String>,
    /// Where the dispatcher gets its SVID: workload-api (SPIFFE_ENDPOINT_SOCKET) or files:DIR
    /// (spiffe-helper's svid.pem, svid_key.pem, svid_bundle.pem). Default: workload-api.
    #[arg(long, value_name = "workload-api|files:DIR")]
    pub spiffe_source: Option<String>,
    /// The SPIRE Server API (HOST:PORT, e.g. spire-server.spire:8081). Needed with the VM
    /// backend: sandboxes run no SPIRE agent, so the dispatcher mints each VM task's X509-SVID
    /// there (MintX509SVID), which needs its SPIFFE ID in the server's admin_ids.
    #[arg(long, value_name = "HOST:PORT")]
    pub spiffe_server: Option<String>,
    /// The SPIRE server's SPIFFE ID, the only one accepted at --spiffe-server.
    /// Default: spiffe://{trust_domain}/spire/server.
    #[arg(long, value_name = "SPIFFE_ID")]
    pub spiffe_server_id: Option<String>,
    /// The className of the per-task ClusterStaticEntry objects: the class of the cluster's
    /// spire-controller-manager (SPIRE's hardened chart ignores classless objects and names
    /// its class <release namespace>-<release name>). "" for none.
    /// Default: spire-server-spire (that chart installed as `helm install -n spire-server spire`).
    #[arg(long, value_name = "NAME")]
    pub spiffe_class_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The config `dispatch init --out` wrote.
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The dispatcher's config (status.listen, with the same environment overrides).
    #[arg(long, value_name = "FILE", env = "TENANTCI_DISPATCH_CONFIG")]
    pub config: PathBuf,
    /// The status path to GET.
    #[arg(long, value_name = "PATH", default_value = "/healthz")]
    pub path: String,
}

pub async fn run(cmd: DispatchCommand) -> Result<i32> {
    match cmd {
        DispatchCommand::Init(args) => init_cmd(*args).await,
        DispatchCommand::Run(args) => {
            let cfg = Config::load(&args.config)?;
            tenantci_dispatch::run::run(cfg, |listening| {
                println!(
                    "{}",
                    serde_json::to_string(listening).expect("the listening line serializes")
                );
            })
            .await?;
            Ok(0)
        }
        DispatchCommand::Probe(args) => probe(&args).await,
        DispatchCommand::Status(args) => dispatch_status::status(&args).await,
        DispatchCommand::Explain(args) => dispatch_status::explain(&args).await,
        DispatchCommand::Page(args) => super::dispatch_reach::page(&args).await,
        DispatchCommand::Renew(args) => renew(&args).await,
        DispatchCommand::Check(args) => {
            let needs = tenantci_dispatch::check::check(&args.config).await?;
            print!("{}", tenantci_dispatch::check::render(&needs));
            Ok(if needs.is_empty() { 0 } else { 1 })
        }
    }
}

fn read_token_file(path: &Path) -> Result<String> {
    tenantci_core::secret::read_file(
        "the registration token file",
        path,
        Some("put the token from Gitea's Site Administration > Actions > Runners into it"),
    )
}

/// Precedence: the file, then the flag or its environment variable.
fn registration_token(g: &GiteaArgs) -> Result<Option<RegistrationToken>> {
    if let Some(f) = &g.registration_token_file {
        return Ok(Some(RegistrationToken::new(read_token_file(f)?)));
    }
    Ok(g.registration_token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(RegistrationToken::new))
}

/// `--kubeconfig` or `--state-dir`, one of them.
fn cluster_access(c: &ClusterArgs) -> Result<ClusterAccess> {
    match (&c.kubeconfig, &c.state_dir) {
        (Some(file), None) => Ok(ClusterAccess::Kubeconfig(file.clone())),
        (None, Some(dir)) => Ok(ClusterAccess::Gateway {
            state_dir: dir.clone(),
        }),
        (Some(_), Some(_)) => Err(Error::bad_input(
            "--kubeconfig and --state-dir (or TENANTCI_STATE_DIR) are both given; they are two ways to reach the cluster",
        )
        .hint("pass --kubeconfig for any cluster (the dispatcher runs as its ServiceAccount), or --state-dir with --cluster for the gateway's; unset TENANTCI_STATE_DIR if it is set")),
        (None, None) => Err(Error::bad_input("no cluster is given")
            .hint("pass --kubeconfig FILE (a cluster administrator's, for any cluster), or --state-dir DIR --cluster NAME (the gateway's)")),
    }
}

fn inputs(a: &InitArgs) -> Result<Inputs> {
    let access = cluster_access(&a.cluster)?;
    Ok(Inputs {
        gitea_url: a.gitea.gitea_url.clone(),
        gitea_ca_file: a.gitea.gitea_ca.clone(),
        forge: a
            .gitea
            .forge
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(tenantci_core::Error::bad_input)?,
        registration_token: registration_token(&a.gitea)?,
        name: a.gitea.name.clone(),
        labels: a
            .gitea
            .labels
            .iter()
            .map(|l| l.trim().to_string())
            .collect(),
        cluster: init::target::cluster_name(a.cluster.cluster.as_deref(), &access)?,
        access,
        namespace: a.cluster.namespace.clone(),
        dispatcher_namespace: a.cluster.dispatcher_namespace.clone(),
        nats_url: a.nats.nats.clone(),
        nats_secrets_dir: a.nats.nats_secrets_dir.clone(),
        nats_ca_file: a.nats.nats_ca_file.clone(),
        capacities: capacity_flags(&a.nats),
        facade_listen: a.facade.facade_listen,
        facade_url: a.facade.facade_url.clone(),
        executor_image: a.facade.executor_image.clone(),
        runner_command: a.facade.runner_command,
        proxy_image: a.facade.proxy_image.clone(),
        executor_cpu: a.facade.executor_cpu.clone(),
        executor_memory: a.facade.executor_memory.clone(),
        executor_ephemeral_storage: a.facade.executor_ephemeral_storage.clone(),
        webhook_listen: a.webhook.webhook_listen,
        webhook_secret_file: a.webhook.webhook_secret_file.clone(),
        waiting_jobs_scope: a.webhook.waiting_jobs_scope.clone(),
        waiting_jobs_token_file: a.webhook.waiting_jobs_token_file.clone(),
        credential_valid_for: a.cluster.credential_valid_for.clone(),
        vm: vm_inputs(&a.vm),
        identity: tenantci_dispatch::identity::init::IdentityInputs {
            trust_domain: a.identity.spiffe_trust_domain.clone(),
            id_template: a.identity.spiffe_id_template.clone(),
            parent_template: a.identity.spiffe_parent_template.clone(),
            cluster: a.identity.spiffe_cluster.clone(),
            facade_id: a.identity.spiffe_facade_id.clone(),
            source: a.identity.spiffe_source.clone(),
            server_address: a.identity.spiffe_server.clone(),
            server_id: a.identity.spiffe_server_id.clone(),
            class_name: a.identity.spiffe_class_name.clone(),
        },
        cache: tenantci_dispatch::cache::init::CacheInputs {
            dir: a.cache.cache_dir.clone(),
            s3_bucket: a.cache.cache_s3_bucket.clone(),
            s3_endpoint: a.cache.cache_s3_endpoint.clone(),
            s3_region: a.cache.cache_s3_region.clone(),
            s3_credentials_file: a.cache.cache_s3_credentials_file.clone(),
            s3_direct_downloads: a.cache.cache_s3_direct_downloads,
            max_size_mib: a.cache.cache_max_size_mib,
        },
        out: a.out.clone(),
        apply_secret: a.apply_secret,
        secret_out: a.secret_out.clone(),
        pod_config_out: a.pod_config_out.clone(),
        dry_run: a.dry_run,
    })
}

/// The backends' capacities the flags set: the two built-in backends' flags (the CLI is
/// where a backend's flags are named).
fn capacity_flags(n: &NatsArgs) -> Vec<CapacityFlag> {
    [
        (pod::KIND, "--pod-capacity", n.pod_capacity),
        (vm::KIND, "--vm-capacity", n.vm_capacity),
    ]
    .into_iter()
    .filter_map(|(backend, flag, value)| {
        value.map(|value| CapacityFlag {
            backend,
            flag,
            value,
        })
    })
    .collect()
}

/// The VM backend's flags.
fn vm_inputs(v: &VmArgs) -> tenantci_dispatch::backend::vm::init::VmInputs {
    tenantci_dispatch::backend::vm::init::VmInputs {
        opensandbox_url: v.opensandbox_url.clone(),
        api_key_file: v.opensandbox_api_key_file.clone(),
        image: v.vm_image.clone(),
        cpu: v.vm_cpu.clone(),
        memory: v.vm_memory.clone(),
        timeout: v.vm_timeout.clone(),
    }
}

/// Each step's line on stderr as it completes (init and renew), none with `-o json`.
fn step_printer(json: bool) -> impl FnMut(&init::Step) {
    move |s| {
        if !json {
            eprintln!("{:<15} {:<16} {}", s.step, s.outcome, s.detail);
        }
    }
}

async fn init_cmd(a: InitArgs) -> Result<i32> {
    let inputs = inputs(&a)?;
    let json = a.output.is_json();
    let hb = init::run(&inputs, step_printer(json)).await?;
    if json {
        output::print_json(&hb)?;
        return Ok(0);
    }
    println!(
        "Dispatcher config{}: {}",
        if hb.dry_run {
            " (dry run: nothing was written, applied or registered)"
        } else {
            ""
        },
        hb.config.display()
    );
    if let Some(r) = &hb.runner {
        println!("  runner       `{}` id {} uuid {}", r.name, r.id, r.uuid);
    }
    println!("  cluster      {} ({})", hb.cluster, hb.server);
    println!("  namespace    {}", hb.namespace);
    if hb.dispatcher_namespace != hb.namespace {
        println!(
            "  dispatcher   {} (its Lease, Deployment, ConfigMap, Secret)",
            hb.dispatcher_namespace
        );
    }
    println!("  facade       {}", hb.facade_url);
    match &hb.bao_kv_put {
        // In the cluster: the Deployment runs it (runbook §2).
        Some(bao) => {
            println!(
                "next: kubectl apply -k manifests/dispatch (with --apply-secret; or apply --secret-out's manifest first)"
            );
            println!("  with OpenBao (manifests/components/openbao) instead: {bao}");
        }
        None => println!(
            "next: tenantci dispatch run --config {}",
            hb.config.display()
        ),
    }
    Ok(0)
}

fn renew_inputs(a: &RenewArgs) -> Result<renew::Inputs> {
    let gateway = match (&a.state_dir, &a.cluster) {
        (Some(state_dir), Some(cluster)) => Some(renew::Gateway {
            state_dir: state_dir.clone(),
            cluster: cluster.clone(),
        }),
        (None, None) => None,
        _ => {
            return Err(Error::bad_input("--state-dir and --cluster go together")
                .hint("pass both (the gateway's ClientCA for the credential), or neither"));
        }
    };
    let within = match &a.within {
        Some(w) => Some(tenantci_core::duration::parse_positive(w).map_err(|e| {
            Error::bad_input(format!("--within {w:?} is not a positive duration ({e})"))
                .hint("pass a Go duration such as 336h or 90m")
        })?),
        None => None,
    };
    Ok(renew::Inputs {
        config: a.config.clone(),
        gateway,
        policy: renew::Policy {
            within,
            force: a.force,
        },
    })
}

async fn renew(a: &RenewArgs) -> Result<i32> {
    let inputs = renew_inputs(a)?;
    let json = a.output.is_json();
    let hb = renew::run(&inputs, step_printer(json)).await?;
    if json {
        output::print_json(&hb)?;
    } else if hb.renewed {
        println!(
            "renewed; a running `dispatch run` takes the new files up within a minute (or at once with SIGHUP)"
        );
    } else {
        println!("nothing due: no file was changed");
    }
    Ok(0)
}

async fn probe(a: &ProbeArgs) -> Result<i32> {
    let cfg = Config::load(&a.config)?;
    let path = if a.path.starts_with('/') {
        a.path.clone()
    } else {
        format!("/{}", a.path)
    };
    let body = status_api::probe(cfg.status.listen, &path).await?;
    println!("{}", body.trim_end());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_wins_over_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "from-file\n").unwrap();
        let g = GiteaArgs {
            gitea_url: "http://g".into(),
            gitea_ca: None,
            forge: None,
            registration_token_file: Some(f),
            registration_token: Some("from-flag".into()),
            name: None,
            labels: vec![],
        };
        assert_eq!(
            registration_token(&g).unwrap().unwrap().expose(),
            "from-file"
        );
        let g = GiteaArgs {
            registration_token_file: None,
            ..g
        };
        assert_eq!(
            registration_token(&g).unwrap().unwrap().expose(),
            "from-flag"
        );
    }

    #[test]
    fn renew_refuses_half_a_gateway_and_a_bad_within() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(
                ["tenantci", "dispatch", "renew", "--config", "c.toml"]
                    .iter()
                    .chain(args),
            )
            .unwrap();
            match cli.command {
                crate::cli::Command::Dispatch(DispatchCommand::Renew(a)) => renew_inputs(&a),
                _ => unreachable!(),
            }
        };
        let e = parse(&["--state-dir", "/s"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("--state-dir and --cluster"));
        let e = parse(&["--within", "2d"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("--within"), "{}", e.message());
        let ok = parse(&["--state-dir", "/s", "--cluster", "ci", "--within", "336h"]).unwrap();
        assert_eq!(
            ok.policy.within,
            Some(std::time::Duration::from_secs(336 * 3600))
        );
        assert_eq!(ok.gateway.unwrap().cluster, "ci");
    }
}
