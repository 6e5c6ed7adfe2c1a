//! `tenantci executor-proxy`: the sidecar of every executor Pod (see
//! tenantci_dispatch::executor_proxy). Hidden from the top-level help: the dispatcher writes its
//! flags into the Pod spec; docs/cli.md documents it for operators reading a Pod.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use tenantci_core::{Error, Result};
use tenantci_core::{duration, spiffe};
use tenantci_dispatch::executor_proxy::passthrough::{self, GiteaUpstream};
use tenantci_dispatch::executor_proxy::{self, FacadeTrust, ProxyConfig};
use tenantci_dispatch::http1::Bounds;

#[derive(Debug, Args)]
pub struct ExecutorProxyArgs {
    /// Loopback address the runner's `.runner` points at (port 0 picks one and prints it).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8431")]
    pub listen: SocketAddr,
    /// The dispatcher's facade (https), as `facade.url` in its config.
    #[arg(long, value_name = "URL", required_unless_present = "probe")]
    pub facade_url: Option<String>,
    /// The facade's CA certificate (PEM): the only certificate the proxy trusts.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present_any = ["probe", "spiffe_source"],
        conflicts_with = "spiffe_source"
    )]
    pub facade_ca: Option<PathBuf>,
    /// Executor identity: speak SPIFFE mTLS to the facade with this SVID source,
    /// workload-api (SPIFFE_ENDPOINT_SOCKET) or files:DIR; needs --facade-id.
    #[arg(long, value_name = "workload-api|files:DIR", requires = "facade_id")]
    pub spiffe_source: Option<String>,
    /// The facade's SPIFFE ID: a facade presenting any other is refused.
    #[arg(long, value_name = "SPIFFE_ID", requires = "spiffe_source")]
    pub facade_id: Option<String>,
    /// Gitea's base URL (the dispatcher's gitea.url): every request that is not a RunnerService
    /// call (checkout, artifacts, the API, with the job's own headers) goes there. Without it
    /// such requests are answered not_found.
    #[arg(long, value_name = "URL")]
    pub gitea_url: Option<String>,
    /// An extra CA (PEM) to trust for Gitea, beside the image's trust store (the dispatcher's
    /// gitea.ca_file).
    #[arg(long, value_name = "FILE", requires = "gitea_url")]
    pub gitea_ca: Option<PathBuf>,
    /// How long one call is retried while the facade is away (a dispatcher restart), as a Go
    /// duration. Default 2m.
    #[arg(long, value_name = "DURATION", default_value = "2m")]
    pub retry_for: String,
    /// How long a client may take to send a request's headers (or keep a connection idle)
    /// before the proxy closes its connection, as a Go duration. Default 20s.
    #[arg(long, value_name = "DURATION")]
    pub header_read_timeout: Option<String>,
    /// After SIGTERM: how long calls in flight may finish before the proxy exits anyway, as
    /// a Go duration. Default 5s.
    #[arg(long, value_name = "DURATION")]
    pub shutdown_grace: Option<String>,
    /// Ask the proxy at --listen whether it serves (exit 0) or not (exit 1), then exit: the
    /// sidecar's startup probe, so the runner starts only once the proxy listens.
    #[arg(long)]
    pub probe: bool,
}

/// The largest Gitea CA file read (a bundle of a few certificates).
const GITEA_CA_LIMIT: u64 = 256 << 10;

/// The server's bounds: the flags, else the proxy's defaults.
fn bounds(args: &ExecutorProxyArgs) -> Result<Bounds> {
    Ok(Bounds {
        header_read_timeout: match &args.header_read_timeout {
            Some(d) => positive("--header-read-timeout", d)?,
            None => executor_proxy::HEADER_READ_TIMEOUT,
        },
        grace: match &args.shutdown_grace {
            Some(d) => positive("--shutdown-grace", d)?,
            None => executor_proxy::SHUTDOWN_GRACE,
        },
        max_connections: executor_proxy::MAX_CONNECTIONS,
    })
}

/// Gitea as the proxy passes through to it (`--gitea-url`, its CA from `--gitea-ca`); None:
/// only the RunnerService.
fn gitea_upstream(
    url: Option<String>,
    ca: Option<&std::path::Path>,
) -> Result<Option<GiteaUpstream>> {
    let Some(url) = url else {
        return Ok(None);
    };
    let ca_pem = match ca {
        Some(path) => Some(tenantci_core::input::read_text(
            "the Gitea CA file",
            path,
            GITEA_CA_LIMIT,
        )?),
        None => None,
    };
    Ok(Some(GiteaUpstream { url, ca_pem }))
}

pub async fn run(args: ExecutorProxyArgs) -> Result<i32> {
    if args.probe {
        return Ok(if executor_proxy::probe(args.listen).await {
            0
        } else {
            1
        });
    }
    let retry_for = positive("--retry-for", &args.retry_for)?;
    let bounds = bounds(&args)?;
    if let Some(url) = &args.gitea_url {
        passthrough::check_url(url)?;
    }
    let facade = match (&args.spiffe_source, &args.facade_id) {
        (Some(source), Some(id)) => {
            let facade_id = spiffe::id::spiffe_id("--facade-id", id)?;
            let spec = spiffe::SourceSpec::parse("--spiffe-source", source)?;
            // Waits for the Pod's first SVID: its entry may appear seconds after the Pod
            // (the SPIRE controller's reconcile), within the sidecar's startup probe.
            let source = spec.open(None, retry_for).await?;
            FacadeTrust::Spiffe { source, facade_id }
        }
        _ => {
            let ca_path = args.facade_ca.expect("clap requires --facade-ca");
            FacadeTrust::Ca(executor_proxy::read_ca_file(&ca_path)?)
        }
    };
    let gitea = gitea_upstream(args.gitea_url, args.gitea_ca.as_deref())?;
    let cfg = ProxyConfig {
        listen: args.listen,
        facade_url: args.facade_url.expect("clap requires --facade-url"),
        facade,
        retry_for,
        bounds,
        gitea,
    };
    executor_proxy::check(&cfg)?;
    // The handlers are installed here, before the listening line, not when `serve` first
    // polls the future: a SIGTERM that arrives after the line but before that poll (a busy
    // machine, a connection accepted first) would otherwise kill the proxy by default.
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    let shutdown = async {
        match handlers {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    executor_proxy::serve(
        cfg,
        |bound| {
            // The first stdout line: the bound address (tests and port 0 read it).
            println!("listening http://{bound}");
            tracing::info!(%bound, "executor-proxy: listening");
        },
        shutdown,
    )
    .await?;
    Ok(0)
}

/// A positive Go duration given to `flag`.
fn positive(flag: &str, value: &str) -> Result<std::time::Duration> {
    duration::parse_positive(value).map_err(|e| {
        Error::bad_input(format!("{flag} `{value}` {e}"))
            .hint("pass a Go duration such as 2m, 90s or 500ms")
    })
}
