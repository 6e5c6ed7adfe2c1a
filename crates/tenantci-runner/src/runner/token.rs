//! The runner authentication token of a gitlab-runner entry: given (file, flag, environment),
//! reused from config.toml, or created through GitLab's API. The one implementation behind
//! `runner gitlab-config` and `bootstrap runner`.
//!
//! Three phases, so a caller can check everything before it changes anything and create the
//! runner only at the end: [`TokenSource::from_flags`] (pure precedence), [`prepare`] (reads the
//! token file, decides with the pure [`plan`], and builds the API client only when a runner
//! will be created), then [`Prepared::obtain`] (the only GitLab call). Does not write
//! config.toml; the token never reaches output (only [`RunnerToken::redacted`] does).

use std::path::PathBuf;
use std::time::Duration;

use time::OffsetDateTime;

use super::gitlab_api::{Client, CreateRunner};
pub use super::gitlab_config::entry::PENDING_TOKEN;
use super::gitlab_config::entry::TokenMetadata;
use super::gitlab_config::{RunnerToken, Secret, merge};
use tenantci_core::pki::inspect::rfc3339;
use tenantci_core::{Error, Result, secret};

/// How to create the runner through GitLab's API. Holds paths, not secrets: the files are
/// read only when a runner is really created.
#[derive(Debug, Clone)]
pub struct ApiCreation {
    /// GitLab's URL (the API base).
    pub url: String,
    /// A file holding an access token with the `create_runner` scope.
    pub api_token_file: PathBuf,
    /// A CA bundle to trust for GitLab's HTTPS certificate.
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
    /// Already validated ([`CreateRunner::validate`]).
    pub request: CreateRunner,
    /// Create a new runner even when config.toml has a token for ours.
    pub recreate: bool,
}

/// Where the token comes from, in the precedence of [`TokenSource::from_flags`].
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// A file holding the token or a `$VAR` reference.
    File(PathBuf),
    /// Create the runner through GitLab's API unless config.toml already holds our token.
    Create(ApiCreation),
    /// From the flag or the environment, parsed.
    Given(RunnerToken),
}

impl TokenSource {
    /// Precedence: the token file, API creation, then the literal (`--runner-token` or
    /// `TENANTCI_RUNNER_TOKEN`): an exported variable must not stop an explicit file or API
    /// creation.
    pub fn from_flags(
        file: Option<PathBuf>,
        api: Option<ApiCreation>,
        literal: Option<&str>,
    ) -> Result<Self> {
        match (file, api, literal) {
            (Some(file), _, _) => Ok(TokenSource::File(file)),
            (None, Some(api), _) => Ok(TokenSource::Create(api)),
            (None, None, Some(raw)) => Ok(TokenSource::Given(RunnerToken::parse(raw)?)),
            (None, None, None) => Err(Error::bad_input("no runner token given").hint(
                "pass --runner-token-file FILE, set TENANTCI_RUNNER_TOKEN, or create the runner with --gitlab-api-token-file FILE --runner-type ...",
            )),
        }
    }

    /// Whether [`plan`] looks at config.toml (to reuse a runner created by an earlier run).
    pub fn reads_config(&self) -> bool {
        matches!(self, TokenSource::Create(api) if !api.recreate)
    }
}

/// Where the token came from, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// From a file, a flag or the environment.
    Given,
    /// config.toml already had a token for this runner.
    Reused,
    /// A dry run that would create the runner (the token is [`PENDING_TOKEN`]).
    WouldCreate,
    Created {
        id: u64,
        expires_at: Option<String>,
    },
}

/// The token to write, and what GitLab said about it when it was just created.
#[derive(Debug, Clone)]
pub struct Obtained {
    pub token: RunnerToken,
    /// `Some` only for [`Origin::Created`].
    pub registration: Option<TokenMetadata>,
    pub origin: Origin,
}

impl Obtained {
    fn without_registration(token: RunnerToken, origin: Origin) -> Self {
        Obtained {
            token,
            registration: None,
            origin,
        }
    }
}

/// What to do for the token, decided without I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenPlan {
    /// Use this token (given, or reused from config.toml); nothing to create.
    Use(RunnerToken, Origin),
    WouldCreate,
    Create,
}

/// The decision for an API source (a given token is simply used): reuse the token of our
/// entry in config.toml (`existing`, its text) unless `recreate`, or every re-run would
/// register another runner; otherwise create, or in a dry run only say so.
pub fn plan(
    api: &ApiCreation,
    existing: Option<&str>,
    name: &str,
    dry_run: bool,
) -> Result<TokenPlan> {
    let reusable = existing
        .filter(|_| !api.recreate)
        .and_then(|text| merge::existing_token(text, name));
    Ok(match (reusable, dry_run) {
        (Some(token), _) => TokenPlan::Use(RunnerToken::parse(&token)?, Origin::Reused),
        (None, true) => TokenPlan::WouldCreate,
        (None, false) => TokenPlan::Create,
    })
}

/// Everything checked and read; only a runner creation (if any) is left.
pub enum Prepared<'a> {
    Ready(Obtained),
    Create {
        client: Client,
        request: &'a CreateRunner,
    },
}

/// Reads the token file or decides about API creation; builds the client (reading the API
/// token and CA files) only when a runner will be created. `existing` is config.toml's text
/// (needed when [`TokenSource::reads_config`]).
pub fn prepare<'a>(
    source: &'a TokenSource,
    existing: Option<&str>,
    name: &str,
    dry_run: bool,
) -> Result<Prepared<'a>> {
    let api = match source {
        TokenSource::Given(token) => {
            return Ok(Prepared::Ready(Obtained::without_registration(
                token.clone(),
                Origin::Given,
            )));
        }
        TokenSource::File(path) => {
            let raw = secret::read_file("the runner token file", path, None)?;
            return Ok(Prepared::Ready(Obtained::without_registration(
                RunnerToken::parse(&raw)?,
                Origin::Given,
            )));
        }
        TokenSource::Create(api) => api,
    };
    Ok(match plan(api, existing, name, dry_run)? {
        TokenPlan::Use(token, origin) => {
            Prepared::Ready(Obtained::without_registration(token, origin))
        }
        TokenPlan::WouldCreate => Prepared::Ready(Obtained::without_registration(
            RunnerToken::EnvRef(PENDING_TOKEN.into()),
            Origin::WouldCreate,
        )),
        TokenPlan::Create => Prepared::Create {
            client: client(api)?,
            request: &api.request,
        },
    })
}

fn client(api: &ApiCreation) -> Result<Client> {
    let api_token = secret::read_file("the GitLab API token file", &api.api_token_file, None)?;
    Client::new(
        &api.url,
        Secret::new(api_token),
        api.ca_file.as_deref(),
        api.timeout,
    )
}

impl Prepared<'_> {
    /// When a runner will be created: GitLab reached and the access token accepted, without
    /// creating anything (a caller's phase one).
    pub async fn check_access(&self) -> Result<()> {
        match self {
            Prepared::Ready(_) => Ok(()),
            Prepared::Create { client, .. } => Ok(client.check_token().await?),
        }
    }

    /// Creates the runner (and verifies its token) if that is what is left to do.
    pub async fn obtain(self) -> Result<Obtained> {
        let (client, request) = match self {
            Prepared::Ready(obtained) => return Ok(obtained),
            Prepared::Create { client, request } => (client, request),
        };
        let created = client.create_and_verify(request).await?;
        Ok(Obtained {
            token: RunnerToken::Literal(created.token),
            registration: Some(TokenMetadata {
                id: created.id,
                obtained_at: rfc3339(OffsetDateTime::now_utc()),
                expires_at: created.token_expires_at.clone(),
            }),
            origin: Origin::Created {
                id: created.id,
                expires_at: created.token_expires_at,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::gitlab_api::RunnerType;

    fn api(recreate: bool) -> ApiCreation {
        ApiCreation {
            url: "https://gitlab.example.com".into(),
            api_token_file: "/nonexistent/api-token".into(),
            ca_file: None,
            timeout: Duration::from_secs(1),
            request: CreateRunner {
                runner_type: RunnerType::InstanceType,
                group_id: None,
                project_id: None,
                description: None,
                tag_list: vec![],
                run_untagged: true,
                locked: false,
                paused: false,
            },
            recreate,
        }
    }

    const CONFIG: &str = "[[runners]]\n  name = \"ours\"\n  token = \"glrt-earlier\"\n";

    #[test]
    fn a_token_file_beats_api_creation_which_beats_the_literal() {
        let file = || Some(PathBuf::from("/t"));
        let s = TokenSource::from_flags(file(), Some(api(false)), Some("glrt-env")).unwrap();
        assert!(matches!(s, TokenSource::File(_)));
        let s = TokenSource::from_flags(None, Some(api(false)), Some("glrt-env")).unwrap();
        assert!(matches!(s, TokenSource::Create(_)));
        let s = TokenSource::from_flags(None, None, Some("$RUNNER_TOKEN")).unwrap();
        assert!(matches!(s, TokenSource::Given(RunnerToken::EnvRef(_))));
        let e = TokenSource::from_flags(None, None, None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn a_rerun_reuses_our_token_unless_asked_to_recreate() {
        let reused = plan(&api(false), Some(CONFIG), "ours", false).unwrap();
        assert_eq!(
            reused,
            TokenPlan::Use(
                RunnerToken::Literal(Secret::new("glrt-earlier")),
                Origin::Reused
            )
        );
        assert_eq!(
            plan(&api(true), Some(CONFIG), "ours", false).unwrap(),
            TokenPlan::Create
        );
        assert_eq!(
            plan(&api(false), Some(CONFIG), "other", false).unwrap(),
            TokenPlan::Create
        );
        assert_eq!(
            plan(&api(false), None, "ours", true).unwrap(),
            TokenPlan::WouldCreate
        );
    }

    #[test]
    fn a_dry_run_creation_reads_no_file() {
        // The API token file does not exist: a dry run must not need it.
        let source = TokenSource::Create(api(false));
        assert!(source.reads_config());
        let Prepared::Ready(o) = prepare(&source, None, "ours", true).unwrap() else {
            panic!("a dry run creates nothing");
        };
        assert_eq!(o.origin, Origin::WouldCreate);
        assert_eq!(o.token, RunnerToken::EnvRef(PENDING_TOKEN.into()));
        assert!(prepare(&source, None, "ours", false).is_err());
    }
}
