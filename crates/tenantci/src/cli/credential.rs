//! `tenantci credential ...`: flags (each also readable from the runbook's variable).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::values::KeyTypeArg;
use crate::output::{self, OutputArgs};
use tenantci_core::{Error, Result};
use tenantci_runner::credential::{self, CaSource, HandBack, MintRequest};

#[derive(Debug, Subcommand)]
pub enum CredentialCommand {
    /// Mint a runner's client certificate from a cluster's ClientCA, with a kubeconfig.
    ///
    /// Writes ca.crt (the serving CA), tls.crt, tls.key and kubeconfig into --out-dir, each
    /// 0600, the directory 0700. Refuses, writing nothing, a `system:` name (never
    /// `system:masters`: that is cluster-admin), an existing file, or a validity that outlasts
    /// the ClientCA. Every flag can also be given by the runbook's
    /// SOCIALWEB_TENANTCREDENTIAL_* variable shown with it.
    Mint(MintArgs),
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Where the CAs come from")]
pub struct MintArgs {
    /// The gateway state directory; the CAs are read from clusters/<cluster>/pki/.
    #[arg(long, value_name = "DIR", env = "SOCIALWEB_TENANTCREDENTIAL_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The tenant cluster's name in the state directory.
    #[arg(long, value_name = "NAME", env = "SOCIALWEB_TENANTCREDENTIAL_CLUSTER")]
    pub cluster: Option<String>,
    /// The ClientCA certificate (instead of --state-dir/--cluster).
    #[arg(long, value_name = "FILE")]
    pub client_ca_cert: Option<PathBuf>,
    /// The ClientCA private key (PEM; PKCS#8, SEC1 or PKCS#1).
    #[arg(long, value_name = "FILE")]
    pub client_ca_key: Option<PathBuf>,
    /// The CA that signed the tenant apiserver's serving certificate (becomes ca.crt).
    #[arg(long, value_name = "FILE")]
    pub server_ca: Option<PathBuf>,

    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The credential")]
pub struct IdentityArgs {
    /// The tenant apiserver URL, https://127.0.0.1:<leased port> (the Cluster's status.url).
    #[arg(long, value_name = "URL", env = "SOCIALWEB_TENANTCREDENTIAL_SERVER")]
    pub server: String,
    /// The Kubernetes user name (certificate CN), e.g. `gitlab-runner`.
    #[arg(
        long,
        value_name = "CN",
        env = "SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME"
    )]
    pub common_name: String,
    /// A Kubernetes group (certificate O); repeat it or separate with commas. It must be the
    /// group the ClusterRoleBinding names.
    #[arg(
        long = "organization",
        value_name = "GROUP",
        env = "SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS",
        value_delimiter = ',',
        required = true
    )]
    pub organizations: Vec<String>,
    /// Directory for ca.crt, tls.crt, tls.key and kubeconfig (created 0700).
    #[arg(long, value_name = "DIR", env = "SOCIALWEB_TENANTCREDENTIAL_OUT_DIR")]
    pub out_dir: PathBuf,
    /// Lifetime as a Go duration (`720h`, `90m`, `1h30m`). Default: 720h.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SOCIALWEB_TENANTCREDENTIAL_VALID_FOR"
    )]
    pub valid_for: Option<String>,
    /// Key algorithm of the new key pair.
    #[arg(long, value_enum, default_value_t = KeyTypeArg::EcdsaP256)]
    pub key_type: KeyTypeArg,
}

pub async fn run(cmd: CredentialCommand) -> Result<i32> {
    match cmd {
        CredentialCommand::Mint(args) => {
            let json = args.output.is_json();
            let hand_back = credential::mint(&request_from_args(args)?)?;
            print_hand_back(&hand_back, json)?;
            Ok(0)
        }
    }
}

fn request_from_args(args: MintArgs) -> Result<MintRequest> {
    let ca = ca_source(
        args.state_dir,
        args.cluster,
        args.client_ca_cert,
        args.client_ca_key,
        args.server_ca,
    )?;
    let id = args.identity;
    Ok(MintRequest {
        ca,
        server: id.server,
        common_name: id.common_name,
        organizations: id.organizations,
        out_dir: id.out_dir,
        valid_for: id.valid_for,
        key_type: id.key_type.into(),
    })
}

/// Exactly one way of naming the CAs: the state-dir layout, or all three files.
pub(super) fn ca_source(
    state_dir: Option<PathBuf>,
    cluster: Option<String>,
    client_ca_cert: Option<PathBuf>,
    client_ca_key: Option<PathBuf>,
    server_ca: Option<PathBuf>,
) -> Result<CaSource> {
    let any_file = client_ca_cert.is_some() || client_ca_key.is_some() || server_ca.is_some();
    match (state_dir, cluster, any_file) {
        (Some(state_dir), Some(cluster), false) => Ok(CaSource::StateDir { state_dir, cluster }),
        (None, None, true) => match (client_ca_cert, client_ca_key, server_ca) {
            (Some(client_ca_cert), Some(client_ca_key), Some(server_ca)) => Ok(CaSource::Files {
                client_ca_cert,
                client_ca_key,
                server_ca,
            }),
            _ => Err(Error::bad_input("--client-ca-cert, --client-ca-key and --server-ca must be given together")
                .hint("pass all three files, or --state-dir and --cluster instead")),
        },
        (Some(_), None, false) => Err(Error::bad_input("--state-dir needs --cluster (SOCIALWEB_TENANTCREDENTIAL_CLUSTER)")
            .hint("name the tenant cluster, e.g. `--cluster ci`")),
        (None, Some(_), false) => Err(Error::bad_input("--cluster needs --state-dir (SOCIALWEB_TENANTCREDENTIAL_STATE_DIR)")
            .hint("name the gateway state directory that holds clusters/<name>/pki/")),
        (None, None, false) => Err(Error::bad_input("no CA given")
            .hint("pass --state-dir and --cluster (SOCIALWEB_TENANTCREDENTIAL_STATE_DIR/_CLUSTER), or --client-ca-cert, --client-ca-key and --server-ca")),
        (_, _, true) => Err(Error::bad_input("the CA files were given both by --state-dir/--cluster and by --client-ca-cert/--client-ca-key/--server-ca")
            .hint("use one of the two ways (unset SOCIALWEB_TENANTCREDENTIAL_STATE_DIR/_CLUSTER if they are set in the environment)")),
    }
}

pub(super) fn print_hand_back(h: &HandBack, json: bool) -> Result<()> {
    if json {
        return output::print_json(h);
    }
    println!("Minted a credential for {}", h.server);
    println!("  user (CN)    {}", h.common_name);
    println!("  groups (O)   {}", h.groups.join(", "));
    println!("  expires      {} ({} from now)", h.not_after, h.valid_for);
    println!("  ca.crt       {}", h.files.ca.display());
    println!("  tls.crt      {}", h.files.cert.display());
    println!("  tls.key      {}", h.files.key.display());
    println!("  kubeconfig   {}", h.files.kubeconfig.display());
    println!(
        "Next: bind the group `{}` in the tenant cluster (docs/runbooks/gitlab-runner.md), then check it:",
        h.groups.first().map(String::as_str).unwrap_or("")
    );
    println!(
        "  kubectl --kubeconfig {} auth can-i create pods --namespace gitlab-runner",
        h.files.kubeconfig.display()
    );
    Ok(())
}
