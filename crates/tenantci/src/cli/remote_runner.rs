//! A GitLab Runner on another host, in two commands on two hosts, each idempotent: `bootstrap
//! runner --remote` on the gateway (the credential and RBAC from tenantci-runner, the front's
//! allow-list entry and the runner host's bundle from tenantci-front), then `front unpack
//! --config` on the runner's host (the bundle's files, and gitlab-runner's entry written by
//! tenantci-runner's `runner gitlab-config` step). The composition lives here, in the binary,
//! so that neither library crate knows the other (scripts/check-layering.sh).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_front::bundle::{self, Bundle};
use tenantci_front::config::{self as front_config, Subject};
use tenantci_runner::bootstrap::runner::{self as boot, HandBack, Inputs};
use tenantci_runner::gitlab;
use tenantci_runner::gitlab::config::KubernetesSettings;
use tenantci_runner::gitlab::token::TokenSource;

#[derive(Debug, Args)]
#[command(next_help_heading = "A runner on another host (through the front)")]
pub struct RemoteArgs {
    /// gitlab-runner runs on another host and reaches the cluster through `tenantci front`: do
    /// the gateway's half (credential, RBAC, the front's allow-list entry) and write the runner
    /// host's bundle; there, `tenantci front unpack --config` writes the rest. No GitLab flag
    /// here: the runner's host holds its token.
    #[arg(long, requires_all = ["front_config", "front", "bundle"])]
    pub remote: bool,
    /// The front's config: the runner's subject (--common-name, --group) joins the cluster's
    /// allow-list (a running front applies it within a second).
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub front_config: Option<PathBuf>,
    /// The front's published address as the runner host reaches it (host:port).
    #[arg(long, value_name = "HOST:PORT", requires = "remote")]
    pub front: Option<String>,
    /// The CA of the front's certificate. Default: front-ca.crt beside --front-config.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub front_ca: Option<PathBuf>,
    /// The name checked in the front's certificate. Default: the host of --front.
    #[arg(long, value_name = "NAME", requires = "remote")]
    pub front_server_name: Option<String>,
    /// Where `front connect` listens on the runner host: gitlab-runner's `host`.
    #[arg(long, value_name = "ADDR", default_value = bundle::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The bundle to write (0600), rewritten only when its content changes; copy it to the
    /// runner host.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub bundle: Option<PathBuf>,
}

/// What `bootstrap runner --remote` did (`-o json`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RemoteReport {
    #[serde(flatten)]
    hand_back: HandBack,
    front_config: Written,
    bundle: Written,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Written {
    path: PathBuf,
    /// Whether it was (in a dry run: would be) written.
    changed: bool,
}

/// The GitLab flags the gateway's half never uses: refused rather than silently ignored.
pub fn refuse_gitlab_flags(used: &[(&str, bool)]) -> Result<()> {
    match used.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(Error::bad_input(format!(
            "{flag} is for the runner's host with --remote: the gateway writes no config.toml entry"
        ))
        .hint("pass it to `tenantci front unpack --config ...` on the runner's host")),
        None => Ok(()),
    }
}

/// A token source `run_remote` never reads: the remote half has no token (the runner's host
/// has it).
pub fn no_token() -> TokenSource {
    TokenSource::File(PathBuf::new())
}

/// The gateway's half: checks the front's inputs, then credential and RBAC, then the
/// allow-list entry, then the bundle. Each step unchanged on a re-run.
pub async fn bootstrap(r: &RemoteArgs, inputs: &Inputs, cluster: &str, json: bool) -> Result<i32> {
    let (Some(config_path), Some(front), Some(bundle_path)) =
        (&r.front_config, &r.front, &r.bundle)
    else {
        unreachable!("clap requires --front-config, --front and --bundle with --remote")
    };
    let front_ca = r.front_ca.clone().unwrap_or_else(|| {
        config_path
            .parent()
            .unwrap_or(Path::new("."))
            .join("front-ca.crt")
    });
    let bundle_inputs = bundle::Inputs {
        cluster: cluster.to_string(),
        credential_dir: inputs.credential_dir.clone(),
        front: front.clone(),
        front_server_name: r.front_server_name.clone(),
        front_ca,
        listen: r.listen,
        namespace: inputs.namespace.clone(),
    };
    bundle::check(&bundle_inputs)?;
    let text = tenantci_core::input::read_text(
        "the front's config",
        config_path,
        tenantci_core::input::MAX_CONFIG,
    )?;
    let subject = Subject {
        common_name: inputs.common_name.clone(),
        organization: inputs.group.clone(),
    };
    let allowed = front_config::allow(&text, config_path, cluster, &subject)?;
    let hand_back = boot::run_remote(inputs, |s| {
        if !json {
            eprintln!("{:<11} {:<12} {}", s.step, s.outcome, s.detail);
        }
    })
    .await?;
    if let Some(next) = allowed.as_ref().filter(|_| !inputs.dry_run) {
        tenantci_core::fsutil::write_atomic(config_path, next.as_bytes(), 0o600)
            .map_err(|e| Error::unwritable("the front's config", config_path, e))?;
    }
    let bundle_changed = write_bundle(&bundle_inputs, bundle_path, inputs.dry_run)?;
    let report = RemoteReport {
        hand_back,
        front_config: Written {
            path: config_path.clone(),
            changed: allowed.is_some(),
        },
        bundle: Written {
            path: bundle_path.clone(),
            changed: bundle_changed,
        },
    };
    if json {
        output::print_json(&report)?;
    } else {
        print_remote(&report, &subject);
    }
    Ok(0)
}

/// Writes the bundle when its bytes differ from the file's (0600, atomically); true when it
/// was (or, in a dry run, would be) written. A dry run minted no credential: it would write.
fn write_bundle(inputs: &bundle::Inputs, path: &Path, dry_run: bool) -> Result<bool> {
    if dry_run && !inputs.credential_dir.join("tls.crt").exists() {
        return Ok(true);
    }
    let body = bundle::build(inputs)?.to_json();
    if std::fs::read(path).is_ok_and(|b| b == body) {
        return Ok(false);
    }
    if !dry_run {
        tenantci_core::fsutil::write_atomic(path, &body, 0o600)
            .map_err(|e| Error::unwritable("the front bundle", path, e))?;
    }
    Ok(true)
}

fn print_remote(r: &RemoteReport, subject: &Subject) {
    let said = |w: &Written| if w.changed { "written" } else { "unchanged" };
    let h = &r.hand_back;
    println!(
        "Hand-back{} (remote runner through the front):",
        if h.dry_run {
            " (dry run: nothing was written)"
        } else {
            ""
        }
    );
    println!("  cluster      {} ({})", h.cluster, h.server);
    println!("  credential   {}", h.credential.cert.display());
    println!(
        "  allow-list   CN={}, O={} in {} ({})",
        subject.common_name,
        subject.organization,
        r.front_config.path.display(),
        said(&r.front_config)
    );
    println!(
        "  bundle       {} ({}, 0600: it holds the runner's key)",
        r.bundle.path.display(),
        said(&r.bundle)
    );
    println!(
        "next: copy the bundle to the runner host, then there: tenantci front unpack --bundle FILE --config /etc/gitlab-runner/config.toml --gitlab-url URL --runner-token-file FILE; tenantci front connect --bundle FILE"
    );
}

#[derive(Debug, Args)]
pub struct UnpackArgs {
    /// The bundle from `front bundle` or `bootstrap runner --remote`.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front-bundle.json"
    )]
    pub bundle: PathBuf,
    /// Where gitlab-runner's ca.crt, tls.crt and tls.key go.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/etc/gitlab-runner/tenant-ci"
    )]
    pub dir: PathBuf,
    /// gitlab-runner's config.toml: also write the runner's [[runners]] entry there, pointing
    /// at the tunnel and the unpacked files (the `runner gitlab-config` step). Without it, the
    /// entry's keys are printed.
    #[arg(long, value_name = "PATH", help_heading = "The runner entry")]
    pub config: Option<PathBuf>,
    /// The runner's name in config.toml. Default: tenant-<cluster>.
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "The runner entry",
        requires = "config"
    )]
    pub name: Option<String>,
    /// GitLab's URL (also the API base for runner creation).
    #[arg(
        long,
        value_name = "URL",
        help_heading = "The runner entry",
        requires = "config"
    )]
    pub gitlab_url: Option<String>,
    /// The runner authentication token (glrt-...) or a $VAR reference. Visible in `ps`: prefer
    /// --runner-token-file or the environment variable.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "TENANTCI_RUNNER_TOKEN",
        hide_env_values = true,
        help_heading = "The runner entry"
    )]
    pub runner_token: Option<String>,
    /// A file holding the runner authentication token (or a $VAR reference).
    #[arg(long, value_name = "FILE", help_heading = "The runner entry")]
    pub runner_token_file: Option<PathBuf>,
    /// Jobs this runner runs at once (0 = bounded only by `concurrent`).
    #[arg(long, default_value_t = 4, help_heading = "The runner entry")]
    pub limit: u32,
    /// Take over an entry with this name that uses another executor.
    #[arg(long, help_heading = "The runner entry")]
    pub force: bool,
    #[command(flatten)]
    pub api: super::runner::GitlabApiArgs,
    /// Show what would change; write no file and create no runner.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Unpacked<'a> {
    files: Vec<String>,
    /// The files written (in a dry run: that would be); empty on a re-run.
    written: Vec<String>,
    config_section: String,
    /// The config.toml entry's report, with --config.
    entry: Option<&'a gitlab::setup::GitlabConfigReport>,
}

/// `front unpack`: the bundle's files, and with --config gitlab-runner's entry.
pub async fn unpack(a: UnpackArgs) -> Result<i32> {
    let b = Bundle::load(&a.bundle)?;
    let dir = std::path::absolute(&a.dir).unwrap_or(a.dir.clone());
    // The entry's inputs are checked before any file is written.
    let setup = a
        .config
        .as_ref()
        .map(|c| entry_inputs(&a, &b, &dir, c))
        .transpose()?;
    let files = b.unpack(&dir, a.dry_run)?;
    let done = match &setup {
        Some(inputs) => Some(gitlab::setup::run(inputs).await?),
        None => None,
    };
    let out = Unpacked {
        files: files.iter().map(|(p, _)| p.display().to_string()).collect(),
        written: files
            .iter()
            .filter(|(_, changed)| *changed)
            .map(|(p, _)| p.display().to_string())
            .collect(),
        config_section: b.config_section(&dir),
        entry: done.as_ref().map(|d| &d.report),
    };
    if a.output.is_json() {
        output::print_json(&out)?;
        return Ok(0);
    }
    let verb = if a.dry_run { "would write" } else { "wrote" };
    for (f, changed) in &files {
        println!(
            "{} {}",
            if *changed { verb } else { "unchanged" },
            f.display()
        );
    }
    match &done {
        Some(d) => super::runner::print_gitlab_config(d),
        None => {
            println!(
                "gitlab-runner's entry (or pass --config /etc/gitlab-runner/config.toml --gitlab-url URL --runner-token-file FILE to write it):"
            );
            print!("{}", out.config_section);
        }
    }
    Ok(0)
}

/// `runner gitlab-config`'s inputs for the bundle's entry: the tunnel as `host`, the unpacked
/// files, the bundle's namespace.
fn entry_inputs(
    a: &UnpackArgs,
    b: &Bundle,
    dir: &Path,
    config: &Path,
) -> Result<gitlab::setup::Inputs> {
    let url = a.gitlab_url.clone().ok_or_else(|| {
        Error::bad_input(
            "--config needs --gitlab-url: the entry names the GitLab it registers with",
        )
        .hint("pass --gitlab-url https://gitlab.example.com")
    })?;
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("tenant-{}", b.cluster));
    let token = TokenSource::from_flags(
        a.runner_token_file.clone(),
        a.api.creation(&url, &name)?,
        a.runner_token.as_deref(),
    )?;
    let kubernetes = KubernetesSettings {
        host: Some(format!("https://{}", b.listen)),
        cert_file: Some(dir.join("tls.crt")),
        key_file: Some(dir.join("tls.key")),
        ca_file: Some(dir.join("ca.crt")),
        namespace: b.namespace.clone(),
        ..KubernetesSettings::default()
    };
    Ok(gitlab::setup::Inputs {
        config: config.to_path_buf(),
        name,
        url,
        token,
        limit: a.limit,
        request_concurrency: 1,
        kubernetes,
        gitlab_ca: a.api.gitlab_ca(),
        force: a.force,
        dry_run: a.dry_run,
    })
}
