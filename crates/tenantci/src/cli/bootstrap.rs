//! `tenantci bootstrap runner`: from a cluster name to a working GitLab runner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};

use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_runner::bootstrap::runner::{self as boot, Inputs, PausePods, Target, TokenSource};
use tenantci_runner::bootstrap::textfile;
use tenantci_runner::gitlab::config::entry::Autoscaler;

#[derive(Debug, Subcommand)]
pub enum BootstrapCommand {
    /// Credential, RBAC, verification, sizing, pre-warm and runner config in one idempotent run.
    ///
    /// Resolves the cluster (gateway.json -> admin apiserver -> Cluster status.url), keeps or
    /// mints the runner's credential, server-side applies the namespace, ClusterRole and
    /// ClusterRoleBinding, verifies both halves (certificate subject, access reviews, one real
    /// request), sizes the job pod against the node image, pre-warms pause pods, and writes
    /// the runner's config.toml entry last. A second run with the same inputs changes nothing.
    Runner(Box<RunnerArgs>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Forge {
    Gitlab,
    Gitea,
}

#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Which forge the runner serves.
    #[arg(long, value_enum)]
    pub forge: Forge,

    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub gitlab: GitlabArgs,
    #[command(flatten)]
    pub job: super::tenant::JobRequestArgs,
    /// CPU limit of the build container.
    #[arg(long, value_name = "Q", help_heading = "Job pod requests")]
    pub cpu_limit: Option<String>,
    /// Memory limit of the build container.
    #[arg(long, value_name = "Q", help_heading = "Job pod requests")]
    pub memory_limit: Option<String>,
    /// Keep N pause pods sized like a job pod (0 keeps the objects at zero): tenantci's
    /// Deployment, or gitlab-runner's own with --gitlab-native-pause-pods.
    #[arg(long, value_name = "N", help_heading = "Pause pods")]
    pub prewarm: Option<i32>,
    #[command(flatten)]
    pub pause_pods: super::runner::NativePausePodArgs,
    /// Print the plan: write no file, change no object (server-side dry run).
    #[arg(long)]
    pub dry_run: bool,
    /// Take over a config.toml entry with our name that uses another executor.
    #[arg(long)]
    pub force: bool,
    /// Also write the run's result, time and the credential's expiry here (0644, atomically)
    /// for node_exporter's textfile collector; after every run but a refused one (exit 2).
    #[arg(long, value_name = "PATH.prom")]
    pub textfile: Option<PathBuf>,
    #[command(flatten)]
    pub remote: super::remote_runner::RemoteArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The tenant cluster")]
pub struct ClusterArgs {
    /// The gateway state directory (resolves the cluster through gateway.json).
    #[arg(long, value_name = "DIR", env = "TENANTCI_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The tenant cluster's name; also names the defaults (tenant-<cluster>).
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// The tenant apiserver URL (instead of --state-dir).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The serving CA (with --server).
    #[arg(long, value_name = "FILE")]
    pub server_ca: Option<PathBuf>,
    /// The ClientCA certificate (with --server).
    #[arg(long, value_name = "FILE")]
    pub client_ca_cert: Option<PathBuf>,
    /// The ClientCA key (with --server).
    #[arg(long, value_name = "FILE")]
    pub client_ca_key: Option<PathBuf>,
    /// The tenant-admin kubeconfig that applies RBAC. Default: the state dir's.
    #[arg(long, value_name = "FILE")]
    pub tenant_kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The runner's identity and files")]
pub struct IdentityArgs {
    /// The runner's name in config.toml. Default: tenant-<cluster>.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Namespace the job pods run in.
    #[arg(long, value_name = "NS", default_value = "gitlab-runner")]
    pub namespace: String,
    /// The group: the credential's organization AND the ClusterRoleBinding's subject (one
    /// flag, so they cannot disagree).
    #[arg(long, value_name = "GROUP", default_value = "gitlab-runner")]
    pub group: String,
    /// The Kubernetes user (certificate CN).
    #[arg(long, value_name = "CN", default_value = "gitlab-runner")]
    pub common_name: String,
    /// Credential directory. Default: /etc/gitlab-runner/tenant-<cluster>.
    #[arg(long, value_name = "DIR")]
    pub credential_dir: Option<PathBuf>,
    /// gitlab-runner's config.toml.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/etc/gitlab-runner/config.toml"
    )]
    pub config: PathBuf,
    /// Credential lifetime (Go duration). Default: 720h.
    #[arg(long, value_name = "DURATION")]
    pub valid_for: Option<String>,
    /// Move the existing credential aside (timestamped) and mint a new one.
    #[arg(long)]
    pub rotate: bool,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "GitLab")]
pub struct GitlabArgs {
    /// The GitLab URL the runner talks to.
    #[arg(long, value_name = "URL")]
    pub gitlab_url: Option<String>,
    /// The runner authentication token (glrt-...) or a $VAR reference. Prefer the file or
    /// the environment variable: argv is visible to other users.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TENANTCI_RUNNER_TOKEN",
        hide_env_values = true
    )]
    pub runner_token: Option<String>,
    /// File holding the runner authentication token.
    #[arg(long, value_name = "FILE", conflicts_with = "runner_token")]
    pub runner_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub api: super::runner::GitlabApiArgs,
}

fn target(c: &ClusterArgs) -> Result<Target> {
    match (&c.state_dir, &c.server) {
        (Some(state_dir), None) => Ok(Target::StateDir { state_dir: state_dir.clone(), cluster: c.cluster.clone() }),
        (None, Some(server)) => match (&c.server_ca, &c.client_ca_cert, &c.client_ca_key, &c.tenant_kubeconfig) {
            (Some(sca), Some(cc), Some(ck), Some(tk)) => Ok(Target::Direct {
                server: server.clone(),
                server_ca: sca.clone(),
                client_ca_cert: cc.clone(),
                client_ca_key: ck.clone(),
                tenant_kubeconfig: tk.clone(),
                cluster: c.cluster.clone(),
            }),
            _ => Err(Error::bad_input("--server needs --server-ca, --client-ca-cert, --client-ca-key and --tenant-kubeconfig")
                .hint("pass all four, or --state-dir to resolve the cluster through the gateway")),
        },
        (Some(_), Some(_)) => Err(Error::bad_input("--state-dir and --server both name the cluster")
            .hint("pass --state-dir (resolved through gateway.json) or --server with its files, not both")),
        (None, None) => Err(Error::bad_input("no cluster given")
            .hint("pass --state-dir DIR --cluster NAME (or --server URL with --server-ca, --client-ca-cert, --client-ca-key, --tenant-kubeconfig)")),
    }
}

fn token_source(g: &GitlabArgs, gitlab_url: &str, runner_name: &str) -> Result<TokenSource> {
    TokenSource::from_flags(
        g.runner_token_file.clone(),
        g.api.creation(gitlab_url, runner_name)?,
        g.runner_token.as_deref(),
    )
}

/// The GitLab URL the runner registers with: required, except in remote mode (the runner's
/// host names it to `front unpack`).
fn gitlab_url(a: &RunnerArgs, remote: bool) -> Result<String> {
    match (&a.gitlab.gitlab_url, remote) {
        (Some(url), _) => Ok(url.clone()),
        (None, true) => Ok(String::new()),
        (None, false) => Err(Error::bad_input("--gitlab-url is missing").hint(
            "pass the GitLab URL the runner registers with, e.g. https://gitlab.example.com",
        )),
    }
}

/// The job Pods' requests and limits as config.toml's `[runners.kubernetes]` keys; a limit is
/// checked as a Kubernetes quantity first.
fn job_resources(a: &RunnerArgs) -> Result<BTreeMap<String, String>> {
    let mut resources = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        resources.insert(k.to_string(), v.to_string());
    };
    put("cpu_request", &a.job.cpu_request);
    put("memory_request", &a.job.memory_request);
    put("helper_cpu_request", &a.job.helper_cpu_request);
    put("helper_memory_request", &a.job.helper_memory_request);
    if a.job.services > 0 {
        put("service_cpu_request", &a.job.service_cpu_request);
        put("service_memory_request", &a.job.service_memory_request);
    }
    if let Some(l) = &a.cpu_limit {
        tenantci_runner::tenant::sizing::parse_request("--cpu-limit", l)?;
        put("cpu_limit", l);
    }
    if let Some(l) = &a.memory_limit {
        tenantci_runner::tenant::sizing::parse_request("--memory-limit", l)?;
        put("memory_limit", l);
    }
    Ok(resources)
}

fn inputs(a: &RunnerArgs) -> Result<Inputs> {
    let remote = a.remote.remote;
    if remote {
        super::remote_runner::refuse_gitlab_flags(&[
            ("--gitlab-url", a.gitlab.gitlab_url.is_some()),
            ("--runner-token-file", a.gitlab.runner_token_file.is_some()),
            (
                "--gitlab-api-token-file",
                a.gitlab.api.gitlab_api_token_file.is_some(),
            ),
            ("--force", a.force),
        ])?;
    }
    let gitlab_url = gitlab_url(a, remote)?;
    let job = a.job.requests()?;
    let resources = job_resources(a)?;
    if a.prewarm.is_some_and(|n| n < 0) {
        return Err(Error::bad_input("--prewarm is negative").hint("pass 0 or more pause pods"));
    }
    let pause_pods = match a.pause_pods.autoscaler(a.prewarm)? {
        Autoscaler::LeaveAlone => PausePods::Deployment,
        Autoscaler::Native(native) => PausePods::GitlabNative(native),
        Autoscaler::Remove => PausePods::LeaveGitlabNative,
    };
    let cluster = &a.cluster.cluster;
    tenantci_core::gateway::layout::validate_cluster_name(cluster)?;
    let runner_name = a
        .identity
        .name
        .clone()
        .unwrap_or_else(|| format!("tenant-{cluster}"));
    Ok(Inputs {
        target: target(&a.cluster)?,
        tenant_kubeconfig: a.cluster.tenant_kubeconfig.clone(),
        token: if remote {
            super::remote_runner::no_token()
        } else {
            token_source(&a.gitlab, &gitlab_url, &runner_name)?
        },
        gitlab_ca: a.gitlab.api.gitlab_ca(),
        runner_name,
        namespace: a.identity.namespace.clone(),
        group: a.identity.group.clone(),
        common_name: a.identity.common_name.clone(),
        credential_dir: a
            .identity
            .credential_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("/etc/gitlab-runner/tenant-{cluster}"))),
        config_path: a.identity.config.clone(),
        gitlab_url,
        job,
        resources,
        prewarm: a.prewarm,
        pause_pods,
        pause_pod_image: a.pause_pods.image(),
        valid_for: a.identity.valid_for.clone(),
        rotate: a.identity.rotate,
        dry_run: a.dry_run,
        force: a.force,
    })
}

pub async fn run(cmd: BootstrapCommand) -> Result<i32> {
    let BootstrapCommand::Runner(args) = cmd;
    if args.forge == Forge::Gitea {
        return Err(Error::bad_input("`bootstrap runner --forge gitea` is not available yet")
            .hint("Gitea jobs go through the dispatcher: `tenantci dispatch init`, then `dispatch run` (docs/runbooks/gitea-dispatcher.md); use --forge gitlab here"));
    }
    let inputs = inputs(&args)?;
    if let Some(path) = &args.textfile {
        textfile::validate(path)?;
    }
    if args.remote.remote {
        let cluster = &args.cluster.cluster;
        let json = args.output.is_json();
        let outcome = super::remote_runner::bootstrap(&args.remote, &inputs, cluster, json).await;
        if let Some(path) = args.textfile.as_ref().filter(|_| !inputs.dry_run) {
            record_run(path, cluster, &inputs, &outcome)?;
        }
        return outcome;
    }
    let outcome = bootstrap(&inputs, args.output.is_json()).await;
    if let Some(path) = args.textfile.as_ref().filter(|_| !inputs.dry_run) {
        record_run(path, &args.cluster.cluster, &inputs, &outcome)?;
    }
    outcome
}

/// The textfile after a run. A refusal (exit 2) changes nothing on disk, this file included;
/// systemd's OnFailure= and the stale-run alert see it. A file that cannot be written fails
/// a successful run, but never hides a failed run's own error.
fn record_run(path: &Path, cluster: &str, inputs: &Inputs, outcome: &Result<i32>) -> Result<()> {
    let exit_code = match outcome {
        Ok(code) => *code,
        Err(e) => e.exit_code(),
    };
    if exit_code == tenantci_core::error::exit_code::BAD_INPUT {
        return Ok(());
    }
    let record = textfile::RunRecord {
        cluster: cluster.to_string(),
        exit_code,
        finished_at: time::OffsetDateTime::now_utc(),
        credential_not_after: textfile::credential_not_after(
            &inputs.credential_dir.join("tls.crt"),
        ),
    };
    match textfile::write(path, &record) {
        Err(e) if outcome.is_err() => {
            tracing::warn!("{}", e.render());
            Ok(())
        }
        other => other,
    }
}

async fn bootstrap(inputs: &Inputs, json: bool) -> Result<i32> {
    let hand_back = boot::run(inputs, |s| {
        if !json {
            eprintln!("{:<11} {:<12} {}", s.step, s.outcome, s.detail);
        }
    })
    .await?;
    if json {
        output::print_json(&hand_back)?;
    } else {
        let h = &hand_back;
        println!(
            "Hand-back{}:",
            if h.dry_run {
                " (dry run: nothing was written)"
            } else {
                ""
            }
        );
        println!("  apiserver    {}", h.server);
        println!("  ca.crt       {}", h.credential.ca.display());
        println!("  tls.crt      {}", h.credential.cert.display());
        println!("  tls.key      {}", h.credential.key.display());
        println!("  group        {}", h.group);
        println!("  namespace    {}", h.namespace);
        println!(
            "  config.toml  {} (runner `{}`)",
            h.config.display(),
            h.runner_name
        );
        println!("warning: {}", h.warning);
    }
    Ok(0)
}
