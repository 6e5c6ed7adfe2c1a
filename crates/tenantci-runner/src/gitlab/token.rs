//! The runner authentication token of a gitlab-runner entry: given (file, flag, environment),
//! reused from config.toml, or created through GitLab's API. The one implementation behind
//! `runner gitlab-config` and `bootstrap runner`.
//!
//! Three phases, so a caller can check everything before it changes anything and create the
//! runner only at the end: [`TokenSource::from_flags`] (pure precedence), [`prepare`] (reads the
//! token file, decides with the pure [`plan`], and builds the API client only when a runner
//! will be created), then [`Prepared::obtain`] (the only GitLab calls). Does not write
//! config.toml; the token never reaches output (only [`RunnerToken::redacted`] does).
//!
//! A creation is resumable ([`super::pending`]): [`Prepared::obtain`] records its intent and
//! then GitLab's answer before relying on either, and a re-run finishes what a crashed run
//! began (the recorded runner verified and reused, or one whose answer was lost deleted and
//! replaced) instead of leaving a second runner at GitLab.

use std::path::PathBuf;
use std::time::Duration;

use time::OffsetDateTime;

use super::api::{self, ApiError, Client, CreateRunner};
pub use super::config::entry::PENDING_TOKEN;
use super::config::entry::TokenMetadata;
use super::config::{RunnerToken, Secret, merge};
use super::pending::{self, Ledger, Record, RecordedRunner, Resume, crash_point};
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
    /// Bound on each request to GitLab.
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
    /// Created by this run through GitLab's API, with nothing of an interrupted run deleted.
    Created {
        /// The runner's id at GitLab.
        id: u64,
        /// When the token expires (RFC 3339); `None` when it does not.
        expires_at: Option<String>,
    },
    /// An interrupted run's runner, recorded but not yet in config.toml: verified and reused.
    Resumed {
        /// The runner's id at GitLab.
        id: u64,
        /// When the token expires (RFC 3339); `None` when it does not.
        expires_at: Option<String>,
    },
    /// Created after deleting the runners an interrupted run created without recording them.
    Replaced {
        /// The new runner's id at GitLab.
        id: u64,
        /// When the new token expires (RFC 3339); `None` when it does not.
        expires_at: Option<String>,
        /// The ids of the runners deleted (those the interrupted run created).
        deleted: Vec<u64>,
    },
}

impl Origin {
    /// The runner GitLab holds for this run, when this run talked to GitLab about it.
    pub fn runner_id(&self) -> Option<u64> {
        match self {
            Origin::Created { id, .. }
            | Origin::Resumed { id, .. }
            | Origin::Replaced { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// The token to write, and what GitLab said about it when it was just created.
#[derive(Debug, Clone)]
pub struct Obtained {
    /// The token config.toml gets: the token itself, or a `$VAR` reference.
    pub token: RunnerToken,
    /// GitLab's id and the token's dates, for config.toml: `Some` for a runner this run
    /// created or finished ([`Origin::Created`], [`Origin::Resumed`], [`Origin::Replaced`]).
    pub registration: Option<TokenMetadata>,
    /// Where the token came from, for the report.
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
    /// A dry run: a runner would be created, and nothing is.
    WouldCreate,
    /// Create a runner, after finishing any interrupted creation the record holds.
    Create,
}

/// The decision for an API source (a given token is simply used). A record of an interrupted
/// creation ([`pending::resume`]) comes first: it is finished, not started again. Otherwise
/// the token of our entry in config.toml (`existing`, its text) is reused unless `recreate`,
/// or every re-run would register another runner; else create, or in a dry run only say so.
pub fn plan(
    api: &ApiCreation,
    existing: Option<&str>,
    name: &str,
    record: Option<&Record>,
    dry_run: bool,
) -> Result<TokenPlan> {
    let in_config = existing.and_then(|text| merge::existing_token(text, name));
    let reusable = match pending::resume(record, in_config.as_deref()) {
        Resume::Finished => in_config,
        Resume::Verify(_) | Resume::Clean(_) => None,
        Resume::Fresh => in_config.filter(|_| !api.recreate),
    };
    Ok(match (reusable, dry_run) {
        (Some(token), _) => TokenPlan::Use(RunnerToken::parse(&token)?, Origin::Reused),
        (None, true) => TokenPlan::WouldCreate,
        (None, false) => TokenPlan::Create,
    })
}

/// Everything checked and read; only a runner creation (if any) is left.
pub enum Prepared<'a> {
    /// The token is known: nothing is left to do at GitLab.
    Ready(Obtained),
    /// A runner is to be created, or an interrupted creation finished.
    Create {
        /// The GitLab client, with the access token already read.
        client: Client,
        /// What to create.
        request: &'a CreateRunner,
        /// Where the creation is recorded, beside config.toml.
        ledger: Ledger,
        /// What an interrupted run left ([`pending`]), to finish first.
        record: Option<Record>,
    },
}

/// Reads the token file or decides about API creation; builds the client (reading the API
/// token and CA files) only when a runner will be created. `existing` is config.toml's text
/// (needed when [`TokenSource::reads_config`]); `config` its path, beside which an
/// interrupted creation is recorded.
pub fn prepare<'a>(
    source: &'a TokenSource,
    existing: Option<&str>,
    config: &std::path::Path,
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
    let ledger = Ledger::for_entry(config, name);
    let record = ledger.read()?;
    if let Some(r) = &record {
        check_same_gitlab(r, &ledger, &api.url)?;
    }
    Ok(match plan(api, existing, name, record.as_ref(), dry_run)? {
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
            ledger,
            record,
        },
    })
}

/// A record for another GitLab cannot be finished against this one.
fn check_same_gitlab(record: &Record, ledger: &Ledger, url: &str) -> Result<()> {
    let same = |u: &str| u.trim_end_matches('/').to_string();
    if same(&record.gitlab_url) == same(url) {
        return Ok(());
    }
    Err(Error::bad_input(format!(
        "the pending-runner record `{}` is of a runner creation at the GitLab {}, not at --gitlab-url {url}",
        ledger.path().display(),
        record.gitlab_url
    ))
    .hint("run again with that --gitlab-url to finish it (its runner is verified and reused, or deleted and replaced), or delete the runner whose description ends with its marker there and remove the record; nothing was changed"))
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
    /// creating anything (a caller's phase one); when an interrupted creation must be cleaned
    /// up, also the scopes that lists and deletes runners.
    pub async fn check_access(&self) -> Result<()> {
        let Prepared::Create {
            client,
            request,
            ledger,
            record,
        } = self
        else {
            return Ok(());
        };
        client.check_token().await?;
        let Some(marker) = record
            .as_ref()
            .filter(|r| r.runner.is_none())
            .map(|r| &r.marker)
        else {
            return Ok(());
        };
        if api::may_clean_up(&client.token_scopes().await?, request.runner_type) {
            return Ok(());
        }
        Err(Error::bad_input(format!(
            "an interrupted run recorded in `{}` may have created a runner at GitLab (its description ends with `[{marker}]`) without recording its token, and the access token in --gitlab-api-token-file may not list and delete runners",
            ledger.path().display()
        ))
        .hint("give --gitlab-api-token-file a token with the `manage_runner` or `api` scope (`api`, or `read_api` with `manage_runner`, for an instance runner), or delete that runner in GitLab and remove the record; nothing was changed"))
    }

    /// Creates the runner (and verifies its token) if that is what is left to do, first
    /// finishing what an interrupted run recorded.
    pub async fn obtain(self) -> Result<Obtained> {
        match self {
            Prepared::Ready(obtained) => Ok(obtained),
            Prepared::Create {
                client,
                request,
                ledger,
                record,
            } => {
                let creation = Creation {
                    client: &client,
                    request,
                    ledger: &ledger,
                };
                creation.resume(record).await
            }
        }
    }
}

/// One resumable runner creation: the client, what to create, where it is recorded.
struct Creation<'a> {
    client: &'a Client,
    request: &'a CreateRunner,
    ledger: &'a Ledger,
}

impl Creation<'_> {
    /// Finishes `record`'s creation: its runner verified and reused, or the runners its
    /// lost answer left deleted; then (unless reused) a new one created.
    async fn resume(&self, record: Option<Record>) -> Result<Obtained> {
        self.request.validate()?;
        let mut deleted = Vec::new();
        match record {
            Some(Record {
                runner: Some(recorded),
                ..
            }) => {
                if let Some(reused) = self.reuse(recorded).await? {
                    return Ok(reused);
                }
            }
            Some(Record { marker, .. }) => deleted = self.delete_marked(&marker).await?,
            None => {}
        }
        let created = self.create().await?;
        Ok(match (created.origin, deleted.is_empty()) {
            (Origin::Created { id, expires_at }, false) => Obtained {
                origin: Origin::Replaced {
                    id,
                    expires_at,
                    deleted,
                },
                ..created
            },
            (origin, _) => Obtained { origin, ..created },
        })
    }

    /// The recorded runner, if GitLab still accepts its token; `None` when it does not (it
    /// was deleted there), so a new one is created.
    async fn reuse(&self, recorded: RecordedRunner) -> Result<Option<Obtained>> {
        let token = Secret::new(recorded.token);
        match self.client.verify_runner(&token, &api::system_id()).await {
            Ok(_) => {}
            Err(ApiError::VerifyRejected) => {
                tracing::warn!(
                    runner_id = recorded.id,
                    record = %self.ledger.path().display(),
                    "GitLab no longer accepts the token of the runner an interrupted run recorded; creating another"
                );
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Some(Obtained {
            token: RunnerToken::Literal(token),
            registration: Some(TokenMetadata {
                id: recorded.id,
                obtained_at: recorded.obtained_at,
                expires_at: recorded.token_expires_at.clone(),
            }),
            origin: Origin::Resumed {
                id: recorded.id,
                expires_at: recorded.token_expires_at,
            },
        }))
    }

    /// A refused create leaves no runner, so its intent is removed; any other failure may
    /// hide one, so the intent stays for the re-run to look it up.
    fn create_failed(&self, e: ApiError) -> Error {
        if !e.created_nothing() {
            tracing::warn!(
                record = %self.ledger.path().display(),
                "the runner creation's outcome at GitLab is unknown: its intent stays recorded, and a re-run deletes a runner it created before creating another"
            );
            return e.into();
        }
        if let Err(clear) = self.ledger.clear() {
            // Harmless: a re-run looks the runner up, finds none and creates one.
            tracing::warn!(error = %clear, "cannot remove the intent of a runner creation GitLab refused; a re-run looks for the runner first");
        }
        e.into()
    }

    /// Deletes the runners carrying `marker` at GitLab (the create whose answer was lost).
    async fn delete_marked(&self, marker: &str) -> Result<Vec<u64>> {
        let found = self.client.find_described(self.request, marker).await?;
        let mut deleted = Vec::new();
        for id in found {
            if self.client.delete_runner(id).await? {
                tracing::info!(
                    runner_id = id,
                    "deleted the runner an interrupted run created"
                );
                deleted.push(id);
            }
        }
        Ok(deleted)
    }

    /// Records the intent, creates, records the answer, then verifies the token.
    async fn create(&self) -> Result<Obtained> {
        let marker = pending::marker();
        let mut record = Record {
            version: pending::KIND.current,
            gitlab_url: self.client.base().to_string(),
            marker: marker.clone(),
            runner: None,
        };
        self.ledger.write(&record)?;
        crash_point("gitlab-intent-recorded");
        let mut request = self.request.clone();
        request.description = Some(pending::described(
            self.request.description.as_deref(),
            &marker,
        ));
        let created = match self.client.create_runner(&request).await {
            Ok(created) => created,
            Err(e) => return Err(self.create_failed(e)),
        };
        crash_point("gitlab-runner-created");
        let obtained_at = rfc3339(OffsetDateTime::now_utc());
        record.runner = Some(RecordedRunner {
            id: created.id,
            token: created.token.expose().to_string(),
            token_expires_at: created.token_expires_at.clone(),
            obtained_at: obtained_at.clone(),
        });
        self.ledger.write(&record)?;
        crash_point("gitlab-runner-recorded");
        self.client
            .verify_runner(&created.token, &api::system_id())
            .await?;
        Ok(Obtained {
            token: RunnerToken::Literal(created.token),
            registration: Some(TokenMetadata {
                id: created.id,
                obtained_at,
                expires_at: created.token_expires_at.clone(),
            }),
            origin: Origin::Created {
                id: created.id,
                expires_at: created.token_expires_at,
            },
        })
    }
}

/// After config.toml holds the token of an API source: the record of its creation is done
/// with. A given token leaves a record alone: it still names a runner at GitLab that only an
/// API run can finish.
pub fn finish(source: &TokenSource, config: &std::path::Path, name: &str) -> Result<()> {
    if !matches!(source, TokenSource::Create(_)) {
        return Ok(());
    }
    crash_point("config-written");
    Ledger::for_entry(config, name).clear().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitlab::api::RunnerType;

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
        let reused = plan(&api(false), Some(CONFIG), "ours", None, false).unwrap();
        assert_eq!(
            reused,
            TokenPlan::Use(
                RunnerToken::Literal(Secret::new("glrt-earlier")),
                Origin::Reused
            )
        );
        assert_eq!(
            plan(&api(true), Some(CONFIG), "ours", None, false).unwrap(),
            TokenPlan::Create
        );
        assert_eq!(
            plan(&api(false), Some(CONFIG), "other", None, false).unwrap(),
            TokenPlan::Create
        );
        assert_eq!(
            plan(&api(false), None, "ours", None, true).unwrap(),
            TokenPlan::WouldCreate
        );
    }

    #[test]
    fn an_interrupted_creation_is_finished_before_config_toml_is_reused() {
        let intent = Record {
            version: pending::KIND.current,
            gitlab_url: "https://gitlab.example.com".into(),
            marker: "tenantci-1".into(),
            runner: None,
        };
        // config.toml's older token must not hide a runner the interrupted run may have made.
        let p = plan(&api(false), Some(CONFIG), "ours", Some(&intent), false).unwrap();
        assert_eq!(p, TokenPlan::Create);
        let done = Record {
            runner: Some(RecordedRunner {
                id: 3,
                token: "glrt-earlier".into(),
                token_expires_at: None,
                obtained_at: "2026-12-04T21:00:00Z".into(),
            }),
            ..intent
        };
        // Even --recreate: the recorded creation was that recreate, and it is in config.toml.
        let p = plan(&api(true), Some(CONFIG), "ours", Some(&done), false).unwrap();
        assert!(matches!(p, TokenPlan::Use(_, Origin::Reused)));
    }

    #[test]
    fn a_dry_run_creation_reads_no_file() {
        // The API token file does not exist: a dry run must not need it.
        let source = TokenSource::Create(api(false));
        assert!(source.reads_config());
        let config = std::path::Path::new("/nonexistent/config.toml");
        let Prepared::Ready(o) = prepare(&source, None, config, "ours", true).unwrap() else {
            panic!("a dry run creates nothing");
        };
        assert_eq!(o.origin, Origin::WouldCreate);
        assert_eq!(o.token, RunnerToken::EnvRef(PENDING_TOKEN.into()));
        assert!(prepare(&source, None, config, "ours", false).is_err());
    }
}
