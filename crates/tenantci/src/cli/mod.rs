//! Command-line surface: parses arguments and dispatches to the library. No work happens here
//! beyond turning flags into the library's inputs and its results into output.

use clap::{Args, Parser, Subcommand};

use crate::logging::LogFormat;

mod bootstrap;
mod check_host;
mod credential;
mod dispatch;
mod dispatch_reach;
mod dispatch_status;
#[cfg(test)]
mod doc_commands;
mod docs;
mod executor_proxy;
mod forge_view;
mod front;
mod internal;
mod pki;
mod queue;
mod remote_runner;
mod runner;
mod runner_view;
#[cfg(feature = "sim")]
mod sim;
mod tenant;
mod values;

/// tenantci connects GitLab and Gitea CI to multi-tenant Kubernetes clusters whose nodes are
/// rented on demand. Run it on the gateway host, where the tenant apiservers listen on loopback.
#[derive(Debug, Parser)]
#[command(
    name = "tenantci",
    version,
    propagate_version = true,
    after_help = "Exit codes: 0 success, 1 a check or verification failed, 2 bad input \
                  (nothing was changed), 3 an external system failed.\n\
                  Docs: docs/cli.md; runbooks in docs/runbooks/."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, env = "TENANTCI_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// More log detail: -v info, -vv debug, -vvv trace (RUST_LOG overrides).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

// Parsed once per process: variant sizes do not matter, boxing would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// From a cluster name to a working runner: credential, RBAC, checks, config.
    #[command(subcommand)]
    Bootstrap(bootstrap::BootstrapCommand),
    /// Create a tenant cluster's PKI (serving CA, ClientCA) in the state directory.
    #[command(subcommand)]
    Pki(pki::PkiCommand),
    /// Mint scoped runner credentials signed by a cluster's ClientCA.
    #[command(subcommand)]
    Credential(credential::CredentialCommand),
    /// Check that this host can run the gateway or a runner (state dir, disk, ClientCAs, tools).
    CheckHost(check_host::CheckHostArgs),
    /// Entry points with a fixed environment interface, as the runbook calls them.
    #[command(subcommand)]
    Internal(internal::InternalCommand),
    /// Size job pods against the node image and keep rented nodes warm with pause pods.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Write runner configuration: gitlab-runner's config.toml, act_runner's files.
    #[command(subcommand)]
    Runner(runner::RunnerCommand),
    #[cfg(feature = "sim")]
    /// Run a local gateway simulator with HTTPS tenant apiservers (tests and the quickstart).
    Sim(sim::SimArgs),
    /// The JetStream job queue: NATS users, stream and consumers, status.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// The Gitea dispatcher: `init` registers and writes its config, `run` runs it.
    #[command(subcommand)]
    Dispatch(dispatch::DispatchCommand),
    /// A GitLab Runner on another host: the authenticated front for a tenant apiserver
    /// (`serve`, `revoke`, `status` on the gateway host) and its tunnel (`connect` there).
    #[command(subcommand)]
    Front(front::FrontCommand),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the man page, or write one per command with --out-dir.
    Man(docs::ManArgs),
    /// The executor Pod's sidecar: plain HTTP on loopback for the runner, HTTPS to the facade
    /// trusting only its CA (docs/cli.md). Written into Pod specs by the dispatcher.
    #[command(hide = true)]
    ExecutorProxy(executor_proxy::ExecutorProxyArgs),
}

/// Runs the parsed command and returns the process exit code.
pub fn run(cli: Cli) -> tenantci_core::Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            tenantci_core::Error::external("cannot start the async runtime").caused_by(e)
        })?;
    runtime.block_on(dispatch(cli.command))
}

async fn dispatch(command: Command) -> tenantci_core::Result<i32> {
    match command {
        Command::Bootstrap(cmd) => bootstrap::run(cmd).await,
        Command::Pki(cmd) => pki::run(cmd).await,
        Command::Credential(cmd) => credential::run(cmd).await,
        Command::CheckHost(args) => check_host::run(args).await,
        Command::Internal(cmd) => internal::run(cmd).await,
        Command::Tenant(cmd) => tenant::run(cmd).await,
        Command::Runner(cmd) => runner::run(cmd).await,
        #[cfg(feature = "sim")]
        Command::Sim(args) => sim::run(args).await,
        Command::Queue(cmd) => queue::run(cmd).await,
        Command::Dispatch(cmd) => dispatch::run(cmd).await,
        Command::Front(cmd) => front::run(cmd).await,
        Command::Completions(args) => docs::completions(args),
        Command::Man(args) => docs::man(args),
        Command::ExecutorProxy(args) => executor_proxy::run(args).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// Every command's `--help`, as the user sees it, against `tests/help/<command>.txt`: a
    /// flag or wording change is a visible diff in review. `TENANTCI_UPDATE_HELP=1` rewrites
    /// the snapshots after an intended change.
    #[test]
    fn help_output_matches_the_snapshots() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/help");
        let update = std::env::var_os("TENANTCI_UPDATE_HELP").is_some();
        let mut seen = Vec::new();
        let mut stale = Vec::new();
        walk(super::Cli::command(), "tenantci", &mut |name, help| {
            let path = dir.join(format!("{name}.txt"));
            seen.push(path.clone());
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &help).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(help.as_str()) {
                stale.push(name.to_string());
            }
        });
        assert!(
            stale.is_empty(),
            "--help changed for {stale:?}: review, then TENANTCI_UPDATE_HELP=1 cargo test -p tenantci help_output"
        );
        let extra: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !seen.contains(p))
            .collect();
        assert!(
            extra.is_empty(),
            "snapshots of commands that no longer exist: {extra:?}"
        );
    }

    fn walk(cmd: clap::Command, name: &str, visit: &mut dyn FnMut(&str, String)) {
        // A fixed width: the snapshot must not depend on the terminal running the test.
        let mut cmd = cmd.term_width(100);
        cmd.build();
        visit(name, cmd.render_long_help().to_string());
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub.clone(), &format!("{name}-{}", sub.get_name()), visit);
        }
    }
}
