//! `dispatch init`'s two calls to Gitea's RunnerService: Declare, which proves a kept
//! registration still exists (and updates its labels), and Register, made once with the
//! registration token. The token is sent, never written or logged.

use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::proto::{DeclareRequest, RegisterRequest};
use tenantci_core::forge::gitea::{ClientConfig, ClientError, Code, RunnerClient};
use tenantci_core::fsutil::{self, MODE_SECRET};
use tenantci_core::{Error, Result};

use crate::claim::registration::SchedulerCredential;
use crate::config::Paths;
use crate::init::plan::{Inputs, RegistrationToken};

fn gitea_client(url: &str, ca_pem: Option<&str>) -> Result<RunnerClient> {
    let mut config = ClientConfig::new(url);
    config.ca_pem = ca_pem.map(str::to_string);
    RunnerClient::new(config).map_err(|e| {
        Error::bad_input(format!("cannot build a client for Gitea at {url}"))
            .caused_by(e)
            .hint("check --gitea-url, and that --gitea-ca holds the CA certificate (PEM) of Gitea's certificate")
    })
}

/// The Gitea CA init's own calls trust: `--gitea-ca`, else the `gitea.ca_file` of the config
/// already at --out; None: the system's roots. A file that is not a PEM certificate is bad
/// input naming it, before anything is written.
pub fn ca_pem(i: &Inputs) -> Result<Option<String>> {
    let file = match &i.gitea_ca_file {
        Some(f) => f.clone(),
        None => match kept_ca_file(&i.out)? {
            Some(f) => f,
            None => return Ok(None),
        },
    };
    tenantci_core::pki::inspect::read_ca_file(
        "the Gitea CA file",
        &file,
        "pass --gitea-ca with the CA certificate (PEM) that signed Gitea's certificate, or leave it out when the system's roots trust Gitea; nothing was written",
    )
    .map(Some)
}

/// The existing config's gitea.ca_file, absolute. A config at --out that does not load is
/// refused here, as `local::check` would refuse it: without its CA the version call below
/// would fail first, at Gitea's TLS, with a misleading exit 3.
fn kept_ca_file(out: &std::path::Path) -> Result<Option<std::path::PathBuf>> {
    let out = std::path::absolute(out).map_err(|e| {
        Error::bad_input(format!("--out `{}` has no absolute form", out.display())).caused_by(e)
    })?;
    Ok(crate::init::local::read_existing_config(&out)?.and_then(|cfg| cfg.gitea.ca_file))
}

/// `[waiting_jobs]` proven before anything is written, as `run` will use it: its token file
/// private and readable, and the forge answering it for its scope. A refused token or an
/// unknown scope is bad input (exit 2); a forge that does not answer, exit 3.
pub async fn check_waiting_jobs(
    url: &str,
    ca_pem: Option<&str>,
    w: &crate::claim::settings::WaitingJobs,
) -> Result<()> {
    let token = w.read_token()?;
    let scope = w
        .scope()
        .map_err(|e| Error::bad_input(format!("waiting_jobs.scope: {e}")))?;
    match gitea_client(url, ca_pem)?.waiting_jobs(&scope, &token).await {
        Ok(_) => Ok(()),
        Err(ClientError::Status { error, .. })
            if matches!(
                error.code,
                Code::Unauthenticated | Code::PermissionDenied | Code::NotFound
            ) =>
        {
            Err(Error::bad_input(format!(
                "the forge at {url} refuses the token in `{}` for the waiting jobs of `{scope}` ({})",
                w.token_file.display(),
                error.code
            ))
            .hint("give a token that may read that scope's runners (read:admin, read:user, read:organization or read:repository) and the scope the runner is registered in (Forgejo only: Gitea has no such API); nothing was written"))
        }
        Err(e) => Err(Error::external(format!(
            "cannot read the waiting jobs of `{scope}` at {url}"
        ))
        .caused_by(e)
        .hint("check that --gitea-url is reachable and is Forgejo; nothing was written")),
    }
}

fn gitea_error(url: &str, e: ClientError) -> Error {
    Error::external(format!("Gitea at {url} failed"))
        .caused_by(e)
        .hint("check that --gitea-url is reachable from this host and Gitea is up (a certificate from a private CA: pass --gitea-ca)")
}

/// The forge at `url`: `--forge` when given, else read from its version API. A version
/// answer of neither kind is bad input (exit 2): the URL is not a Gitea or Forgejo root, or
/// the forge hides its version; `--forge` says which it is.
pub async fn forge(url: &str, given: Option<Forge>, ca_pem: Option<&str>) -> Result<Forge> {
    if let Some(f) = given {
        return Ok(f);
    }
    let version = gitea_client(url, ca_pem)?.server_version().await.map_err(|e| {
        Error::external(format!(
            "cannot read the forge's version at {url}/api/v1/version"
        ))
        .caused_by(e)
        .hint("check --gitea-url (a certificate from a private CA: pass --gitea-ca), or say which forge it is with --forge gitea|forgejo")
    })?;
    Forge::detect(&version).map_err(|e| {
        Error::bad_input(format!("--gitea-url {url} does not look like Gitea or Forgejo: {e}"))
            .hint("check --gitea-url (the instance root), or say which forge it is with --forge gitea|forgejo")
    })
}

fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// A kept registration must still exist at Gitea; Declare also updates its labels.
pub async fn declare(
    i: &Inputs,
    k: &SchedulerCredential,
    p: &Paths,
    ca_pem: Option<&str>,
) -> Result<()> {
    let client = gitea_client(&i.gitea_url, ca_pem)?.with_credentials(k.credentials());
    let req = DeclareRequest {
        version: version(),
        labels: i.labels.clone(),
        capabilities: Vec::new(),
    };
    match client.declare(&req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_unauthenticated() => Err(Error::bad_input(format!(
            "Gitea at {} does not know the registration in `{}` (runner `{}`, uuid {}): it was deleted at Gitea, or the file belongs to another Gitea",
            i.gitea_url,
            p.scheduler.display(),
            k.name,
            k.uuid
        ))
        .hint(format!(
            "to register anew, delete {} and re-run `tenantci dispatch init` with a registration token (--registration-token-file)",
            p.scheduler.display()
        ))),
        Err(e) => Err(gitea_error(&i.gitea_url, e)),
    }
}

fn register_error(url: &str, e: ClientError) -> Error {
    match e.code() {
        Some(Code::PermissionDenied | Code::Unauthenticated | Code::NotFound) => {
            Error::bad_input(format!("Gitea at {url} refused the registration token"))
                .hint("create a fresh one (Site Administration > Actions > Runners > Create new runner, or `gitea actions generate-runner-token`) and pass it with --registration-token-file")
        }
        Some(Code::InvalidArgument) => {
            Error::bad_input(format!("Gitea at {url} refused the registration"))
                .caused_by(e)
                .hint("check --name and --labels")
        }
        _ => gitea_error(url, e),
    }
}

/// Registers once and stores the credential before anything else can fail.
pub async fn register(
    i: &Inputs,
    name: &str,
    token: &RegistrationToken,
    p: &Paths,
    ca_pem: Option<&str>,
) -> Result<SchedulerCredential> {
    let req = RegisterRequest {
        name: name.to_string(),
        token: token.expose().to_string(),
        version: version(),
        labels: i.labels.clone(),
        ephemeral: false,
        ..Default::default()
    };
    let runner = gitea_client(&i.gitea_url, ca_pem)?
        .register(&req)
        .await
        .map_err(|e| register_error(&i.gitea_url, e))?;
    let k = SchedulerCredential::from_runner(&runner);
    let lost = |e: Error| {
        e.hint(format!(
            "Gitea registered runner id {} (`{}`) but its credential could not be stored: delete that runner in Gitea, fix the directory, and re-run",
            k.id, k.name
        ))
    };
    crate::init::make_dir(&p.dir).map_err(lost)?;
    fsutil::write_new_atomic(&p.scheduler, &k.to_json(), MODE_SECRET).map_err(|e| {
        lost(Error::unwritable(
            "the scheduler credential",
            &p.scheduler,
            e,
        ))
    })?;
    tracing::info!(runner_id = k.id, uuid = %k.uuid, name = %k.name, "registered the dispatcher at Gitea");
    Ok(k)
}
