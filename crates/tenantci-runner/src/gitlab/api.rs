//! GitLab's runner REST API (GitLab 16+): check the access token's scopes before anything is
//! created, create a runner, then verify its token; find the runners of a group, project or the
//! instance by a description marker and delete them (what a re-run after a crash needs,
//! [`super::pending`]).
//!
//! `POST /api/v4/user/runners` with a personal/group/project access token that has the
//! `create_runner` scope returns the runner authentication token (`glrt-...`), shown once;
//! `POST /api/v4/runners/verify` checks it (also `runner check`'s, for an existing entry). The
//! token goes only into config.toml and the pending-runner record (by the caller); it is never
//! logged. Errors are typed ([`ApiError`]) and map to exit codes: a
//! refused credential or request is bad input (2), an unreachable, slow or failing GitLab is
//! external (3). Does not write files.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::Secret;
use tenantci_core::{Error, Result};

/// The runner types `runner_type` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerType {
    /// A runner for every project of the instance (an administrator's token).
    InstanceType,
    /// A runner for one group's projects; needs `group_id`.
    GroupType,
    /// A runner for one project; needs `project_id`.
    ProjectType,
}

/// The parameters of `POST /api/v4/user/runners`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateRunner {
    /// Whose jobs the runner takes: the instance's, a group's or a project's.
    pub runner_type: RunnerType,
    /// The group's numeric id; only with [`RunnerType::GroupType`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u64>,
    /// The project's numeric id; only with [`RunnerType::ProjectType`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<u64>,
    /// The runner's description in GitLab; `None` for none. A creation through [`super::token`]
    /// appends its marker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The runner's tags, sent comma-separated; empty needs `run_untagged`.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "comma_list")]
    pub tag_list: Vec<String>,
    /// Whether the runner also takes jobs without tags.
    pub run_untagged: bool,
    /// Whether a project runner is locked to its project (other projects cannot enable it).
    pub locked: bool,
    /// Whether the runner is created paused (it takes no job until resumed).
    pub paused: bool,
}

fn comma_list<S: serde::Serializer>(tags: &[String], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&tags.join(","))
}

impl CreateRunner {
    /// Refuses parameter combinations GitLab would answer with 400.
    pub fn validate(&self) -> Result<()> {
        let (need, flag) = match self.runner_type {
            RunnerType::InstanceType => (None, ""),
            RunnerType::GroupType => (Some(self.group_id), "--group-id"),
            RunnerType::ProjectType => (Some(self.project_id), "--project-id"),
        };
        if need == Some(None) {
            return Err(
                Error::bad_input(format!("a {:?} runner needs {flag}", self.runner_type))
                    .hint(format!("pass {flag} N (the numeric id shown in GitLab)")),
            );
        }
        let stray = match self.runner_type {
            RunnerType::InstanceType => self.group_id.is_some() || self.project_id.is_some(),
            RunnerType::GroupType => self.project_id.is_some(),
            RunnerType::ProjectType => self.group_id.is_some(),
        };
        if stray {
            return Err(Error::bad_input(
                "--group-id / --project-id do not match --runner-type",
            )
            .hint("group_type takes --group-id, project_type takes --project-id, instance_type neither"));
        }
        if self.tag_list.is_empty() && !self.run_untagged {
            return Err(Error::bad_input(
                "a runner without tags must run untagged jobs, or it never gets a job",
            )
            .hint("pass --tag-list a,b or --run-untagged"));
        }
        Ok(())
    }
}

/// A created runner: its id and authentication token.
#[derive(Debug, Clone)]
pub struct CreatedRunner {
    /// The runner's id at GitLab.
    pub id: u64,
    /// The runner authentication token (`glrt-...`); GitLab shows it only in this answer.
    pub token: Secret,
    /// RFC 3339, or `None` when the token does not expire.
    pub token_expires_at: Option<String>,
}

#[derive(Deserialize)]
struct RunnerResponse {
    id: u64,
    token: String,
    token_expires_at: Option<String>,
}

/// Why a call to GitLab failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401: the access token is invalid, expired or revoked.
    #[error("GitLab refused the access token (401 Unauthorized)")]
    Unauthorized,
    /// 403 `insufficient_scope`: the access token cannot create runners.
    #[error("the access token lacks the `create_runner` scope (403 insufficient_scope)")]
    MissingScope,
    /// 403 `insufficient_scope` on a read (`runner status`, `runner explain`): the access token
    /// has neither `read_api` nor `api`.
    #[error("the access token lacks the `read_api` scope (403 insufficient_scope)")]
    ReadScope,
    /// Another 403: the token's user may not do this (e.g. create runners in that group or
    /// project); holds GitLab's message.
    #[error("GitLab refused the request (403 Forbidden): {0}")]
    Forbidden(String),
    /// 403 from `/api/v4/runners/verify`: GitLab does not accept the runner token.
    #[error("the runner token was not accepted by /api/v4/runners/verify (403)")]
    VerifyRejected,
    /// 403 `insufficient_scope` on listing or deleting runners: the access token cannot clean up
    /// after an interrupted creation.
    #[error(
        "the access token may not list and delete runners (403 insufficient_scope): finding the runner an interrupted run created needs the `manage_runner` or `api` scope (`api`, or `read_api` with `manage_runner`, for an instance runner)"
    )]
    CleanupScope,
    /// 410: GitLab has disabled runner registration; holds GitLab's message.
    #[error("GitLab has runner registration disabled (410 Gone): {0}")]
    RegistrationDisabled(String),
    /// Another 4xx (400, 404, 422, ...): GitLab refused the request's parameters.
    #[error("GitLab rejected the parameters ({status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// GitLab's message, from the body.
        message: String,
    },
    /// Any other status (a 5xx, an unexpected 3xx): GitLab failed.
    #[error("GitLab answered {status}: {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// GitLab's message, from the body.
        message: String,
    },
    /// No answer within the client's timeout, which it holds.
    #[error("GitLab did not answer within {0:?}")]
    Timeout(Duration),
    /// The request did not reach GitLab or its answer was cut (DNS, TCP, TLS); holds the causes.
    #[error("cannot reach GitLab: {0}")]
    Network(String),
    /// An answer that is not what was expected (a body that is not the JSON, a bad
    /// `X-Next-Page`, a runner list too long to walk); holds why.
    #[error("GitLab's answer is not the expected JSON: {0}")]
    Decode(String),
}

impl ApiError {
    /// Whether the operator's input is at fault (exit 2) rather than GitLab (exit 3).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ApiError::Unauthorized
                | ApiError::MissingScope
                | ApiError::ReadScope
                | ApiError::CleanupScope
                | ApiError::Forbidden(_)
                | ApiError::VerifyRejected
                | ApiError::BadRequest { .. }
        )
    }

    /// Whether GitLab answered the request with a refusal, so it surely created nothing; a
    /// timeout, a broken connection, a 5xx or an unreadable success may hide a creation.
    pub fn created_nothing(&self) -> bool {
        self.is_bad_input() || matches!(self, ApiError::RegistrationDisabled(_))
    }

    fn hint(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => {
                "check --gitlab-api-token-file: the token may be revoked, expired or for another GitLab"
            }
            ApiError::MissingScope => {
                "create the access token with the `create_runner` scope (or `api`) and the Owner/Maintainer role"
            }
            ApiError::ReadScope => {
                "give an access token with the `read_api` scope (a personal, group or project access token of a user who may see the runner and the project)"
            }
            ApiError::Forbidden(_) => {
                "the token's user must be allowed to create runners in that group or project"
            }
            ApiError::VerifyRejected => "create the runner again; its token is shown only once",
            ApiError::CleanupScope => {
                "give --gitlab-api-token-file a token with those scopes, or delete that runner in GitLab and remove the pending-runner record (docs/runbooks/gitlab-runner.md, \"A crash during bootstrap\")"
            }
            ApiError::RegistrationDisabled(_) => {
                "tenantci uses POST /api/v4/user/runners (GitLab 16+); legacy registration tokens are disabled since GitLab 17.0"
            }
            ApiError::BadRequest { .. } => {
                "check --runner-type, --group-id / --project-id and --tag-list"
            }
            ApiError::Server { .. } | ApiError::Decode(_) => "retry later; check GitLab's health",
            ApiError::Timeout(_) | ApiError::Network(_) => {
                "check --gitlab-url, the network path to GitLab and --gitlab-ca-file"
            }
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        let hint = e.hint();
        let err = if e.is_bad_input() {
            Error::bad_input(e.to_string())
        } else {
            Error::external(e.to_string())
        };
        err.hint(hint)
    }
}

/// Default request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A GitLab API client for one base URL and one access token.
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_token: Secret,
    timeout: Duration,
}

impl Client {
    /// `base` is GitLab's URL (`https://gitlab.example.com`); `ca_file` adds a trusted CA.
    pub fn new(
        base: &str,
        api_token: Secret,
        ca_file: Option<&Path>,
        timeout: Duration,
    ) -> Result<Self> {
        let extra = match ca_file {
            Some(path) => tenantci_core::tls::read_ca_bundle("the GitLab CA file", path)?,
            None => Vec::new(),
        };
        let tls = tenantci_core::tls::client_config(&extra)?;
        let builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("tenantci/", env!("CARGO_PKG_VERSION")))
            .use_preconfigured_tls(tls);
        let http = builder
            .build()
            .map_err(|e| Error::external("cannot build the HTTPS client").caused_by(e))?;
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(Error::bad_input(format!(
                "the GitLab URL `{base}` is not an http(s) URL"
            )));
        }
        Ok(Client {
            http,
            base,
            api_token,
            timeout,
        })
    }

    /// GitLab's URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /api/v4/user/runners`.
    pub async fn create_runner(
        &self,
        request: &CreateRunner,
    ) -> std::result::Result<CreatedRunner, ApiError> {
        let response = self
            .http
            .post(format!("{}/api/v4/user/runners", self.base))
            .header("PRIVATE-TOKEN", self.api_token.expose())
            .json(request)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| self.transport(e))?;
        if status != 201 && status != 200 {
            return Err(classify(status, &body, false));
        }
        let parsed: RunnerResponse =
            serde_json::from_str(&body).map_err(|e| ApiError::Decode(e.to_string()))?;
        if !parsed.token.starts_with("glrt-") {
            tracing::warn!(
                runner_id = parsed.id,
                "the runner token does not start with glrt-"
            );
        }
        tracing::info!(runner_id = parsed.id, "created the GitLab runner");
        Ok(CreatedRunner {
            id: parsed.id,
            token: Secret::new(parsed.token),
            token_expires_at: parsed.token_expires_at,
        })
    }

    /// `POST /api/v4/runners/verify` with the runner token and a system id: the runner's id.
    pub async fn verify_runner(
        &self,
        token: &Secret,
        system_id: &str,
    ) -> std::result::Result<u64, ApiError> {
        let response = self
            .http
            .post(format!("{}/api/v4/runners/verify", self.base))
            .json(&serde_json::json!({"token": token.expose(), "system_id": system_id}))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| self.transport(e))?;
        match status {
            200 | 201 => serde_json::from_str::<Verified>(&body)
                .map(|v| v.id)
                .map_err(|e| ApiError::Decode(e.to_string())),
            403 => Err(ApiError::VerifyRejected),
            _ => Err(classify(status, &body, true)),
        }
    }

    /// `GET /api/v4/personal_access_tokens/self`: GitLab is reached and the access token is
    /// valid with a scope that may create runners; changes nothing at GitLab.
    pub async fn check_token(&self) -> std::result::Result<(), ApiError> {
        let scopes = self.token_scopes().await?;
        if scopes.iter().any(|s| s == "create_runner" || s == "api") {
            Ok(())
        } else {
            Err(ApiError::MissingScope)
        }
    }

    /// The access token's scopes, from `GET /api/v4/personal_access_tokens/self`.
    pub async fn token_scopes(&self) -> std::result::Result<Vec<String>, ApiError> {
        let response = self
            .http
            .get(format!("{}/api/v4/personal_access_tokens/self", self.base))
            .header("PRIVATE-TOKEN", self.api_token.expose())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| self.transport(e))?;
        if status != 200 {
            return Err(classify(status, &body, false));
        }
        let token: TokenSelf =
            serde_json::from_str(&body).map_err(|e| ApiError::Decode(e.to_string()))?;
        Ok(token.scopes)
    }

    /// The ids of the runners of the request's owner (its group, project or the instance)
    /// whose description contains `marker`, every page of GitLab's list read.
    pub async fn find_described(
        &self,
        request: &CreateRunner,
        marker: &str,
    ) -> std::result::Result<Vec<u64>, ApiError> {
        let list = list_path(request);
        let mut found = Vec::new();
        let mut page: u64 = 1;
        for _ in 0..MAX_LIST_PAGES {
            let url = format!("{}{list}&per_page=100&page={page}", self.base);
            let response = self.send_managing(self.http.get(url)).await?;
            let next = next_page(response.headers())?;
            let body = response.text().await.map_err(|e| self.transport(e))?;
            let entries: Vec<ListedRunner> =
                serde_json::from_str(&body).map_err(|e| ApiError::Decode(e.to_string()))?;
            let ours = entries
                .iter()
                .filter(|r| r.description.as_deref().is_some_and(|d| d.contains(marker)));
            found.extend(ours.map(|r| r.id));
            match next {
                None => return Ok(found),
                Some(next) => page = next,
            }
        }
        Err(ApiError::Decode(format!(
            "the runner list at {list} has more than {MAX_LIST_PAGES} pages of 100"
        )))
    }

    /// `DELETE /api/v4/runners/:id`; `false` when GitLab no longer has it (404).
    pub async fn delete_runner(&self, id: u64) -> std::result::Result<bool, ApiError> {
        let url = format!("{}/api/v4/runners/{id}", self.base);
        match self.send_managing(self.http.delete(url)).await {
            Ok(_) => Ok(true),
            Err(ApiError::BadRequest { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET {base}{path}` with the access token: the body of a 200, a missing scope as
    /// [`ApiError::ReadScope`], 404 as [`ApiError::BadRequest`] (the caller names what is
    /// missing). For the read-only views ([`super::rest`]).
    pub async fn get_json(&self, path: &str) -> std::result::Result<String, ApiError> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("PRIVATE-TOKEN", self.api_token.expose())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| self.transport(e))?;
        if status == 200 {
            return Ok(body);
        }
        Err(match classify(status, &body, false) {
            ApiError::MissingScope => ApiError::ReadScope,
            other => other,
        })
    }

    /// Sends a runner-management request with the access token: 2xx is the response, a
    /// missing scope is [`ApiError::CleanupScope`].
    async fn send_managing(
        &self,
        request: reqwest::RequestBuilder,
    ) -> std::result::Result<reqwest::Response, ApiError> {
        let response = request
            .header("PRIVATE-TOKEN", self.api_token.expose())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let body = response.text().await.map_err(|e| self.transport(e))?;
        Err(match classify(status, &body, false) {
            ApiError::MissingScope => ApiError::CleanupScope,
            other => other,
        })
    }

    /// Creates the runner and verifies its token: what `--gitlab-api-token-file` does.
    pub async fn create_and_verify(&self, request: &CreateRunner) -> Result<CreatedRunner> {
        request.validate()?;
        let created = self.create_runner(request).await?;
        self.verify_runner(&created.token, &system_id()).await?;
        Ok(created)
    }

    fn transport(&self, e: reqwest::Error) -> ApiError {
        if e.is_timeout() {
            ApiError::Timeout(self.timeout)
        } else {
            // Without the URL's query (none is sent) the error names host and cause only.
            let mut chain = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                chain.push_str(&format!(": {s}"));
                source = s.source();
            }
            ApiError::Network(chain)
        }
    }
}

/// `X-Next-Page`: empty or absent on the last page, else a page number.
fn next_page(headers: &reqwest::header::HeaderMap) -> std::result::Result<Option<u64>, ApiError> {
    let raw = headers
        .get("x-next-page")
        .map(|v| v.to_str().unwrap_or("?").trim())
        .unwrap_or_default();
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse()
        .map(Some)
        .map_err(|_| ApiError::Decode(format!("X-Next-Page `{raw:.20}` is not a page number")))
}

/// Bounds a list walk: 10,000 runners of one owner.
const MAX_LIST_PAGES: usize = 100;

/// The list of the owner a [`CreateRunner`] names, filtered to its type (GitLab 16+ paths).
fn list_path(request: &CreateRunner) -> String {
    match (request.runner_type, request.group_id, request.project_id) {
        (RunnerType::GroupType, Some(group), _) => {
            format!("/api/v4/groups/{group}/runners?type=group_type")
        }
        (RunnerType::ProjectType, _, Some(project)) => {
            format!("/api/v4/projects/{project}/runners?type=project_type")
        }
        _ => "/api/v4/runners/all?type=instance_type".to_string(),
    }
}

/// Whether `scopes` may list the request owner's runners and delete them (GitLab 17.1+'s
/// `manage_runner` does not reach `/runners/all`).
pub fn may_clean_up(scopes: &[String], runner_type: RunnerType) -> bool {
    let has = |s: &str| scopes.iter().any(|held| held == s);
    match runner_type {
        RunnerType::InstanceType => has("api") || (has("read_api") && has("manage_runner")),
        _ => has("api") || has("manage_runner"),
    }
}

/// The part of a runner list entry tenantci reads.
#[derive(Deserialize)]
struct ListedRunner {
    id: u64,
    description: Option<String>,
}

/// The part of `runners/verify`'s answer tenantci reads.
#[derive(Deserialize)]
struct Verified {
    id: u64,
}

/// The part of `personal_access_tokens/self` tenantci reads.
#[derive(Deserialize)]
struct TokenSelf {
    #[serde(default)]
    scopes: Vec<String>,
}

/// A system id like gitlab-runner's (`s_` + 12 hex digits), identifying this host's manager.
pub fn system_id() -> String {
    let n: u64 = rand::random();
    format!("s_{:012x}", n & 0xffff_ffff_ffff)
}

/// GitLab's `message` (or OAuth's `error_description` / `error`), else the status and an
/// excerpt of the body (an HTML page from a proxy in front of GitLab).
fn message_of(status: u16, body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let text = v
        .get("message")
        .or_else(|| v.get("error_description"))
        .or_else(|| v.get("error"))
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    tenantci_core::upstream::detail(status, "", &text, body.as_bytes())
}

fn classify(status: u16, body: &str, verify: bool) -> ApiError {
    let message = message_of(status, body);
    match status {
        401 => ApiError::Unauthorized,
        403 if verify => ApiError::VerifyRejected,
        403 if body.contains("insufficient_scope") => ApiError::MissingScope,
        403 => ApiError::Forbidden(message),
        410 => ApiError::RegistrationDisabled(message),
        400..=499 => ApiError::BadRequest { status, message },
        _ => ApiError::Server { status, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(t: RunnerType) -> CreateRunner {
        CreateRunner {
            runner_type: t,
            group_id: None,
            project_id: None,
            description: None,
            tag_list: vec!["pod".into()],
            run_untagged: false,
            locked: false,
            paused: false,
        }
    }

    #[test]
    fn api_request_validation_matches_gitlab() {
        assert!(request(RunnerType::InstanceType).validate().is_ok());
        assert!(request(RunnerType::GroupType).validate().is_err());
        let mut r = request(RunnerType::GroupType);
        r.group_id = Some(7);
        assert!(r.validate().is_ok());
        r.project_id = Some(8);
        assert!(r.validate().is_err());
    }

    #[test]
    fn api_errors_map_to_exit_codes() {
        assert_eq!(Error::from(classify(401, "{}", false)).exit_code(), 2);
        assert!(matches!(
            classify(403, r#"{"error":"insufficient_scope"}"#, false),
            ApiError::MissingScope
        ));
        assert_eq!(Error::from(classify(410, "{}", false)).exit_code(), 3);
        assert_eq!(Error::from(classify(502, "x", false)).exit_code(), 3);
        assert_eq!(
            Error::from(ApiError::Timeout(DEFAULT_TIMEOUT)).exit_code(),
            3
        );
    }

    #[test]
    fn api_tag_list_is_sent_comma_separated() {
        let mut r = request(RunnerType::InstanceType);
        r.tag_list = vec!["a".into(), "b".into()];
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["tag_list"], "a,b");
        assert_eq!(v["runner_type"], "instance_type");
    }
}
