//! `dispatch init`'s inputs, checked without touching anything (every refusal names the flag
//! and the fix), the file names beside the config, and the config it writes. Pure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::{self, Config, Paths, files};
use crate::sizing::RunnerCommand;
use crate::sizing::resources::Resources;
use tenantci_core::input::url_host;
use tenantci_core::node_image::NodeImage;
use tenantci_core::{Error, Result};

/// A registration token: sent to Gitea once, never written or logged.
#[derive(Clone)]
pub struct RegistrationToken(String);

impl RegistrationToken {
    /// The token as given (`--registration-token`, its file or its variable).
    pub fn new(t: impl Into<String>) -> Self {
        RegistrationToken(t.into())
    }
    /// Only for the Register request.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RegistrationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegistrationToken([redacted])")
    }
}

/// A backend's capacity set by a flag of `dispatch init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityFlag {
    /// The backend.
    pub backend: crate::backend_kind::BackendKind,
    /// The flag, for the message refusing its value (`--pod-capacity`).
    pub flag: &'static str,
    /// Its value.
    pub value: u32,
}

/// What the operator asked for.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `--gitea-url`: Gitea's base URL.
    pub gitea_url: String,
    /// `--gitea-ca`: the CA (PEM) Gitea's certificate chains to, when the system's roots do
    /// not hold it; init's own Gitea calls trust it, and the config names it (gitea.ca_file).
    /// None: the existing config's, else the system's roots.
    pub gitea_ca_file: Option<PathBuf>,
    /// `--forge`; None: read from the forge's version API before anything is written.
    pub forge: Option<tenantci_core::forge::Forge>,
    /// None is fine while `scheduler.json` exists (the registration is kept).
    pub registration_token: Option<RegistrationToken>,
    /// None: the kept registration's name, else `tenantci-dispatch-<cluster>`.
    pub name: Option<String>,
    /// `--labels`: the labels registered at Gitea (`init` drops `vm` while the VM backend is
    /// off, and adds every class label).
    pub labels: Vec<String>,
    /// The gateway's state dir, or an admin kubeconfig of any cluster.
    pub access: super::target::ClusterAccess,
    /// The cluster's name (the runner's default name, SPIRE's default cluster).
    pub cluster: String,
    /// `--namespace`: the executors' namespace, where the dispatcher's RBAC is applied.
    pub namespace: String,
    /// `--dispatcher-namespace`: the dispatcher's own (its Lease; in the cluster its
    /// Deployment, ConfigMap and Secret). None: the existing config's, else
    /// [`default_dispatcher_namespace`].
    pub dispatcher_namespace: Option<String>,
    /// `--nats`: the NATS server's URL.
    pub nats_url: String,
    /// `--nats-secrets-dir`: the NATS users' password files (`tenantci queue nats-config`).
    pub nats_secrets_dir: PathBuf,
    /// `--nats-ca-file`: the CA the NATS server's TLS certificate chains to; None: the
    /// existing config's, else the system's roots.
    pub nats_ca_file: Option<PathBuf>,
    /// Backends' capacities the flags set, with the flag that set each (`--pod-capacity`);
    /// a backend not here keeps the existing config's value, else its default.
    pub capacities: Vec<CapacityFlag>,
    /// `--facade-listen`: where the facade listens.
    pub facade_listen: SocketAddr,
    /// `--facade-url`: the URL executors reach the facade at; None: `https://` and the
    /// listen address (refused when that is unspecified).
    pub facade_url: Option<String>,
    /// `--executor-image`: the runner image, pinned by digest.
    pub executor_image: String,
    /// `--runner-command`; None: the existing config's, else the forge's own runner
    /// ([`runner_command`]).
    pub runner_command: Option<RunnerCommand>,
    /// None: the existing config's value (required when there is none).
    pub proxy_image: Option<String>,
    /// `--executor-cpu`: the runner container's CPU request; None: the existing config's,
    /// else derived from the node image.
    pub executor_cpu: Option<String>,
    /// `--executor-memory`: its memory request; None as for the CPU.
    pub executor_memory: Option<String>,
    /// `--executor-ephemeral-storage`: its ephemeral-storage request; None as for the CPU.
    pub executor_ephemeral_storage: Option<String>,
    /// The webhook receiver's address and secret file, both or neither (neither: an
    /// existing config's webhook is kept).
    pub webhook_listen: Option<SocketAddr>,
    /// `--webhook-secret-file`: see `webhook_listen`.
    pub webhook_secret_file: Option<PathBuf>,
    /// Forgejo's waiting-jobs API: its scope and API token file, both or neither (neither:
    /// an existing config's `[waiting_jobs]` is kept).
    pub waiting_jobs_scope: Option<String>,
    /// `--waiting-jobs-token-file`: see `waiting_jobs_scope`.
    pub waiting_jobs_token_file: Option<PathBuf>,
    /// Lifetime of the dispatcher's client certificate (Go duration).
    pub credential_valid_for: String,
    /// The VM backend's flags (`--opensandbox-*`, `--vm-*`).
    pub vm: crate::backend::vm::init::VmInputs,
    /// Executor identity's flags (`--spiffe-*`).
    pub identity: crate::identity::init::IdentityInputs,
    /// The shared actions cache's flags (`--cache-*`).
    pub cache: crate::cache::init::CacheInputs,
    /// `--out`: the config file to write; the other files go beside it.
    pub out: PathBuf,
    /// `--apply-secret`: apply the ConfigMap and Secret the in-cluster Deployment mounts
    /// (`in_cluster`) with the admin client.
    pub apply_secret: bool,
    /// `--secret-out`: write them as a manifest (0600) instead, or as well.
    pub secret_out: Option<PathBuf>,
    /// `--pod-config-out`: write the Pod's config alone (the ConfigMap's key), for an overlay
    /// that generates the ConfigMap itself (manifests/overlays/openbao).
    pub pod_config_out: Option<PathBuf>,
    /// `--dry-run`: phase one only, and the plan reported.
    pub dry_run: bool,
}

/// The inputs after the checks.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The files beside `--out`.
    pub paths: Paths,
    /// The URL executors reach the facade at, without a trailing `/`.
    pub facade_url: String,
    /// The facade URL's host, brackets stripped: what the serving cert must cover.
    pub facade_host: String,
    /// `--nats-secrets-dir`, absolute.
    pub nats_secrets_dir: PathBuf,
    /// `--nats-ca-file`, absolute.
    pub nats_ca_file: Option<PathBuf>,
    /// `--gitea-ca`, absolute.
    pub gitea_ca_file: Option<PathBuf>,
    /// `--secret-out`, absolute.
    pub secret_out: Option<PathBuf>,
    /// `--pod-config-out`, absolute.
    pub pod_config_out: Option<PathBuf>,
    /// `--credential-valid-for`, parsed.
    pub credential_valid_for: std::time::Duration,
    /// `--webhook-listen` and the absolute `--webhook-secret-file`, when given.
    pub webhook: Option<(SocketAddr, PathBuf)>,
    /// `--waiting-jobs-scope` (checked) and the absolute `--waiting-jobs-token-file`.
    pub waiting_jobs: Option<(String, PathBuf)>,
}

/// Checks every flag that needs no file system or network.
pub fn check(i: &Inputs) -> Result<Checked> {
    check_registration(i)?;
    let (facade_url, facade_host) = check_facade_url(i)?;
    crate::task::spec::check_image_digest(&i.executor_image)
        .map_err(|e| e.hint("pass --executor-image IMAGE@sha256:<64 hex digits> (`docker buildx imagetools inspect IMAGE` prints the digest); a tag can be moved under a running dispatcher"))?;
    let credential_valid_for =
        tenantci_core::pki::policy::parse_valid_for(&i.credential_valid_for)?;
    let out = std::path::absolute(&i.out).map_err(|e| {
        Error::bad_input(format!("cannot resolve --out `{}`", i.out.display())).caused_by(e)
    })?;
    if out.file_name().is_none() || out.is_dir() {
        return Err(Error::bad_input(format!(
            "--out `{}` is a directory, not the config file",
            i.out.display()
        ))
        .hint("pass the config file to write, e.g. --out /etc/tenantci/dispatch/config.toml"));
    }
    let nats_secrets_dir = absolute("--nats-secrets-dir", &i.nats_secrets_dir)?;
    let nats_ca_file = optional_absolute("--nats-ca-file", i.nats_ca_file.as_deref())?;
    let gitea_ca_file = optional_absolute("--gitea-ca", i.gitea_ca_file.as_deref())?;
    let secret_out = check_out_file("--secret-out", i.secret_out.as_deref(), &out)?;
    let pod_config_out = check_out_file("--pod-config-out", i.pod_config_out.as_deref(), &out)?;
    if pod_config_out.is_some() && pod_config_out == secret_out {
        return Err(Error::bad_input(
            "--pod-config-out and --secret-out name the same file; each needs its own",
        )
        .hint("e.g. --secret-out /root/dispatch/in-cluster.yaml --pod-config-out my-overlay/config.toml"));
    }
    Ok(Checked {
        paths: Paths::beside(&out),
        secret_out,
        pod_config_out,
        facade_url,
        facade_host,
        nats_secrets_dir,
        nats_ca_file,
        gitea_ca_file,
        credential_valid_for,
        webhook: check_webhook(i)?,
        waiting_jobs: check_waiting_jobs(i)?,
    })
}

/// The registration's flags: Gitea's URL, the cluster and namespace, the labels and name,
/// NATS, and the capacities.
fn check_registration(i: &Inputs) -> Result<()> {
    if url_host(&i.gitea_url, &["http", "https"]).is_none() {
        return Err(Error::bad_input(format!("--gitea-url `{}` is not an http(s):// URL with a host", i.gitea_url))
            .hint("pass Gitea's base URL, e.g. https://gitea.example.com (the RunnerService is under /api/actions)"));
    }
    tenantci_core::gateway::layout::validate_cluster_name(&i.cluster)?;
    if !tenantci_core::dns::is_label(&i.namespace) {
        return Err(Error::bad_input(format!(
            "--namespace `{}` is not a DNS label",
            tenantci_core::input::shown(&i.namespace)
        ))
        .hint("use 1-63 lower-case letters, digits and `-`, e.g. `dynamic-runner`"));
    }
    if let Some(d) = i
        .dispatcher_namespace
        .as_deref()
        .filter(|d| !tenantci_core::dns::is_label(d))
    {
        return Err(Error::bad_input(format!(
            "--dispatcher-namespace `{}` is not a DNS label",
            tenantci_core::input::shown(d)
        ))
        .hint("use 1-63 lower-case letters, digits and `-`, e.g. `tenantci-system`"));
    }
    if i.labels.is_empty() {
        return Err(Error::bad_input("--labels is empty")
            .hint("pass the labels jobs ask for in runs-on, e.g. --labels self-hosted,pod"));
    }
    if let Some(bad) = i
        .labels
        .iter()
        .find(|l| l.is_empty() || l.contains(char::is_whitespace))
    {
        return Err(Error::bad_input(format!(
            "--labels has the label `{bad}`, which is empty or has spaces"
        ))
        .hint("pass comma-separated labels without spaces, e.g. --labels self-hosted,pod"));
    }
    if let Some(name) = &i.name
        && name.trim().is_empty()
    {
        return Err(Error::bad_input("--name is empty")
            .hint("pass the name the runner gets at Gitea, or leave --name out"));
    }
    if url_host(&i.nats_url, &["nats", "tls"]).is_none() {
        return Err(Error::bad_input(format!(
            "--nats `{}` is not a nats:// or tls:// URL",
            i.nats_url
        ))
        .hint("pass the NATS server, e.g. nats://127.0.0.1:4222"));
    }
    for c in &i.capacities {
        if c.value == 0 {
            return Err(Error::bad_input(format!("{} is 0", c.flag))
                .hint("pass at least 1 (the most executors of that kind at once)"));
        }
    }
    Ok(())
}

/// The facade URL executors are given (from `--facade-url`, else `--facade-listen`), and its
/// host, which the facade's certificate must cover.
fn check_facade_url(i: &Inputs) -> Result<(String, String)> {
    let facade_url = match &i.facade_url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None if i.facade_listen.ip().is_unspecified() => {
            return Err(Error::bad_input(format!(
                "--facade-listen {} listens on every address, so it names no address executors can reach",
                i.facade_listen
            ))
            .hint("pass --facade-url https://<address or name executors use>:<port> (its host goes into the facade's certificate)"));
        }
        None => format!("https://{}", i.facade_listen),
    };
    let Some(facade_host) = url_host(&facade_url, &["https"]) else {
        return Err(Error::bad_input(format!(
            "--facade-url `{facade_url}` is not an https:// URL with a host"
        ))
        .hint(
            "executors verify the facade by its certificate: pass https://<address or name>:<port>",
        ));
    };
    Ok((facade_url, facade_host))
}

/// The facade Service's name in the manifests (`manifests/dispatch/deployment.yaml`).
pub const FACADE_SERVICE: &str = "tenantci-dispatcher-facade";

/// A facade URL that names the facade Service by its cluster DNS name
/// (`tenantci-dispatcher-facade.<namespace>.svc...`) must name the dispatcher's namespace, where
/// the Service is: executors in theirs would otherwise call a name that does not resolve (the
/// mistake an install that moved to a namespace of its own is open to). Any other host (an
/// address, a name of your own) is the operator's to route.
pub fn check_facade_service(facade_url: &str, dispatcher_namespace: &str) -> Result<()> {
    let host = url_host(facade_url, &["https"]).unwrap_or_default();
    let mut labels = host.split('.');
    if labels.next() != Some(FACADE_SERVICE) {
        return Ok(());
    }
    match labels.next() {
        Some(ns) if ns != dispatcher_namespace => Err(Error::bad_input(format!(
            "--facade-url `{facade_url}` names the Service {FACADE_SERVICE} in namespace `{ns}`, but the dispatcher and its facade Service are in `{dispatcher_namespace}`"
        ))
        .hint(format!(
            "pass --facade-url https://{FACADE_SERVICE}.{dispatcher_namespace}.svc:8443 (executors reach it across namespaces), or --dispatcher-namespace {ns}; nothing was written"
        ))),
        _ => Ok(()),
    }
}

/// `flag`'s path made absolute (against the working directory).
fn absolute(flag: &str, p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| {
        Error::bad_input(format!("cannot resolve {flag} `{}`", p.display())).caused_by(e)
    })
}

fn optional_absolute(flag: &str, p: Option<&Path>) -> Result<Option<PathBuf>> {
    p.map(|p| absolute(flag, p)).transpose()
}

/// `--secret-out` / `--pod-config-out`: a file that is neither a directory nor the config
/// itself (which it would overwrite with the Pod's view).
fn check_out_file(flag: &str, given: Option<&Path>, config: &Path) -> Result<Option<PathBuf>> {
    let Some(f) = given else { return Ok(None) };
    let abs = absolute(flag, f)?;
    if abs.file_name().is_none() || abs.is_dir() || abs == config {
        let example = match flag {
            "--secret-out" => "/root/dispatch/in-cluster.yaml",
            _ => "my-overlay/config.toml",
        };
        return Err(Error::bad_input(format!(
            "{flag} `{}` is a directory or the config itself, not a file to write",
            f.display()
        ))
        .hint(format!("pass the file to write, e.g. {flag} {example}")));
    }
    Ok(Some(abs))
}

/// The executor section: the flags over the existing config's keys over the defaults, with
/// resources derived from the node image when the state dir has one.
fn executor(
    i: &Inputs,
    existing: Option<&Config>,
    node: Option<&NodeImage>,
) -> Result<crate::sizing::ExecutorSettings> {
    let proxy_image = match (&i.proxy_image, existing) {
        (Some(p), _) => p.clone(),
        (None, Some(e)) => e.executor.proxy_image.clone(),
        (None, None) => {
            return Err(Error::bad_input("--proxy-image is not given and there is no config to keep it from")
                .hint("pass --proxy-image TENANTCI_IMAGE@sha256:<64 hex digits>: the image of this tenantci build, whose `tenantci executor-proxy` runs beside each executor"));
        }
    };
    let mut x = match existing {
        Some(e) => crate::sizing::ExecutorSettings {
            image: i.executor_image.clone(),
            proxy_image,
            ..e.executor.clone()
        },
        None => {
            let mut x =
                crate::sizing::ExecutorSettings::with_images(i.executor_image.clone(), proxy_image);
            x.resources = node.map(Resources::for_node).unwrap_or_default();
            x
        }
    };
    x.runner_command = runner_command(i, existing).0;
    let r = &mut x.resources;
    for (flag, field) in [
        (&i.executor_cpu, &mut r.cpu),
        (&i.executor_memory, &mut r.memory),
        (&i.executor_ephemeral_storage, &mut r.ephemeral_storage),
    ] {
        if let Some(v) = flag {
            *field = v.clone();
        }
    }
    Ok(x)
}

/// `[webhook]`: the flags name the receiver and its tuning is kept from the existing file;
/// without the flags an existing section is kept whole.
fn webhook(c: &Checked, tuning: Option<&Config>) -> Option<crate::claim::settings::Webhook> {
    use crate::claim::settings::Webhook;
    let kept = tuning.and_then(|e| e.webhook.as_ref());
    let Some((listen, secret_file)) = &c.webhook else {
        return kept.cloned();
    };
    let tuned = kept
        .cloned()
        .unwrap_or_else(|| Webhook::new(*listen, secret_file.clone()));
    Some(Webhook {
        listen: *listen,
        secret_file: secret_file.clone(),
        ..tuned
    })
}

/// Where the config's runner command came from; `init` says which in its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerCommandFrom {
    /// `--runner-command`.
    Flag,
    /// The existing config's `executor.runner_command` (an operator's edit is kept).
    Kept,
    /// Nothing given: the forge's own runner (`RunnerCommand::of_forge`).
    Forge,
}

/// The executors' runner command (pure): `--runner-command`, else the existing config's,
/// else the forge's own runner, so a Forgejo gets `forgejo-runner` without being asked.
pub fn runner_command(i: &Inputs, existing: Option<&Config>) -> (RunnerCommand, RunnerCommandFrom) {
    match (i.runner_command, existing) {
        (Some(r), _) => (r, RunnerCommandFrom::Flag),
        (None, Some(e)) => (e.executor.runner_command, RunnerCommandFrom::Kept),
        (None, None) => (
            RunnerCommand::of_forge(i.forge.unwrap_or_default()),
            RunnerCommandFrom::Forge,
        ),
    }
}

/// The `runner` line's detail: the command, why it is that one, and, where it is not the
/// forge's own runner, what the executor image must then hold (pure).
pub fn runner_command_detail(
    forge: tenantci_core::forge::Forge,
    (command, from): (RunnerCommand, RunnerCommandFrom),
) -> String {
    let own = RunnerCommand::of_forge(forge);
    let forge = match forge {
        tenantci_core::forge::Forge::Gitea => "Gitea",
        tenantci_core::forge::Forge::Forgejo => "Forgejo",
    };
    let why = match from {
        RunnerCommandFrom::Flag => "as --runner-command says".to_string(),
        RunnerCommandFrom::Kept => "kept from the existing config".to_string(),
        RunnerCommandFrom::Forge => format!("{forge}'s own runner; --runner-command changes it"),
    };
    let note = if command == own {
        String::new()
    } else {
        format!(
            "; {forge}'s own runner is {}: the executor image must ship {}",
            own.binary(),
            command.binary()
        )
    };
    format!(
        "executor.runner_command = {} ({why}){note}",
        command.binary()
    )
}

fn check_webhook(i: &Inputs) -> Result<Option<(SocketAddr, PathBuf)>> {
    match (i.webhook_listen, &i.webhook_secret_file) {
        (None, None) => Ok(None),
        (Some(listen), Some(file)) => {
            let file = std::path::absolute(file).map_err(|e| {
                Error::bad_input(format!(
                    "cannot resolve --webhook-secret-file `{}`",
                    file.display()
                ))
                .caused_by(e)
            })?;
            Ok(Some((listen, file)))
        }
        (Some(_), None) => Err(Error::bad_input("--webhook-listen is given without --webhook-secret-file")
            .hint("pass --webhook-secret-file FILE holding the secret typed into the Gitea webhook (an unsigned webhook is refused)")),
        (None, Some(_)) => Err(Error::bad_input("--webhook-secret-file is given without --webhook-listen")
            .hint("pass --webhook-listen HOST:PORT, where Gitea's deliveries arrive")),
    }
}

fn check_waiting_jobs(i: &Inputs) -> Result<Option<(String, PathBuf)>> {
    match (&i.waiting_jobs_scope, &i.waiting_jobs_token_file) {
        (None, None) => Ok(None),
        (Some(scope), Some(file)) => {
            let parsed: tenantci_core::forge::waiting::Scope = scope.parse().map_err(|e| {
                Error::bad_input(format!("--waiting-jobs-scope: {e}"))
                    .hint("pass admin, user, orgs/ORG or repos/OWNER/REPO: the scope the runner is registered in")
            })?;
            let file = absolute("--waiting-jobs-token-file", file)?;
            Ok(Some((parsed.to_string(), file)))
        }
        (Some(_), None) => Err(Error::bad_input("--waiting-jobs-scope is given without --waiting-jobs-token-file")
            .hint("pass --waiting-jobs-token-file FILE (0600) holding a Forgejo API token that may read that scope's runners")),
        (None, Some(_)) => Err(Error::bad_input("--waiting-jobs-token-file is given without --waiting-jobs-scope")
            .hint("pass --waiting-jobs-scope admin|user|orgs/ORG|repos/OWNER/REPO")),
    }
}

/// The dispatcher's namespace when neither `--dispatcher-namespace` nor an existing config
/// names one: in the cluster (`--kubeconfig`) a namespace of its own, `tenantci-system`, so a
/// reader of its Lease or Pods is given nothing where the jobs run; on the gateway path the
/// executors' (the dispatcher runs on the host; only its Lease is in the cluster, where it
/// always was).
pub fn default_dispatcher_namespace(i: &Inputs) -> String {
    match &i.access {
        super::target::ClusterAccess::Kubeconfig(_) => {
            super::manifests::DEFAULT_DISPATCHER_NAMESPACE.to_string()
        }
        super::target::ClusterAccess::Gateway { .. } => i.namespace.clone(),
    }
}

/// The dispatcher's namespace init writes: the flag, else the existing config's (a config
/// without the key: the executors', as before it existed), else the default. Written only when
/// it differs from the executors' (`cluster.dispatcher_namespace` absent otherwise).
fn dispatcher_namespace(i: &Inputs, existing: Option<&Config>) -> Option<String> {
    let d = i
        .dispatcher_namespace
        .clone()
        .or_else(|| existing.map(|e| e.cluster.dispatcher_namespace().to_string()))
        .unwrap_or_else(|| default_dispatcher_namespace(i));
    (d != i.namespace).then_some(d)
}

/// The config `init` writes: the flags, relative file names from [`files`], and the tuning
/// keys (intervals, status, leader timings; capacities unless given; the executor section
/// but its image) of an existing config, so a re-run keeps the operator's edits.
pub fn config(
    i: &Inputs,
    c: &Checked,
    runner_name: &str,
    existing: Option<&Config>,
    node: Option<&NodeImage>,
) -> Result<Config> {
    let mut capacity = existing.map(|e| e.capacity.clone()).unwrap_or_default();
    for c in &i.capacities {
        capacity.set(c.backend, c.value);
    }
    let tuning = existing;
    Ok(Config {
        version: config::VERSION,
        gitea: gitea_section(i, c, runner_name, tuning),
        cluster: config::Cluster {
            // In the cluster (`--kubeconfig`): none, the ServiceAccount's in-cluster config.
            kubeconfig: match &i.access {
                super::target::ClusterAccess::Gateway { .. } => Some(files::KUBECONFIG.into()),
                super::target::ClusterAccess::Kubeconfig(_) => None,
            },
            namespace: i.namespace.clone(),
            dispatcher_namespace: dispatcher_namespace(i, existing),
            resync: None,
        },
        nats: nats_section(i, c, tuning),
        capacity,
        facade: crate::facade::settings::Facade {
            listen: i.facade_listen,
            url: c.facade_url.clone(),
            capability_key_file: files::CAPABILITY_KEY.into(),
            ca_cert_file: files::FACADE_CA_CERT.into(),
            cert_file: files::FACADE_CERT.into(),
            key_file: files::FACADE_KEY.into(),
        },
        executor: executor(i, existing, node)?,
        status: tuning.map(|e| e.status.clone()).unwrap_or_default(),
        leader: tuning.map(|e| e.leader.clone()).unwrap_or_default(),
        webhook: webhook(c, tuning),
        waiting_jobs: waiting_jobs_section(c, tuning),
        claim: tuning.map(|e| e.claim.clone()).unwrap_or_default(),
        vm: crate::backend::vm::init::section(&i.vm)?,
        // The facade's SPIFFE ID names the ServiceAccount's namespace: the dispatcher's.
        identity: crate::identity::init::section(
            &i.identity,
            dispatcher_namespace(i, existing)
                .as_deref()
                .unwrap_or(&i.namespace),
            &i.cluster,
            i.vm.opensandbox_url.is_some(),
        )?,
        // `--cache-dir` / `--cache-s3-bucket` turn it on; without them an existing section
        // (an operator's or an earlier init's) is kept across re-runs.
        cache: crate::cache::init::section(&i.cache, tuning.and_then(|e| e.cache.as_ref()))?,
        // An operator's `[history]` bounds are kept as they are.
        history: tuning.map(|e| e.history.clone()).unwrap_or_default(),
    })
}

/// A timing the operator may have tuned: the existing config's, else the default.
fn kept(
    tuning: Option<&Config>,
    f: fn(&Config) -> tenantci_core::duration::GoDuration,
    default: tenantci_core::duration::GoDuration,
) -> tenantci_core::duration::GoDuration {
    tuning.map(f).unwrap_or(default)
}

/// `[gitea]`: the flags, with the timings and CA file kept across re-runs of init.
fn gitea_section(
    i: &Inputs,
    c: &Checked,
    runner_name: &str,
    tuning: Option<&Config>,
) -> crate::claim::settings::Gitea {
    use crate::claim::settings::defaults as g;
    crate::claim::settings::Gitea {
        url: i.gitea_url.trim_end_matches('/').to_string(),
        forge: i.forge.unwrap_or_default(),
        runner_name: runner_name.to_string(),
        labels: i.labels.clone(),
        credential_file: files::SCHEDULER_CREDENTIAL.into(),
        fetch_interval: kept(
            tuning,
            |e| e.gitea.fetch_interval.clone(),
            g::fetch_interval(),
        ),
        fetch_interval_idle: kept(
            tuning,
            |e| e.gitea.fetch_interval_idle.clone(),
            g::fetch_interval_idle(),
        ),
        keepalive_interval: kept(
            tuning,
            |e| e.gitea.keepalive_interval.clone(),
            g::keepalive_interval(),
        ),
        // `--gitea-ca`, else the operator's setting, kept across re-runs of init.
        ca_file: match &c.gitea_ca_file {
            Some(f) => Some(f.clone()),
            None => tuning.and_then(|e| e.gitea.ca_file.clone()),
        },
    }
}

/// `[nats]`: the flags, with `ack_wait` and the CA file kept across re-runs of init.
fn nats_section(i: &Inputs, c: &Checked, tuning: Option<&Config>) -> config::Nats {
    config::Nats {
        url: i.nats_url.clone(),
        secrets_dir: c.nats_secrets_dir.clone(),
        sealing_key_file: files::SEALING_KEY.into(),
        ack_wait: kept(
            tuning,
            |e| e.nats.ack_wait.clone(),
            config::defaults::ack_wait(),
        ),
        ca_file: match &c.nats_ca_file {
            Some(f) => Some(f.clone()),
            None => tuning.and_then(|e| e.nats.ca_file.clone()),
        },
    }
}

/// `[waiting_jobs]`: from the flags (the interval kept), else kept across re-runs of init.
fn waiting_jobs_section(
    c: &Checked,
    tuning: Option<&Config>,
) -> Option<crate::claim::settings::WaitingJobs> {
    match &c.waiting_jobs {
        Some((scope, token_file)) => Some(crate::claim::settings::WaitingJobs {
            scope: scope.clone(),
            token_file: token_file.clone(),
            interval: tuning
                .and_then(|e| e.waiting_jobs.as_ref())
                .map(|w| w.interval.clone())
                .unwrap_or_else(crate::claim::settings::defaults::waiting_jobs_interval),
        }),
        None => tuning.and_then(|e| e.waiting_jobs.clone()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend_kind::BackendKind;

    const POD: BackendKind = BackendKind::new("pod");

    pub fn inputs() -> Inputs {
        Inputs {
            gitea_url: "https://gitea.example.com/".into(),
            gitea_ca_file: None,
            forge: None,
            registration_token: Some(RegistrationToken::new("reg-token")),
            name: None,
            labels: vec!["self-hosted".into(), "pod".into()],
            access: crate::init::target::ClusterAccess::Gateway {
                state_dir: "/var/lib/socialweb".into(),
            },
            cluster: "ci".into(),
            namespace: "dynamic-runner".into(),
            dispatcher_namespace: None,
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_secrets_dir: "/etc/tenantci/nats".into(),
            nats_ca_file: None,
            capacities: Vec::new(),
            facade_listen: "127.0.0.1:8443".parse().unwrap(),
            facade_url: None,
            executor_image: format!("gitea/act_runner@sha256:{}", "b".repeat(64)),
            runner_command: None,
            proxy_image: Some(format!("tenantci@sha256:{}", "d".repeat(64))),
            executor_cpu: None,
            executor_memory: None,
            executor_ephemeral_storage: None,
            webhook_listen: None,
            webhook_secret_file: None,
            waiting_jobs_scope: None,
            waiting_jobs_token_file: None,
            credential_valid_for: "720h".into(),
            vm: Default::default(),
            identity: Default::default(),
            cache: Default::default(),
            out: "/etc/tenantci/dispatch/config.toml".into(),
            apply_secret: false,
            secret_out: None,
            pod_config_out: None,
            dry_run: false,
        }
    }

    /// The dispatcher's namespace init writes: a gateway host keeps one namespace (no key); the
    /// `--kubeconfig` path gets `tenantci-system`; an existing config keeps its own (without
    /// the key: the executors', so a re-run never moves an install); the flag wins.
    #[test]
    fn the_dispatcher_namespace_is_the_flag_else_the_kept_one_else_the_path_s_default() {
        let gateway = inputs();
        assert_eq!(dispatcher_namespace(&gateway, None), None);
        let in_cluster = Inputs {
            access: crate::init::target::ClusterAccess::Kubeconfig("/root/admin.conf".into()),
            ..inputs()
        };
        assert_eq!(
            dispatcher_namespace(&in_cluster, None).as_deref(),
            Some("tenantci-system")
        );
        let old = crate::config::tests::sample();
        assert_eq!(old.cluster.dispatcher_namespace, None);
        assert_eq!(dispatcher_namespace(&in_cluster, Some(&old)), None, "kept");
        let moved = Inputs {
            dispatcher_namespace: Some("ci-system".into()),
            ..in_cluster
        };
        assert_eq!(
            dispatcher_namespace(&moved, Some(&old)).as_deref(),
            Some("ci-system")
        );
        let same = Inputs {
            dispatcher_namespace: Some("dynamic-runner".into()),
            ..inputs()
        };
        assert_eq!(dispatcher_namespace(&same, None), None, "no key: the same");
        let bad = Inputs {
            dispatcher_namespace: Some("Ci_System".into()),
            ..inputs()
        };
        let e = check(&bad).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message()
                .contains("--dispatcher-namespace `Ci_System` is not a DNS label")
        );
    }

    #[test]
    fn a_facade_service_url_must_name_the_dispatcher_s_namespace() {
        let url = "https://tenantci-dispatcher-facade.dynamic-runner.svc:8443";
        assert!(check_facade_service(url, "dynamic-runner").is_ok());
        let e = check_facade_service(url, "tenantci-system").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message().contains(
                "in namespace `dynamic-runner`, but the dispatcher and its facade Service are in `tenantci-system`"
            ),
            "{}",
            e.message()
        );
        assert!(
            e.hint_text()
                .unwrap()
                .contains("https://tenantci-dispatcher-facade.tenantci-system.svc:8443")
        );
        for other in [
            "https://10.0.0.1:8443",
            "https://dispatch.ci.internal:8443",
            "https://tenantci-dispatcher-facade:8443",
        ] {
            assert!(
                check_facade_service(other, "tenantci-system").is_ok(),
                "{other}"
            );
        }
    }

    #[test]
    fn the_secret_manifest_and_the_gitea_ca_are_files_made_absolute() {
        let mut i = inputs();
        i.secret_out = Some(i.out.clone());
        let e = check(&i).unwrap_err();
        assert!(e.message().contains("--secret-out"), "{}", e.message());
        i.secret_out = Some("/".into());
        assert!(check(&i).is_err(), "a directory");
        i.secret_out = Some("in-cluster.yaml".into());
        i.gitea_ca_file = Some("gitea-ca.pem".into());
        let c = check(&i).unwrap();
        assert!(c.secret_out.unwrap().is_absolute());
        let ca = c.gitea_ca_file.clone().unwrap();
        assert!(ca.is_absolute());
        let cfg = config(&i, &check(&i).unwrap(), "r", None, None).unwrap();
        assert_eq!(cfg.gitea.ca_file, Some(ca), "the config names the CA");
    }

    #[test]
    fn the_pod_config_is_its_own_file_neither_the_config_nor_the_manifest() {
        let mut i = inputs();
        i.pod_config_out = Some(i.out.clone());
        let e = check(&i).unwrap_err();
        assert!(e.message().contains("--pod-config-out"), "{}", e.message());
        i.pod_config_out = Some("in-cluster.yaml".into());
        i.secret_out = Some("in-cluster.yaml".into());
        let e = check(&i).unwrap_err();
        assert!(e.message().contains("same file"), "{}", e.message());
        i.pod_config_out = Some("overlay/config.toml".into());
        let c = check(&i).unwrap();
        assert!(c.pod_config_out.unwrap().ends_with("overlay/config.toml"));
    }

    #[test]
    fn waiting_jobs_flags_go_together_and_keep_a_tuned_interval() {
        let mut i = inputs();
        i.waiting_jobs_scope = Some("repos/acme/widgets".into());
        let err = check(&i).unwrap_err();
        assert!(
            err.message().contains("--waiting-jobs-token-file"),
            "{}",
            err.message()
        );
        i.waiting_jobs_token_file = Some("forgejo.token".into());
        let c = check(&i).unwrap();
        let mut tuned = config(&i, &c, "r", None, None).unwrap();
        let w = tuned.waiting_jobs.clone().expect("a section");
        assert_eq!(w.scope, "repos/acme/widgets");
        assert!(w.token_file.is_absolute());
        tuned.waiting_jobs.as_mut().unwrap().interval = "30s".parse().unwrap();
        i.waiting_jobs_scope = Some("orgs/acme".into());
        let c = check(&i).unwrap();
        let again = config(&i, &c, "r", Some(&tuned), None).unwrap();
        let w = again.waiting_jobs.unwrap();
        assert_eq!(
            (w.scope.as_str(), w.interval.as_str()),
            ("orgs/acme", "30s")
        );
        i.waiting_jobs_scope = Some("teams/x".into());
        assert!(
            check(&i)
                .unwrap_err()
                .message()
                .contains("not a waiting-jobs scope")
        );
    }

    #[test]
    fn webhook_flags_go_together_and_a_rerun_without_them_keeps_the_webhook() {
        let mut i = inputs();
        i.webhook_listen = Some("127.0.0.1:8090".parse().unwrap());
        let err = check(&i).unwrap_err();
        assert!(
            err.message().contains("--webhook-secret-file"),
            "{}",
            err.message()
        );
        i.webhook_secret_file = Some("/etc/tenantci/dispatch/webhook.secret".into());
        let c = check(&i).unwrap();
        let cfg = config(&i, &c, "r", None, None).unwrap();
        let w = cfg.webhook.clone().expect("a webhook");
        assert_eq!(w.listen.port(), 8090);
        assert_eq!(w.fetch_interval.as_str(), "5s");
        cfg.validate().unwrap();
        let plain = inputs();
        let kept = config(&plain, &check(&plain).unwrap(), "r", Some(&cfg), None).unwrap();
        assert_eq!(
            kept.webhook, cfg.webhook,
            "kept on a re-run without the flags"
        );
        assert_eq!(
            config(&plain, &check(&plain).unwrap(), "r", None, None)
                .unwrap()
                .webhook,
            None
        );
    }

    #[test]
    fn good_inputs_give_a_valid_config_with_relative_files() {
        let i = inputs();
        let c = check(&i).unwrap();
        assert_eq!(c.facade_url, "https://127.0.0.1:8443");
        assert_eq!(c.facade_host, "127.0.0.1");
        assert_eq!(
            c.paths.scheduler,
            Path::new("/etc/tenantci/dispatch/scheduler.json")
        );
        let cfg = config(&i, &c, "r", None, None).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.gitea.url, "https://gitea.example.com");
        assert_eq!(
            cfg.cluster.kubeconfig.as_deref(),
            Some(Path::new("kube/kubeconfig"))
        );
        assert_eq!(cfg.capacity.of(POD), 4);
        assert_eq!(cfg.gitea.fetch_interval.as_str(), "200ms");
        assert!(cfg.to_toml().contains("capability.key"));
        assert!(!cfg.to_toml().contains("reg-token"));
    }

    #[test]
    fn a_rerun_keeps_tuned_keys_unless_a_flag_sets_them() {
        let i = inputs();
        let c = check(&i).unwrap();
        let mut old = config(&i, &c, "r", None, None).unwrap();
        old.capacity.set(POD, 9);
        old.gitea.fetch_interval = "1s".parse().unwrap();
        old.leader.identity = Some("me".into());
        let again = config(&i, &c, "r", Some(&old), None).unwrap();
        assert_eq!(again.capacity.of(POD), 9);
        assert_eq!(again.gitea.fetch_interval.as_str(), "1s");
        assert_eq!(again.leader.identity.as_deref(), Some("me"));
        let mut flagged = inputs();
        flagged.capacities = vec![CapacityFlag {
            backend: POD,
            flag: "--pod-capacity",
            value: 2,
        }];
        assert_eq!(
            config(&flagged, &c, "r", Some(&old), None)
                .unwrap()
                .capacity
                .of(POD),
            2
        );
    }

    #[test]
    fn ipv6_and_dns_facade_hosts() {
        let mut i = inputs();
        i.facade_listen = "[::1]:8443".parse().unwrap();
        let c = check(&i).unwrap();
        assert_eq!(
            (c.facade_url.as_str(), c.facade_host.as_str()),
            ("https://[::1]:8443", "::1")
        );
        i.facade_listen = "0.0.0.0:8443".parse().unwrap();
        i.facade_url = Some("https://dispatch.ci.internal:8443/".into());
        let c = check(&i).unwrap();
        assert_eq!(c.facade_host, "dispatch.ci.internal");
        assert_eq!(c.facade_url, "https://dispatch.ci.internal:8443");
    }

    #[test]
    fn bad_inputs_name_the_flag() {
        type Edit = fn(&mut Inputs);
        let cases: &[(Edit, &str)] = &[
            (|i| i.gitea_url = "gitea.example.com".into(), "--gitea-url"),
            (|i| i.cluster = "Bad_Name".into(), "cluster name"),
            (|i| i.namespace = "Dyn".into(), "--namespace"),
            (|i| i.labels = vec![], "--labels"),
            (|i| i.labels = vec!["a b".into()], "--labels"),
            (|i| i.nats_url = "http://x:4222".into(), "--nats"),
            (
                |i| {
                    i.capacities = vec![CapacityFlag {
                        backend: POD,
                        flag: "--pod-capacity",
                        value: 0,
                    }]
                },
                "--pod-capacity",
            ),
            (
                |i| i.facade_url = Some("http://127.0.0.1:8443".into()),
                "--facade-url",
            ),
            (
                |i| i.facade_listen = "0.0.0.0:8443".parse().unwrap(),
                "--facade-listen",
            ),
            (
                |i| i.facade_listen = "[::]:8443".parse().unwrap(),
                "--facade-listen",
            ),
            (
                |i| i.executor_image = "gitea/act_runner:0.2.11".into(),
                "executor image",
            ),
            (|i| i.credential_valid_for = "0s".into(), "0s"),
            (|i| i.out = "/".into(), "--out"),
        ];
        for (edit, needle) in cases {
            let mut i = inputs();
            edit(&mut i);
            let e = check(&i).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{needle}");
            assert!(e.message().contains(needle), "{needle}: {}", e.message());
            assert!(e.hint_text().is_some(), "{needle}: a fix");
        }
    }

    #[test]
    fn a_forgejo_gets_forgejo_runner_unless_a_runner_command_is_given_or_kept() {
        use tenantci_core::forge::Forge;
        let mut i = inputs();
        let c = check(&i).unwrap();
        i.forge = Some(Forge::Forgejo);
        let made = config(&i, &c, "r", None, None).unwrap();
        assert_eq!(made.executor.runner_command, RunnerCommand::ForgejoRunner);
        let own = runner_command(&i, None);
        assert_eq!(own.1, RunnerCommandFrom::Forge);
        let line = runner_command_detail(Forge::Forgejo, own);
        assert!(
            line.starts_with("executor.runner_command = forgejo-runner (Forgejo's own runner"),
            "{line}"
        );
        i.forge = Some(Forge::Gitea);
        assert_eq!(runner_command(&i, None).0, RunnerCommand::ActRunner);
        // Given: kept, and the line says what the image must then hold.
        i.forge = Some(Forge::Forgejo);
        i.runner_command = Some(RunnerCommand::ActRunner);
        let flagged = config(&i, &c, "r", Some(&made), None).unwrap();
        assert_eq!(flagged.executor.runner_command, RunnerCommand::ActRunner);
        let line = runner_command_detail(Forge::Forgejo, runner_command(&i, Some(&made)));
        assert!(line.contains("as --runner-command says"), "{line}");
        assert!(
            line.contains("the executor image must ship act_runner"),
            "{line}"
        );
        // A re-run without the flag keeps the config's.
        i.runner_command = None;
        let kept = runner_command(&i, Some(&flagged));
        assert_eq!(kept, (RunnerCommand::ActRunner, RunnerCommandFrom::Kept));
        assert_eq!("gitea-runner".parse(), Ok(RunnerCommand::GiteaRunner));
        assert!("runner".parse::<RunnerCommand>().is_err());
    }

    #[test]
    fn executor_resources_come_from_the_node_image_unless_flagged_or_kept() {
        let i = inputs();
        let c = check(&i).unwrap();
        let big = NodeImage {
            vcpu: 4,
            mem_mib: 8192,
            rootfs_mib: None,
        };
        let cfg = config(&i, &c, "r", None, Some(&big)).unwrap();
        assert_eq!(cfg.executor.resources.cpu, "3800m");
        let mut flagged = inputs();
        flagged.executor_cpu = Some("1".into());
        let cfg = config(&flagged, &c, "r", Some(&cfg), Some(&big)).unwrap();
        assert_eq!(cfg.executor.resources.cpu, "1");
        assert_eq!(cfg.executor.resources.memory, "7872Mi", "kept");
        let mut none = inputs();
        none.proxy_image = None;
        assert!(
            config(&none, &c, "r", None, None)
                .unwrap_err()
                .message()
                .contains("--proxy-image")
        );
        assert_eq!(
            config(&none, &c, "r", Some(&cfg), None)
                .unwrap()
                .executor
                .proxy_image,
            cfg.executor.proxy_image
        );
    }
}
