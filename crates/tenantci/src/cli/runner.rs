//! `tenantci runner ...`: write gitlab-runner's config.toml entry and act_runner's files.
//! Flags become [`tenantci_runner::gitlab`] and [`tenantci_runner::act_runner`] inputs here;
//! the library does the work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;

use super::values::RunnerTypeArg;
use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_runner::act_runner::{self, ActRunnerConfig, Registration};
use tenantci_runner::gitlab;
use tenantci_runner::gitlab::api::CreateRunner;
use tenantci_runner::gitlab::ca::GitlabCa;
use tenantci_runner::gitlab::config::entry::{
    Autoscaler, DEFAULT_PAUSE_IDLE_TIME, DEFAULT_PAUSE_PERIOD, DEFAULT_PAUSE_POD_IMAGE,
    NativePausePods, REDACTED,
};
use tenantci_runner::gitlab::config::{Action, KubernetesSettings, PodSecurityContext, Secret};
use tenantci_runner::gitlab::setup::Configured;
use tenantci_runner::gitlab::token::{ApiCreation, TokenSource};

// Parsed once per process: variant sizes do not matter, boxing would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum RunnerCommand {
    /// Merge a Kubernetes-executor [[runners]] entry into gitlab-runner's config.toml.
    ///
    /// The entry is found by --name; comments, other runners and unknown keys are kept. The
    /// file is written atomically (0600, directory 0700) only when something changed, so
    /// gitlab-runner does not reload needlessly. The runner token comes from, in this order,
    /// --runner-token-file, runner creation through GitLab's API (--gitlab-api-token-file),
    /// or --runner-token / TENANTCI_RUNNER_TOKEN (the flag is visible in `ps`; avoid it). A
    /// token of the form $VAR is written as is and expanded by gitlab-runner from its
    /// environment. Exit 2: bad input or refused (file untouched); 3: GitLab failed.
    GitlabConfig(Box<GitlabConfigArgs>),
    /// Write act_runner's config.yaml (and `.runner` when registration data is given).
    GiteaConfig(Box<GiteaConfigArgs>),
    /// Check an existing gitlab-runner entry end to end, changing nothing.
    ///
    /// "Check both halves before blaming the runner": one line per check with its fix. The
    /// entry and its files (modes included); the client certificate (validity, remaining life,
    /// key, chain to the cluster's ClientCA when --state-dir knows the cluster at `host`);
    /// `ca_file` against the apiserver; SelfSubjectAccessReviews with the entry's own
    /// credential for everything the Kubernetes executor needs in its namespace; GitLab with
    /// the entry's `tls-ca-file` and token (`POST /api/v4/runners/verify`, using
    /// gitlab-runner's `.runner_system_id` when present); pause pods against the node image.
    /// Needs no admin credential. When a job fails with 403, run this first.
    ///
    /// Exit 0: the runner can work (warnings allowed); 1: a check failed; 2: config.toml
    /// cannot be read.
    Check(CheckArgs),
    /// Show a gitlab-runner entry as GitLab and the tenant cluster see it, changing nothing.
    ///
    /// GitLab's view of the runner (id, online or last contact, paused, tags, run-untagged,
    /// locked, protected refs only or not, maximum timeout, the version gitlab-runner
    /// reported), the entry's concurrency (`concurrent`, `limit`, `request_concurrency`)
    /// against the job Pods holding slots, and the job Pods with their GitLab jobs (from the
    /// annotations gitlab-runner 15.9+ sets), phase, node (rented for the job or warm, from the
    /// Pod's Events), age and restarts. The cluster is read with the entry's own credential
    /// (what `bootstrap runner` granted: Pods and Events of its namespace); GitLab with an
    /// access token holding the `read_api` scope (the runner's own token answers only the
    /// runner API). Without --gitlab-api-token-file, the cluster's view and one line saying
    /// what a token adds. No token is ever printed.
    ///
    /// Exit 0; 2: bad input (an entry not in config.toml, a token file open to others, a token
    /// without `read_api`); 3: GitLab or the apiserver not reached.
    Status(super::runner_view::StatusArgs),
    /// Explain why a GitLab job is pending for a gitlab-runner entry, changing nothing.
    ///
    /// GitLab's view of the job (status, tags, the runner it went to, queued duration), then the
    /// reasons in order, each one line with its fix: the job's tags not all on the runner (the
    /// missing ones named); an untagged job and a runner that does not run untagged jobs; the
    /// runner paused, locked to other projects, or protected-only for an unprotected branch;
    /// the runner not in contact with GitLab (the service down); every `concurrent`/`limit`
    /// slot held (by which Pods); the job's Pod Pending (its Events: a node booting, an image
    /// pull); the warm pool empty while a node boots. Needs --gitlab-api-token-file (`read_api`).
    ///
    /// Exit 0: it runs, will run, ran, or went to another runner; 1: it waits for a reason
    /// named; 2: bad input (a job of another GitLab, an unknown job, a token file open to
    /// others, a token without `read_api`, an entry not in config.toml); 3: GitLab or the
    /// apiserver not reached.
    Explain(super::runner_view::ExplainArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// gitlab-runner's config.toml.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/etc/gitlab-runner/config.toml"
    )]
    pub config: PathBuf,
    /// The entry's name. Default: the only kubernetes entry in the file.
    #[arg(long, value_name = "RUNNER")]
    pub name: Option<String>,
    /// The gateway's state directory: checks the certificate against the ClientCA of the
    /// cluster serving the entry's `host`, and the pause pods against its node image.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

async fn check(args: CheckArgs) -> Result<i32> {
    let report = gitlab::check::run(&gitlab::check::Inputs {
        config: args.config,
        name: args.name,
        state_dir: args.state_dir,
        cluster: None,
        gitlab: true,
    })
    .await?;
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        print!("{}", tenantci_runner::checklist::render(&report.checks));
    }
    Ok(if report.passed { 0 } else { 1 })
}

pub async fn run(cmd: RunnerCommand) -> Result<i32> {
    match cmd {
        RunnerCommand::GitlabConfig(args) => gitlab_config(*args).await,
        RunnerCommand::GiteaConfig(args) => gitea_config(*args),
        RunnerCommand::Check(args) => check(args).await,
        RunnerCommand::Status(args) => super::runner_view::status(&args).await,
        RunnerCommand::Explain(args) => super::runner_view::explain(&args).await,
    }
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The runner entry")]
pub struct GitlabConfigArgs {
    /// gitlab-runner's config.toml (created if missing).
    #[arg(long, value_name = "PATH")]
    pub config: PathBuf,
    /// The runner's name: how tenantci finds its [[runners]] entry.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// GitLab's URL (also the API base for runner creation).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// The runner authentication token (glrt-...) or a $VAR reference. Visible to other users
    /// in `ps`: prefer --runner-token-file or the environment variable.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TENANTCI_RUNNER_TOKEN",
        hide_env_values = true
    )]
    pub runner_token: Option<String>,
    /// A file holding the runner authentication token (or a $VAR reference).
    #[arg(long, value_name = "FILE")]
    pub runner_token_file: Option<PathBuf>,
    /// Jobs this runner runs at once (0 = bounded only by `concurrent`).
    #[arg(long, default_value_t = 4)]
    pub limit: u32,
    /// Concurrent job requests to GitLab.
    #[arg(long, default_value_t = 1)]
    pub request_concurrency: u32,
    /// Take over an entry with this name that uses another executor.
    #[arg(long)]
    pub force: bool,
    /// Show what would change; write nothing and create no runner.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub api: GitlabApiArgs,
    #[command(flatten)]
    pub kubernetes: KubernetesArgs,
    /// Pause pods gitlab-runner keeps itself (with --gitlab-native-pause-pods; 0 is refused).
    #[arg(long, value_name = "N", help_heading = "Pause pods")]
    pub prewarm: Option<i32>,
    #[command(flatten)]
    pub pause_pods: NativePausePodArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// gitlab-runner's own pause pods (`[runners.kubernetes.autoscaler]`, GitLab Runner 18.10+);
/// shared by `runner gitlab-config` and `bootstrap runner`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Pause pods")]
pub struct NativePausePodArgs {
    /// Let gitlab-runner (18.10+) keep the --prewarm N pause pods itself: tenantci writes
    /// [runners.kubernetes.autoscaler] (max_pause_pods, pause_pod_image, one policy) and keeps
    /// it in sync, instead of its own pause-pod Deployment.
    #[arg(long, conflicts_with = "remove_gitlab_native_pause_pods")]
    pub gitlab_native_pause_pods: bool,
    /// Leave native mode: remove the autoscaler keys tenantci wrote (without either flag the
    /// table is never touched).
    #[arg(long)]
    pub remove_gitlab_native_pause_pods: bool,
    /// The pause pods' image. Default: registry.k8s.io/pause:3.10.
    #[arg(long, value_name = "IMAGE")]
    pub pause_pod_image: Option<String>,
    /// How long gitlab-runner waits before it scales pause pods down (Go duration).
    /// Default: 30m.
    #[arg(long, value_name = "DURATION", requires = "gitlab_native_pause_pods")]
    pub pause_idle_time: Option<String>,
    /// A cron expression during which the pause pods are kept (repeatable). Default: always
    /// ("* * * * *").
    #[arg(long, value_name = "CRON", requires = "gitlab_native_pause_pods")]
    pub pause_period: Vec<String>,
}

impl NativePausePodArgs {
    /// The pause image, for the runner's autoscaler and tenantci's Deployment alike.
    pub fn image(&self) -> String {
        self.pause_pod_image
            .clone()
            .unwrap_or_else(|| DEFAULT_PAUSE_POD_IMAGE.into())
    }

    /// What the runner entry does with its autoscaler table, given the `--prewarm` count.
    pub fn autoscaler(&self, prewarm: Option<i32>) -> Result<Autoscaler> {
        if self.remove_gitlab_native_pause_pods {
            return Ok(Autoscaler::Remove);
        }
        if !self.gitlab_native_pause_pods {
            return Ok(Autoscaler::LeaveAlone);
        }
        let count = match prewarm {
            Some(n) if n > 0 => n as u32,
            _ => {
                return Err(Error::bad_input(
                    "--gitlab-native-pause-pods needs --prewarm N with N > 0 (the pause pods gitlab-runner keeps; it reads 0 as unlimited): add e.g. --prewarm 1",
                ));
            }
        };
        let native = NativePausePods {
            count,
            image: self.image(),
            idle_time: self
                .pause_idle_time
                .clone()
                .unwrap_or_else(|| DEFAULT_PAUSE_IDLE_TIME.into()),
            periods: if self.pause_period.is_empty() {
                vec![DEFAULT_PAUSE_PERIOD.into()]
            } else {
                self.pause_period.clone()
            },
        };
        // Here, not only in the merge: bootstrap changes the cluster before it writes config.
        native.validate()?;
        Ok(Autoscaler::Native(native))
    }
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Create the runner through GitLab's API (instead of a token)")]
pub struct GitlabApiArgs {
    /// A file holding an access token with the `create_runner` scope.
    /// Precedence: --runner-token-file, then this, then --runner-token / TENANTCI_RUNNER_TOKEN.
    #[arg(long, value_name = "FILE", conflicts_with = "runner_token_file")]
    pub gitlab_api_token_file: Option<PathBuf>,
    /// The kind of runner to create.
    #[arg(long, value_enum, requires = "gitlab_api_token_file")]
    pub runner_type: Option<RunnerTypeArg>,
    /// The group's numeric id (group_type).
    #[arg(long, value_name = "N", conflicts_with = "project_id")]
    pub group_id: Option<u64>,
    /// The project's numeric id (project_type).
    #[arg(long, value_name = "N")]
    pub project_id: Option<u64>,
    /// Job tags the runner picks up, comma-separated.
    #[arg(long, value_name = "TAGS", value_delimiter = ',')]
    pub tag_list: Vec<String>,
    /// Also run jobs without tags.
    #[arg(long)]
    pub run_untagged: bool,
    /// Lock the runner to its current projects.
    #[arg(long)]
    pub locked: bool,
    /// The runner's description in GitLab. Default: the --name.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// GitLab's CA bundle (PEM), for a GitLab behind a private CA or with a self-signed
    /// certificate (`openssl req -x509`, accepted when it is the very certificate GitLab
    /// presents). tenantci trusts it for its own GitLab calls and writes it into the entry as
    /// `tls-ca-file` (a 0600 copy beside the credential), so gitlab-runner trusts the same.
    /// Dropping the flag later removes that copy and key; an operator's own `tls-ca-file`
    /// stays.
    #[arg(long, value_name = "FILE")]
    pub gitlab_ca_file: Option<PathBuf>,
    /// Write --gitlab-ca-file's own (absolute) path as `tls-ca-file` instead of a copy; the
    /// file must stay readable by gitlab-runner.
    #[arg(long, requires = "gitlab_ca_file")]
    pub gitlab_ca_in_place: bool,
    /// Timeout for each GitLab API request (Go duration). Default: 30s.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub gitlab_timeout: String,
    /// Create a new runner even when config.toml already has a token for --name.
    #[arg(long)]
    pub recreate: bool,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "[runners.kubernetes]")]
pub struct KubernetesArgs {
    /// The tenant apiserver URL (https://127.0.0.1:<port>).
    #[arg(long, value_name = "URL")]
    pub host: Option<String>,
    /// Client certificate (absolute path) signed by the cluster's ClientCA.
    #[arg(long, value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// The certificate's private key (absolute path).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// The CA that signed the apiserver's serving certificate (absolute path).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Namespace for job pods.
    #[arg(long, value_name = "NS", default_value = "gitlab-runner")]
    pub namespace: String,
    /// Seconds a job pod may stay Pending (a rented node may need to boot).
    #[arg(long, value_name = "SECONDS", default_value_t = gitlab::config::entry::DEFAULT_POLL_TIMEOUT)]
    pub poll_timeout: u32,
    /// Default job image.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Helper image (default: gitlab-runner's own).
    #[arg(long, value_name = "IMAGE")]
    pub helper_image: Option<String>,
    /// Build container CPU request (Kubernetes quantity).
    #[arg(long, value_name = "QTY")]
    pub cpu_request: Option<String>,
    #[arg(long, value_name = "QTY")]
    pub cpu_limit: Option<String>,
    #[arg(long, value_name = "QTY")]
    pub memory_request: Option<String>,
    #[arg(long, value_name = "QTY")]
    pub memory_limit: Option<String>,
    #[arg(long, value_name = "QTY")]
    pub ephemeral_storage_request: Option<String>,
    #[arg(long, value_name = "QTY")]
    pub ephemeral_storage_limit: Option<String>,
    /// Any other resource key, e.g. helper_memory_limit=256Mi or
    /// cpu_request_overwrite_max_allowed=4 (repeatable).
    #[arg(long, value_name = "KEY=QTY")]
    pub resource: Vec<String>,
    /// Node selector label (repeatable).
    #[arg(long, value_name = "K=V")]
    pub node_selector: Vec<String>,
    /// Node toleration `key=value:Effect` or `key:Effect` (repeatable).
    #[arg(long, value_name = "K=V:EFFECT")]
    pub toleration: Vec<String>,
    /// Label on job pods (repeatable).
    #[arg(long, value_name = "K=V")]
    pub pod_label: Vec<String>,
    #[arg(long, value_name = "UID")]
    pub run_as_user: Option<i64>,
    #[arg(long, value_name = "GID")]
    pub run_as_group: Option<i64>,
    #[arg(long, value_name = "GID")]
    pub fs_group: Option<i64>,
    #[arg(long)]
    pub run_as_non_root: bool,
}

fn key_value(flag: &str, raw: &str) -> Result<(String, String)> {
    match raw.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(Error::bad_input(format!(
            "--{flag} `{raw}` is not KEY=VALUE"
        ))),
    }
}

fn key_values(flag: &str, raws: &[String]) -> Result<BTreeMap<String, String>> {
    raws.iter().map(|r| key_value(flag, r)).collect()
}

impl KubernetesArgs {
    fn settings(&self) -> Result<KubernetesSettings> {
        let mut resources = BTreeMap::new();
        for (key, value) in [
            ("cpu_request", &self.cpu_request),
            ("cpu_limit", &self.cpu_limit),
            ("memory_request", &self.memory_request),
            ("memory_limit", &self.memory_limit),
            ("ephemeral_storage_request", &self.ephemeral_storage_request),
            ("ephemeral_storage_limit", &self.ephemeral_storage_limit),
        ] {
            if let Some(v) = value {
                resources.insert(key.to_string(), v.clone());
            }
        }
        resources.extend(key_values("resource", &self.resource)?);
        let mut node_tolerations = BTreeMap::new();
        for raw in &self.toleration {
            let Some((key, effect)) = raw.rsplit_once(':') else {
                return Err(Error::bad_input(format!(
                    "--toleration `{raw}` is not key=value:Effect"
                ))
                .hint("e.g. --toleration dedicated=ci:NoSchedule"));
            };
            node_tolerations.insert(key.to_string(), effect.to_string());
        }
        Ok(KubernetesSettings {
            host: self.host.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            ca_file: self.ca_file.clone(),
            namespace: self.namespace.clone(),
            resources,
            poll_timeout: self.poll_timeout,
            image: self.image.clone(),
            helper_image: self.helper_image.clone(),
            node_selector: key_values("node-selector", &self.node_selector)?,
            node_tolerations,
            pod_labels: key_values("pod-label", &self.pod_label)?,
            pod_security_context: PodSecurityContext {
                run_as_user: self.run_as_user,
                run_as_group: self.run_as_group,
                fs_group: self.fs_group,
                run_as_non_root: self.run_as_non_root.then_some(true),
            },
            autoscaler: Autoscaler::LeaveAlone,
        })
    }
}

/// `--prewarm` and `--pause-pod-image` here only configure gitlab-runner's own pause pods:
/// without `--gitlab-native-pause-pods` they would be ignored, so they are refused.
fn refuse_native_only_flags(args: &GitlabConfigArgs) -> Result<()> {
    let native_only = [
        ("--prewarm", args.prewarm.is_some()),
        (
            "--pause-pod-image",
            args.pause_pods.pause_pod_image.is_some(),
        ),
    ];
    match native_only
        .iter()
        .find(|(_, given)| *given && !args.pause_pods.gitlab_native_pause_pods)
    {
        Some((flag, _)) => Err(Error::bad_input(format!(
            "{flag} in `runner gitlab-config` sets the pause pods gitlab-runner keeps itself, so it needs --gitlab-native-pause-pods (tenantci's own pause-pod Deployment is `tenant prewarm` or `bootstrap runner --prewarm`)"
        ))),
        None => Ok(()),
    }
}

fn gitlab_setup_inputs(args: &GitlabConfigArgs) -> Result<gitlab::setup::Inputs> {
    let mut kubernetes = args.kubernetes.settings()?;
    refuse_native_only_flags(args)?;
    kubernetes.autoscaler = args.pause_pods.autoscaler(args.prewarm)?;
    let token = TokenSource::from_flags(
        args.runner_token_file.clone(),
        args.api.creation(&args.url, &args.name)?,
        args.runner_token.as_deref(),
    )?;
    Ok(gitlab::setup::Inputs {
        config: args.config.clone(),
        name: args.name.clone(),
        url: args.url.clone(),
        token,
        limit: args.limit,
        request_concurrency: args.request_concurrency,
        kubernetes,
        gitlab_ca: args.api.gitlab_ca(),
        force: args.force,
        dry_run: args.dry_run,
    })
}

async fn gitlab_config(args: GitlabConfigArgs) -> Result<i32> {
    let inputs = gitlab_setup_inputs(&args)?;
    for caveat in inputs.kubernetes.native_pause_pod_caveats() {
        eprintln!("warning: {caveat}");
    }
    let done = gitlab::setup::run(&inputs).await?;
    if args.output.is_json() {
        output::print_json(&done.report)?;
    } else {
        print_gitlab_config(&done);
    }
    Ok(0)
}

pub(super) fn print_gitlab_config(done: &Configured) {
    let report = &done.report;
    let what = match report.action {
        Action::Unchanged => "unchanged",
        Action::Created => "new file with runner",
        Action::Added => "added runner",
        Action::Updated => "updated runner",
    };
    let mode = if done.preview.is_some() {
        " (dry run: not written)"
    } else {
        ""
    };
    println!(
        "{}: {what} `{}`{mode}",
        report.config.display(),
        report.runner.name
    );
    if let Some(preview) = &done.preview {
        print!("{preview}");
    }
}

impl GitlabApiArgs {
    /// GitLab's CA as the entry hands it on.
    pub fn gitlab_ca(&self) -> Option<GitlabCa> {
        self.gitlab_ca_file.clone().map(|file| GitlabCa {
            file,
            in_place: self.gitlab_ca_in_place,
        })
    }

    /// Runner creation through GitLab's API at `url`, when --gitlab-api-token-file is given;
    /// `name` is the default description. The flags are checked here, the files read only
    /// when a runner is created.
    pub fn creation(&self, url: &str, name: &str) -> Result<Option<ApiCreation>> {
        let Some(api_token_file) = &self.gitlab_api_token_file else {
            return Ok(None);
        };
        Ok(Some(ApiCreation {
            url: url.to_string(),
            api_token_file: api_token_file.clone(),
            ca_file: self.gitlab_ca_file.clone(),
            timeout: self.timeout()?,
            request: self.create_request(name)?,
            recreate: self.recreate,
        }))
    }

    fn timeout(&self) -> Result<std::time::Duration> {
        tenantci_core::duration::parse_positive(&self.gitlab_timeout).map_err(|e| {
            Error::bad_input(format!("--gitlab-timeout `{}` {e}", self.gitlab_timeout))
                .hint("pass a Go duration such as `30s`")
        })
    }

    fn create_request(&self, name: &str) -> Result<CreateRunner> {
        let Some(runner_type) = self.runner_type else {
            return Err(
                Error::bad_input("--gitlab-api-token-file needs --runner-type")
                    .hint("pass --runner-type instance_type|group_type|project_type"),
            );
        };
        let request = CreateRunner {
            runner_type: runner_type.into(),
            group_id: self.group_id,
            project_id: self.project_id,
            description: Some(self.description.clone().unwrap_or_else(|| name.to_string())),
            tag_list: self
                .tag_list
                .iter()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect(),
            run_untagged: self.run_untagged,
            locked: self.locked,
            paused: false,
        };
        request.validate()?;
        Ok(request)
    }
}

#[derive(Debug, Args)]
#[command(next_help_heading = "act_runner config.yaml")]
pub struct GiteaConfigArgs {
    /// act_runner's config.yaml to write.
    #[arg(long, value_name = "PATH")]
    pub config: PathBuf,
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Tasks act_runner runs at once.
    #[arg(long, default_value_t = 1)]
    pub capacity: u32,
    /// Job timeout (Go duration).
    #[arg(long, default_value = "3h")]
    pub timeout: String,
    /// FetchTask long-poll timeout (Go duration).
    #[arg(long, default_value = "5s")]
    pub fetch_timeout: String,
    /// Pause between FetchTask polls (Go duration).
    #[arg(long, default_value = "2s")]
    pub fetch_interval: String,
    /// Label `name[:docker:IMAGE|:host]` (repeatable). Default: pod:host.
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// runner.file: where act_runner reads `.runner` (relative to its working directory).
    #[arg(long, value_name = "PATH", default_value = ".runner")]
    pub runner_file: String,
    /// Skip TLS verification towards Gitea (never in production).
    #[arg(long)]
    pub insecure: bool,

    #[command(flatten)]
    pub registration: GiteaRegistrationArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The .runner registration file (written when --uuid is given)")]
pub struct GiteaRegistrationArgs {
    /// Where to write `.runner`. Default: --runner-file next to --config.
    #[arg(long, value_name = "PATH", requires = "uuid")]
    pub registration_out: Option<PathBuf>,
    /// Gitea's URL.
    #[arg(long, value_name = "URL", requires = "uuid")]
    pub gitea_url: Option<String>,
    /// The runner's UUID from registration.
    #[arg(long, value_name = "UUID")]
    pub uuid: Option<String>,
    /// The runner's numeric id.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub runner_id: i64,
    /// The runner's name.
    #[arg(long, value_name = "NAME", requires = "uuid")]
    pub runner_name: Option<String>,
    /// A file holding the runner token from registration.
    #[arg(long, value_name = "FILE", requires = "uuid")]
    pub gitea_runner_token_file: Option<PathBuf>,
    /// Mark the registration ephemeral (one task, Gitea 1.24+).
    #[arg(long)]
    pub ephemeral: bool,
}

#[derive(Debug, Serialize)]
pub struct GiteaConfigReport {
    pub config: PathBuf,
    pub config_written: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration: Option<PathBuf>,
    pub registration_written: bool,
}

/// The `.runner` registration `--uuid` asks for, and where it goes (beside the config
/// unless `--registration-out`); None without `--uuid`.
fn registration(
    args: &GiteaConfigArgs,
    config: &ActRunnerConfig,
) -> Result<Option<(std::path::PathBuf, Registration)>> {
    let reg = &args.registration;
    Ok(match &reg.uuid {
        None => None,
        Some(uuid) => {
            let (Some(address), Some(name), Some(token_file)) = (
                &reg.gitea_url,
                &reg.runner_name,
                &reg.gitea_runner_token_file,
            ) else {
                return Err(Error::bad_input(
                    "--uuid needs --gitea-url, --runner-name and --gitea-runner-token-file",
                ));
            };
            let token =
                tenantci_core::secret::read_file("the Gitea runner token file", token_file, None)?;
            let registration = Registration {
                warning: act_runner::REGISTRATION_WARNING.into(),
                id: reg.runner_id,
                uuid: uuid.clone(),
                name: name.clone(),
                token: Secret::new(token),
                address: address.clone(),
                labels: config
                    .runner
                    .labels
                    .iter()
                    .map(|l| act_runner::Label::parse(l).map(|l| l.name))
                    .collect::<Result<_>>()?,
                ephemeral: reg.ephemeral,
            };
            registration.validate()?;
            let path = reg.registration_out.clone().unwrap_or_else(|| {
                let file = Path::new(&args.runner_file);
                if file.is_absolute() {
                    file.to_path_buf()
                } else {
                    args.config.parent().unwrap_or(Path::new(".")).join(file)
                }
            });
            Some((path, registration))
        }
    })
}

fn gitea_config(args: GiteaConfigArgs) -> Result<i32> {
    let mut config = ActRunnerConfig::default();
    config.log.level = args.log_level.clone();
    config.runner.capacity = args.capacity;
    config.runner.timeout = args.timeout.clone();
    config.runner.fetch_timeout = args.fetch_timeout.clone();
    config.runner.fetch_interval = args.fetch_interval.clone();
    config.runner.insecure = args.insecure;
    config.runner.file = args.runner_file.clone();
    if !args.labels.is_empty() {
        config.runner.labels = args.labels.clone();
    }
    config.validate()?;
    let registration = registration(&args, &config)?;
    let config_written = act_runner::write_config(&args.config, &config)?;
    let registration_written = match &registration {
        Some((path, r)) => act_runner::write_registration(path, r)?,
        None => false,
    };
    let report = GiteaConfigReport {
        config: args.config.clone(),
        config_written,
        registration: registration.as_ref().map(|(p, _)| p.clone()),
        registration_written,
    };
    if args.output.is_json() {
        output::print_json(&report)?;
    } else {
        let state = |w: bool| if w { "written" } else { "unchanged" };
        println!("{} {}", args.config.display(), state(config_written));
        if let Some(path) = &report.registration {
            println!(
                "{} {} (token {REDACTED})",
                path.display(),
                state(registration_written)
            );
        }
    }
    Ok(0)
}
