//! A client for the OpenSandbox Lifecycle API (reqwest, rustls): an access check, create, get,
//! list (every page), merge-patch metadata, delete. One request per call (per page for a
//! list), no retries: the caller decides
//! what a failure costs, from [`ApiError::is_retryable`] (unreachable, 5xx, 409: try again
//! later), [`ApiError::Unauthorized`] (a wrong key: stop and say which file holds it) and
//! [`ApiError::Rejected`] (400: the request itself is wrong; the API's message says why).
//!
//! The API key travels only in the `OPEN-SANDBOX-API-KEY` header; no error or `Debug` shows it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::types::{CreateSandbox, ErrorBody, Sandbox, SandboxPage, SandboxState};
use crate::{Error, Secret};

/// The header that carries the API key on every call.
pub const API_KEY_HEADER: &str = "OPEN-SANDBOX-API-KEY";
/// The page size used when listing: the API's maximum is not documented; 100 keeps pages small.
const PAGE_SIZE: u32 = 100;
/// How much of an error answer is read: its code and message, or an excerpt, fit well within.
const ERROR_BODY_MAX: usize = 64 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No HTTP answer arrived (connection, TLS or timeout); retryable.
    #[error("cannot reach the OpenSandbox Lifecycle API at {url}")]
    Unreachable {
        /// The API root called (`<base>/v1`).
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// A 5xx answer; retryable.
    #[error("the OpenSandbox Lifecycle API answered {status} ({detail})")]
    Server {
        /// The HTTP status, 500 to 599.
        status: u16,
        /// As in [`ApiError::Rejected`].
        detail: String,
    },
    /// A 409 answer: the sandbox is mid-change; retryable.
    #[error("the OpenSandbox Lifecycle API answered 409 Conflict ({detail})")]
    Conflict {
        /// As in [`ApiError::Rejected`].
        detail: String,
    },
    /// A 401 or 403 answer: the API key is wrong.
    #[error("the OpenSandbox Lifecycle API refused the API key in {}", key_file.display())]
    Unauthorized {
        /// The file the key was read from, so the message says which to fix.
        key_file: PathBuf,
    },
    /// A 400 answer: the request itself is wrong.
    #[error("the OpenSandbox Lifecycle API refused the request ({detail})")]
    Rejected {
        /// The API's `code: message`, or without them the status and a bounded excerpt of
        /// the body ([`crate::upstream::detail`]).
        detail: String,
    },
    /// Any other non-2xx answer (a 404 among them, which `get`, `patch_metadata` and `delete`
    /// read as "gone").
    #[error("the OpenSandbox Lifecycle API answered {status} ({detail})")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// As in [`ApiError::Rejected`].
        detail: String,
    },
    /// A 2xx answer whose body is not the JSON the spec describes.
    #[error("the OpenSandbox Lifecycle API's answer to {what} is not what the spec describes")]
    Decode {
        /// The call, as in `"list"`.
        what: &'static str,
        /// The HTTP client's decode error.
        #[source]
        source: reqwest::Error,
    },
}

impl ApiError {
    /// Worth another try later: the API is away, overloaded or mid-change.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::Unreachable { .. } | ApiError::Server { .. } | ApiError::Conflict { .. }
        )
    }

    /// The error for a command's edge (exit code 3 for the outside world, 2 for a bad key file).
    pub fn into_error(self) -> Error {
        let hint = match &self {
            ApiError::Unauthorized { key_file } => format!(
                "put the Lifecycle API key (OPEN-SANDBOX-API-KEY) into {}, or name the right file",
                key_file.display()
            ),
            ApiError::Unreachable { .. } | ApiError::Server { .. } => {
                "is OpenSandbox up? check --opensandbox-url and the server's health".into()
            }
            ApiError::Rejected { detail } | ApiError::Unexpected { detail, .. }
                if detail.starts_with("HTTP ") =>
            {
                "the answer is not the Lifecycle API's JSON: something else answered (a proxy, or a --opensandbox-url / [vm] url that is not the API's root)".into()
            }
            _ => "see the API's message above".into(),
        };
        let err = match &self {
            ApiError::Unauthorized { .. } => Error::bad_input(self.to_string()),
            _ => Error::external(self.to_string()),
        };
        err.hint(hint).caused_by(self)
    }
}

/// Where the API is and how to authenticate.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server root, e.g. `https://sandbox.example` (`/v1` is appended).
    pub base_url: String,
    /// The Lifecycle API key, sent as [`API_KEY_HEADER`].
    pub api_key: Secret,
    /// Named in a 401's error, never read here.
    pub api_key_file: PathBuf,
    /// Bound on every call. Default 30s.
    pub request_timeout: Duration,
    /// Bound on opening a connection. Default 5s.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    /// A configuration for `base_url` (a trailing `/` dropped) with the default timeouts.
    pub fn new(base_url: &str, api_key: Secret, api_key_file: PathBuf) -> Self {
        ClientConfig {
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            api_key_file,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// An error answer's body, read up to [`ERROR_BODY_MAX`] bytes (an error page may be large;
/// only its start is ever shown).
async fn bounded_body(mut resp: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_BODY_MAX {
            body.truncate(ERROR_BODY_MAX);
            break;
        }
    }
    body
}

/// A filter for [`LifecycleClient::list`]: states OR'ed (empty: any), metadata AND'ed.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Sandboxes in any of these states; empty: every state.
    pub states: Vec<SandboxState>,
    /// Sandboxes carrying every one of these metadata labels; empty: no condition.
    pub metadata: BTreeMap<String, String>,
}

/// A Lifecycle API client; cheap to clone. `Debug` does not show the key ([`Secret`]).
#[derive(Debug, Clone)]
pub struct LifecycleClient {
    http: reqwest::Client,
    base: String,
    api_key: Secret,
    api_key_file: PathBuf,
}

impl LifecycleClient {
    /// A client for `cfg`; an error (exit 3) only when the HTTP client cannot be built.
    pub fn new(cfg: ClientConfig) -> crate::Result<Self> {
        crate::tls::ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(format!("tenantci/{}", env!("CARGO_PKG_VERSION")))
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.request_timeout)
            .build()
            .map_err(|e| {
                Error::external("cannot build the OpenSandbox HTTP client").caused_by(e)
            })?;
        Ok(LifecycleClient {
            http,
            base: format!("{}/v1", cfg.base_url),
            api_key: cfg.api_key,
            api_key_file: cfg.api_key_file,
        })
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header(API_KEY_HEADER, self.api_key.expose())
    }

    /// Sends, and turns a non-2xx answer into its [`ApiError`].
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ApiError> {
        let resp = req.send().await.map_err(|source| ApiError::Unreachable {
            url: self.base.clone(),
            source,
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let body = bounded_body(resp).await;
        Err(self.classify(status, &body))
    }

    fn classify(&self, status: StatusCode, body: &[u8]) -> ApiError {
        let ErrorBody { code, message } = serde_json::from_slice(body).unwrap_or_default();
        let detail = crate::upstream::detail(status.as_u16(), &code, &message, body);
        match status.as_u16() {
            401 | 403 => ApiError::Unauthorized {
                key_file: self.api_key_file.clone(),
            },
            400 => ApiError::Rejected { detail },
            409 => ApiError::Conflict { detail },
            s @ 500..=599 => ApiError::Server { status: s, detail },
            s => ApiError::Unexpected { status: s, detail },
        }
    }

    async fn json<T: DeserializeOwned>(
        what: &'static str,
        resp: reqwest::Response,
    ) -> Result<T, ApiError> {
        resp.json()
            .await
            .map_err(|source| ApiError::Decode { what, source })
    }

    /// One authenticated list call (a page of one): reachable, and the key is accepted.
    pub async fn check_access(&self) -> Result<(), ApiError> {
        let req = self
            .request(Method::GET, "/sandboxes")
            .query(&[("page", "1"), ("pageSize", "1")]);
        self.send(req).await.map(drop)
    }

    /// `POST /sandboxes` (202): the sandbox as first described, usually Pending.
    pub async fn create(&self, req: &CreateSandbox) -> Result<Sandbox, ApiError> {
        let resp = self
            .send(self.request(Method::POST, "/sandboxes").json(req))
            .await?;
        Self::json("create", resp).await
    }

    /// `GET /sandboxes/{id}`; `None` when the API no longer knows it (deleted or expired).
    pub async fn get(&self, id: &str) -> Result<Option<Sandbox>, ApiError> {
        match self
            .send(self.request(Method::GET, &format!("/sandboxes/{id}")))
            .await
        {
            Ok(resp) => Self::json("get", resp).await.map(Some),
            Err(ApiError::Unexpected { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every sandbox matching `filter`, page after page.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Sandbox>, ApiError> {
        let mut out = Vec::new();
        for page in 1u32.. {
            let mut query: Vec<(&str, String)> = filter
                .states
                .iter()
                .map(|s| ("state", s.as_str().to_string()))
                .collect();
            if !filter.metadata.is_empty() {
                query.push(("metadata", metadata_filter(&filter.metadata)));
            }
            query.push(("page", page.to_string()));
            query.push(("pageSize", PAGE_SIZE.to_string()));
            let resp = self
                .send(self.request(Method::GET, "/sandboxes").query(&query))
                .await?;
            let page: SandboxPage = Self::json("list", resp).await?;
            out.extend(page.items);
            if !page.pagination.has_next_page {
                break;
            }
        }
        Ok(out)
    }

    /// `PATCH /sandboxes/{id}/metadata`, a JSON merge patch: `Some` sets, `None` removes.
    /// `None` when the sandbox is gone.
    pub async fn patch_metadata(
        &self,
        id: &str,
        patch: &BTreeMap<String, Option<String>>,
    ) -> Result<Option<Sandbox>, ApiError> {
        let req = self
            .request(Method::PATCH, &format!("/sandboxes/{id}/metadata"))
            .json(patch);
        match self.send(req).await {
            Ok(resp) => Self::json("patch metadata", resp).await.map(Some),
            Err(ApiError::Unexpected { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `DELETE /sandboxes/{id}`: `true` when this call deleted it, `false` when it was
    /// already gone (404).
    pub async fn delete(&self, id: &str) -> Result<bool, ApiError> {
        match self
            .send(self.request(Method::DELETE, &format!("/sandboxes/{id}")))
            .await
        {
            Ok(_) => Ok(true),
            Err(ApiError::Unexpected { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The `metadata` query value: `k=v&k2=v2` (label-rule keys and values need no escaping
/// inside; the query encoder escapes the `=` and `&` once more).
fn metadata_filter(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}
