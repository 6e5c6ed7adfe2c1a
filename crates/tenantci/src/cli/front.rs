//! `tenantci front ...`: a GitLab Runner on another host reaching a tenant apiserver through an
//! authenticated front (docs/runbooks, "GitLab on its own VM"). Flags become
//! [`tenantci_front`] inputs here; the library does the work.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;
use tokio::sync::watch;

use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_front::{
    bundle, config::FrontConfig, config::Subject, connect, init, renewal, revoke, serve, signer,
    status,
};

#[derive(Debug, Subcommand)]
pub enum FrontCommand {
    /// Write the front's explicit config, its own CA and serving certificate, and an empty
    /// deny-list into --dir (every file 0600, none overwritten).
    ///
    /// Publishing a tenant apiserver beyond loopback is a trust-boundary change: read the
    /// runbook's "GitLab on its own VM" first. The config admits one subject (--common-name,
    /// --organization) to each --cluster; edit it for more. Exit 2: bad input, nothing written.
    Init(InitArgs),
    /// Serve the front: one public port, mutual TLS with the runner's own credential, the
    /// runner's TLS to the apiserver relayed untouched inside.
    ///
    /// Starts only from an explicit config (`front init` writes one). Per connection: the
    /// cluster named by ALPN, the client certificate checked against that cluster's ClientCA,
    /// its subject against the allow-list (never system:masters), its serial against the
    /// deny-list; only then is the cluster's apiserver URL resolved through the gateway and a
    /// connection opened to it. One audit line per connection (target tenantci::front::audit).
    /// Prints a ready line (JSON) on stdout once listening; SIGTERM cuts open tunnels and exits
    /// 0. Exit 2: bad config or certificates; 3: the gateway is unreachable at start.
    Serve(ServeArgs),
    /// Put a certificate on the front's deny-list (by --cert or --serial).
    ///
    /// An entry names the cluster whose ClientCA issued the certificate and its serial: --cert
    /// finds that cluster itself; --serial applies to --cluster, or to every cluster the front
    /// serves when --cluster is left out. A running front re-reads the list every second: new
    /// connections with that certificate are refused and open tunnels carrying it are closed
    /// within seconds. The apiserver itself has no revocation: mint a new credential for the
    /// runner, and keep the entry until the old certificate expires. The list must exist (`front
    /// init` writes it); exit 2 when it does not, nothing written.
    Revoke(RevokeArgs),
    /// What the running front has live: the clusters and subjects it admits, the deny-list,
    /// open tunnels per cluster and subject (age, bytes), the next expiry among the client
    /// credentials it has admitted, and whether its last reload applied.
    ///
    /// Read from the running front over its socket beside --config (front.sock, 0600), so it
    /// shows the rules in force, not the files. Exit 1 when the deny-list does not read (the
    /// front keeps the list it last read); exit 2 when no front runs with that config.
    Status(StatusArgs),
    /// Write the runner host's one file: the credential, the front's CA and address, the
    /// loopback port (0600, never over an existing file).
    ///
    /// Copy that one file to the runner host; there `tenantci front unpack` writes
    /// gitlab-runner's files and `tenantci front connect` serves the tunnel from it.
    Bundle(BundleArgs),
    /// On the runner host: write gitlab-runner's ca.crt, tls.crt and tls.key (0600) from a
    /// bundle and, with --config, gitlab-runner's [[runners]] entry using them.
    ///
    /// The entry points at `front connect`'s loopback address with the unpacked files and the
    /// bundle's namespace (the `runner gitlab-config` step; the token from --runner-token-file
    /// or created with --gitlab-api-token-file). Without --config the entry's keys are printed.
    /// Idempotent: files that already hold the bundle's bytes and an unchanged entry are not
    /// written again. --dry-run writes nothing.
    Unpack(super::remote_runner::UnpackArgs),
    /// On the runner host: listen on loopback and carry each connection through the front.
    ///
    /// gitlab-runner's config.toml keeps host = https://127.0.0.1:<port> and the apiserver's
    /// CA; its TLS runs end to end inside the tunnel. Prints a ready line (JSON) on stdout once
    /// listening; SIGTERM stops it (exit 0). packaging/systemd/tenantci-front-connect.service
    /// runs it. Any local process can connect: --max-connections and --idle-timeout bound what
    /// they can hold of the runner's place at the front.
    Connect(ConnectArgs),
    /// On the gateway host: sign renewals of runner certificates, the one front process that
    /// reads a ClientCA key.
    ///
    /// Listens on the config's [renewal] signer_socket (0660) and answers only the uid
    /// [renewal] front_uid names (default: its own), checked from the socket's peer
    /// credentials. Each request is judged again here, from the config and deny-list read at
    /// that moment: the presented certificate must chain to the cluster's ClientCA, be allowed
    /// and not denied; the request must be for that same subject, no system: group, for at
    /// most [renewal] max_lifetime. One audit line per certificate signed and per refusal
    /// (target tenantci::front::signer::audit). packaging/systemd/tenantci-front-signer.service
    /// runs it. Prints a ready line (JSON); SIGTERM stops it (exit 0). Exit 2: bad config or
    /// socket.
    Signer(SignerArgs),
}

#[derive(Debug, Args)]
pub struct SignerArgs {
    /// The front's config (its [renewal] table and allow-lists; re-read per request).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front/front.toml"
    )]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where the front's files go (created 0700).
    #[arg(long, value_name = "DIR", default_value = "/etc/tenantci/front")]
    pub dir: PathBuf,
    /// The gateway's state directory (Clusters and their ClientCAs).
    #[arg(long, value_name = "DIR", env = "SOCIALWEB_TENANTCREDENTIAL_STATE_DIR")]
    pub state_dir: PathBuf,
    /// A cluster the front publishes (repeatable).
    #[arg(long, value_name = "NAME", required = true)]
    pub cluster: Vec<String>,
    /// The allowed certificate's CommonName (the Kubernetes user).
    #[arg(long, value_name = "CN", default_value = "gitlab-runner")]
    pub common_name: String,
    /// An Organization the allowed certificate carries (a Kubernetes group).
    #[arg(long, value_name = "O", default_value = "gitlab-runner")]
    pub organization: String,
    /// The published address.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7443")]
    pub listen: SocketAddr,
    /// Prometheus /metrics (keep it on loopback).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// A DNS name or IP address runner hosts reach the front by (repeatable; the certificate's
    /// subject alternative names).
    #[arg(long = "name", value_name = "NAME", required = true)]
    pub names: Vec<String>,
    /// The front certificate's validity (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "8760h")]
    pub valid_for: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The front's config (`front init` writes one).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front/front.toml"
    )]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The front's config (names the deny-list).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front/front.toml"
    )]
    pub config: PathBuf,
    /// The certificate to refuse (PEM), e.g. a leaked tls.crt.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "serial",
        conflicts_with = "serial"
    )]
    pub cert: Option<PathBuf>,
    /// The serial to refuse, hex (colons allowed), as `openssl x509 -noout -serial` prints it.
    #[arg(long, value_name = "HEX")]
    pub serial: Option<String>,
    /// The cluster whose ClientCA issued --serial (default: every cluster the front serves;
    /// with --cert, the certificate's own cluster).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// A note kept beside the serial (who, why).
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The running front's config: its status socket is beside it.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front/front.toml"
    )]
    pub config: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The cluster the runner works in.
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// The runner's credential: `credential mint`'s OUT_DIR (ca.crt, tls.crt, tls.key).
    #[arg(long, value_name = "DIR")]
    pub credential_dir: PathBuf,
    /// The front's published address as the runner host reaches it (host:port).
    #[arg(long, value_name = "HOST:PORT")]
    pub front: String,
    /// The CA of the front's certificate (`front init`'s front-ca.crt).
    #[arg(long, value_name = "FILE")]
    pub front_ca: PathBuf,
    /// The name checked in the front's certificate. Default: the host of --front.
    #[arg(long, value_name = "NAME")]
    pub front_server_name: Option<String>,
    /// Where `front connect` listens on the runner host: gitlab-runner's `host`.
    #[arg(long, value_name = "ADDR", default_value = bundle::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The namespace of the runner's job pods.
    #[arg(long, value_name = "NS", default_value = "gitlab-runner")]
    pub namespace: String,
    /// The bundle to write (0600; refused when it exists).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The bundle from `front bundle`.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/tenantci/front-bundle.json"
    )]
    pub bundle: PathBuf,
    /// Listen here instead of the bundle's address (loopback only).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Local connections open at once, each one tunnel through the front (and one place under
    /// its max_per_subject); more are closed at once, with a warning naming this flag.
    #[arg(
        long,
        value_name = "N",
        default_value_t = connect::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections: u32,
    /// A tunnel with no byte either way for this long is closed (Go duration; keep it above the
    /// apiserver's watch timeout, as the front's idle_timeout).
    #[arg(long, value_name = "DURATION", default_value = connect::DEFAULT_IDLE_TIMEOUT)]
    pub idle_timeout: String,
    /// gitlab-runner's credential directory (`front unpack --dir`): each renewal replaces its
    /// tls.crt and tls.key too (0600), so gitlab-runner's config.toml never changes.
    #[arg(long, value_name = "DIR")]
    pub runner_dir: Option<PathBuf>,
    /// Renew the certificate after this fraction of its life (0 < F < 1; the kubelet renews
    /// between 0.7 and 0.9). The new key is made on this host and never leaves it.
    #[arg(long, value_name = "F", default_value = "0.667")]
    pub renew_at: f64,
    /// The lifetime to ask for at renewal (Go duration; at most the front's [renewal]
    /// max_lifetime). Default: the current certificate's.
    #[arg(long, value_name = "DURATION")]
    pub renew_valid_for: Option<String>,
    /// Prometheus /metrics: tenantci_front_connect_cert_expiry_timestamp_seconds and the
    /// renewals by outcome (keep it on loopback).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

impl ConnectArgs {
    /// The local side's bounds from the flags (the bundle has none).
    fn local(&self) -> Result<connect::Local> {
        let idle_timeout =
            tenantci_core::duration::parse_positive(&self.idle_timeout).map_err(|e| {
                Error::bad_input(format!("--idle-timeout `{}` {e}", self.idle_timeout))
                    .hint("pass a Go duration such as 1h or 90m")
            })?;
        Ok(connect::Local {
            max_connections: self.max_connections,
            idle_timeout,
        })
    }

    /// The renewal's options from the flags.
    fn renewal(&self) -> Result<renewal::Options> {
        if !(self.renew_at > 0.0 && self.renew_at < 1.0) {
            return Err(Error::bad_input(format!(
                "--renew-at {} is not a fraction between 0 and 1",
                self.renew_at
            ))
            .hint("pass e.g. 0.667 (renew at two thirds of the certificate's life)"));
        }
        let valid_for = self
            .renew_valid_for
            .as_deref()
            .map(tenantci_core::pki::policy::parse_valid_for)
            .transpose()?;
        Ok(renewal::Options {
            bundle_path: self.bundle.clone(),
            runner_dir: self.runner_dir.clone(),
            renew_at: self.renew_at,
            valid_for,
        })
    }
}

pub async fn run(cmd: FrontCommand) -> Result<i32> {
    match cmd {
        FrontCommand::Init(a) => init_front(a),
        FrontCommand::Serve(a) => serve_front(a).await,
        FrontCommand::Revoke(a) => revoke(a),
        FrontCommand::Status(a) => show_status(a),
        FrontCommand::Bundle(a) => write_bundle(a),
        FrontCommand::Unpack(a) => super::remote_runner::unpack(a).await,
        FrontCommand::Connect(a) => connect_front(a).await,
        FrontCommand::Signer(a) => run_signer(a).await,
    }
}

fn init_front(a: InitArgs) -> Result<i32> {
    let valid_for = tenantci_core::pki::policy::parse_valid_for(&a.valid_for)?;
    let inputs = init::Inputs {
        dir: a.dir,
        state_dir: std::path::absolute(&a.state_dir).unwrap_or(a.state_dir),
        clusters: a.cluster,
        subject: Subject {
            common_name: a.common_name,
            organization: a.organization,
        },
        listen: a.listen,
        metrics_listen: a.metrics_listen,
        names: a.names,
        valid_for,
    };
    for path in init::run(&inputs)? {
        println!("wrote {}", path.display());
    }
    println!(
        "next: tenantci front serve --config {}",
        inputs.dir.join(init::CONFIG_FILE).display()
    );
    Ok(0)
}

/// SIGTERM or SIGINT, installed before the ready line so an early signal is not fatal.
fn shutdown_on_signal() -> watch::Receiver<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = watch::channel(false);
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    tokio::spawn(async move {
        if let (Ok(mut term), Ok(mut int)) = handlers {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = tx.send(true);
        } else {
            std::future::pending::<()>().await;
        }
    });
    rx
}

async fn serve_front(a: ServeArgs) -> Result<i32> {
    let config = FrontConfig::load(&a.config)?;
    let shutdown = shutdown_on_signal();
    let bound = serve::bind(&config).await?;
    let ready = serde_json::json!({
        "type": "ready",
        "listen": bound.addr.to_string(),
        "metrics": bound.metrics_addr.map(|m| m.to_string()),
    });
    let opened = serve::open(&a.config, config).await?;
    println!("{ready}");
    serve::serve(opened, bound, shutdown).await;
    Ok(0)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Revoked {
    /// None: every cluster the front serves.
    clusters: Option<Vec<String>>,
    serial: String,
    added: bool,
    deny_list: String,
}

fn revoke(a: RevokeArgs) -> Result<i32> {
    let config = FrontConfig::load(&a.config)?;
    let target = match (&a.cert, &a.serial) {
        (Some(path), _) => revoke::Target::Cert(path),
        (None, Some(s)) => revoke::Target::Serial(s),
        (None, None) => unreachable!("clap requires --cert or --serial"),
    };
    let r = revoke::plan(&config, target, a.cluster.as_deref(), a.note.as_deref())?;
    let path = config.deny_list_path();
    let added = revoke::apply(path, &r)?;
    let out = Revoked {
        clusters: r.clusters,
        serial: r.serial,
        added,
        deny_list: path.display().to_string(),
    };
    let scope = match &out.clusters {
        Some(c) => format!("cluster {}", c.join(", ")),
        None => "every cluster".to_string(),
    };
    if a.output.is_json() {
        output::print_json(&out)?;
    } else if out.added {
        println!(
            "serial {} is denied on {scope} ({}); a running front closes its tunnels within seconds",
            out.serial, out.deny_list
        );
    } else {
        println!(
            "serial {} was already denied on {scope} ({})",
            out.serial, out.deny_list
        );
    }
    Ok(0)
}

fn show_status(a: StatusArgs) -> Result<i32> {
    let s = status::fetch(&a.config, &tenantci_front::live::socket_path(&a.config))?;
    if a.output.is_json() {
        output::print_json(&s)?;
    } else {
        print!("{}", status::render(&s));
    }
    // A deny-list that does not read is a failed check: nothing here says what is revoked.
    Ok(if s.deny_list.problem.is_some() { 1 } else { 0 })
}

fn write_bundle(a: BundleArgs) -> Result<i32> {
    let b = bundle::build(&bundle::Inputs {
        cluster: a.cluster,
        credential_dir: a.credential_dir,
        front: a.front,
        front_server_name: a.front_server_name,
        front_ca: a.front_ca,
        listen: a.listen,
        namespace: a.namespace,
    })?;
    tenantci_core::fsutil::write_new_atomic(&a.out, &b.to_json(), 0o600).map_err(|e| {
        Error::bad_input(format!("cannot write the bundle `{}`", a.out.display()))
            .caused_by(e)
            .hint("the bundle is never overwritten: pick a new --out or move the old one aside")
    })?;
    println!(
        "wrote {} (0600: it holds the runner's key); copy it to the runner host, then `tenantci front unpack` and `tenantci front connect` there",
        a.out.display()
    );
    Ok(0)
}

async fn connect_front(a: ConnectArgs) -> Result<i32> {
    let local = a.local()?;
    let options = a.renewal()?;
    let b = bundle::Bundle::load(&a.bundle)?;
    let dialer = connect::Dialer::new(&b)?;
    let shutdown = shutdown_on_signal();
    let listener = connect::bind(a.listen.unwrap_or(b.listen)).await?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::external("cannot read the listening address").caused_by(e))?;
    let metrics = std::sync::Arc::new(tenantci_front::metrics::ConnectMetrics::default());
    let metrics_addr = match a.metrics_listen {
        Some(m) => Some(tenantci_front::metrics::listen(m, metrics.clone()).await?),
        None => None,
    };
    println!(
        "{}",
        serde_json::json!({"type": "ready", "listen": addr.to_string(), "front": b.front, "cluster": b.cluster, "metrics": metrics_addr.map(|m| m.to_string())})
    );
    tracing::info!(%addr, front = b.front.as_str(), cluster = b.cluster.as_str(), "front connect: listening");
    let (dialers, dialer_rx) = watch::channel(std::sync::Arc::new(dialer));
    tokio::spawn(renewal::run(b, options, dialers, metrics, shutdown.clone()));
    connect::serve(dialer_rx, listener, local, shutdown).await;
    Ok(0)
}

async fn run_signer(a: SignerArgs) -> Result<i32> {
    let config_path = std::path::absolute(&a.config).unwrap_or(a.config);
    let config = FrontConfig::load(&config_path)?;
    let shutdown = shutdown_on_signal();
    let listener = signer::bind(&config)?;
    let uid = signer::allowed_uid(&config);
    let socket = config.renewal.signer_socket.display().to_string();
    println!(
        "{}",
        serde_json::json!({"type": "ready", "socket": socket, "frontUid": uid})
    );
    tracing::info!(socket, uid, "front signer: listening");
    signer::serve(config_path, listener, uid, shutdown).await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Connect {
        #[command(flatten)]
        args: super::ConnectArgs,
    }

    fn parse(flags: &[&str]) -> Result<Connect, clap::Error> {
        Connect::try_parse_from(std::iter::once("connect").chain(flags.iter().copied()))
    }

    #[test]
    fn connect_flags_become_the_local_bounds() {
        let d = parse(&[]).unwrap().args.local().unwrap();
        assert_eq!(d.max_connections, 64);
        assert_eq!(d.idle_timeout, std::time::Duration::from_secs(3600));
        let a = parse(&["--max-connections", "2", "--idle-timeout", "90s"]).unwrap();
        let l = a.args.local().unwrap();
        assert_eq!(l.max_connections, 2);
        assert_eq!(l.idle_timeout, std::time::Duration::from_secs(90));
    }

    #[test]
    fn zero_or_malformed_connect_bounds_are_refused() {
        assert!(parse(&["--max-connections", "0"]).is_err());
        for bad in ["0", "0s", "ten", "1 hour"] {
            let a = parse(&["--idle-timeout", bad]).unwrap();
            let e = a.args.local().unwrap_err();
            assert!(e.message().contains("--idle-timeout"), "{}", e.message());
        }
    }
}
