//! The cache's HTTP side: the protocol `@actions/cache` speaks to `ACTIONS_CACHE_URL` (v1,
//! `_apis/artifactcache/`, as act_runner's cache server serves it; docs/gitea-protocol.md),
//! under `/_tenantci/cache/<grant>/`, where the grant (`cache::grant`) names and proves the
//! task's repository and branch scope, and every call but the download carries the task's
//! runtime token (`Authorization: Bearer`, as the toolkit sends `ACTIONS_RUNTIME_TOKEN`).
//! Every handler works inside that repository's directory only.
//!
//! - `GET  cache?keys=K1,K2&version=V`: 200 `{result, archiveLocation, cacheKey}` or 204;
//! - `POST caches` `{key, version, cacheSize}`: 200 `{cacheId}`; 409 when the entry exists;
//! - `PATCH caches/{id}` with `Content-Range: bytes S-E/*`: one range, streamed to storage;
//! - `POST caches/{id}` `{size}`: the commit;
//! - `GET  artifacts/{id}?ticket=T`: the entry's bytes; the ticket is in the lookup's
//!   `archiveLocation` (the toolkit downloads with a bare client, no token).
//!
//! Every refusal is a JSON `{"message": sentence}` with a 4xx status, and stores nothing.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde::Deserialize;

use crate::cache::Cache;
use crate::cache::grant::{self, Denied, Grant};
use crate::cache::index::{self, Entry, Part, Reservation};
use crate::cache::storage::{Committed, StoreError, UploadError, repo_dir};

/// Where the cache is served, on the facade's listener and through the executor-proxy.
pub const PREFIX: &str = "/_tenantci/cache";

/// The JSON bodies are small (a key, a version, a size).
const JSON_LIMIT: usize = 64 << 10;

/// A refusal: its status and sentence.
pub struct Refusal(StatusCode, String);

impl Refusal {
    /// A refusal with `status` and `sentence`, a whole sentence the job's log shows.
    pub fn new(status: StatusCode, sentence: String) -> Self {
        Refusal(status, sentence)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "message": self.1 }).to_string();
        (self.0, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

fn refuse(status: StatusCode, sentence: impl Into<String>) -> Refusal {
    Refusal(status, sentence.into())
}

impl Cache {
    /// Refuses an entry past `max_entry_size`.
    fn check_size(&self, size: u64) -> Result<(), Refusal> {
        if size > self.max_entry_size {
            self.metrics.cache_refused();
            return Err(Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the cache entry would hold {size} bytes, past this cache's limit of {} per entry (cache.max_entry_size_mib); cache less",
                    self.max_entry_size
                ),
            ));
        }
        Ok(())
    }
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "cache: the storage failed");
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the cache storage is not available right now; retry later",
        )
    }
}

type Answer = Result<Response, Refusal>;

/// The cache's routes (mounted beside the facade's).
pub fn router(cache: Arc<Cache>) -> Router {
    let api = format!("{PREFIX}/{{grant}}/_apis/artifactcache");
    Router::new()
        .route(&format!("{api}/cache"), get(lookup))
        .route(&format!("{api}/caches"), post(reserve))
        .route(&format!("{api}/caches/{{id}}"), post(commit).patch(upload))
        .route(&format!("{api}/artifacts/{{id}}"), get(download))
        .route(&format!("{PREFIX}/{{grant}}/{{*rest}}"), any(other))
        .layer(DefaultBodyLimit::max(JSON_LIMIT))
        .with_state(cache)
}

/// Anything else under the prefix: a path without a grant (or with a forged one) is
/// unauthorized; a granted caller asked for something the cache does not serve.
async fn other(
    State(cache): State<Arc<Cache>>,
    UrlPath((presented, rest)): UrlPath<(String, String)>,
) -> Refusal {
    match verified(&cache, &presented) {
        Ok(_) => refuse(
            StatusCode::NOT_FOUND,
            format!(
                "the cache serves no `{rest}`; only the _apis/artifactcache calls of @actions/cache"
            ),
        ),
        Err(refusal) => refusal,
    }
}

/// Unix seconds now: what grants and tickets expire by.
fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The refusal of a grant, token or ticket, counted and (when it looks like an attack) logged.
fn denied(cache: &Cache, d: Denied) -> Refusal {
    cache.metrics.cache_refused();
    let (status, sentence) = match d {
        Denied::Forged => {
            tracing::warn!("cache: a request with a forged or damaged grant; refused");
            (
                StatusCode::UNAUTHORIZED,
                "this cache request has no valid grant; use ACTIONS_CACHE_URL as the runner sets it (it names the task's repository)".to_string(),
            )
        }
        Denied::Expired(at) => (
            StatusCode::UNAUTHORIZED,
            format!(
                "this cache grant expired at {}: a grant lives as long as its task may (cache.grant_lifetime); the task it was made for has ended",
                time::OffsetDateTime::from_unix_timestamp(at)
                    .ok()
                    .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
                    .unwrap_or_else(|| at.to_string())
            ),
        ),
        Denied::NoToken => (
            StatusCode::UNAUTHORIZED,
            "this cache request has no `Authorization: Bearer` token; send the job's ACTIONS_RUNTIME_TOKEN, as @actions/cache does".to_string(),
        ),
        Denied::WrongToken => {
            tracing::warn!("cache: a grant presented with another task's token; refused");
            (
                StatusCode::FORBIDDEN,
                "this cache request's bearer token is not the runtime token of the task its grant was made for".to_string(),
            )
        }
        Denied::NoTicket => (
            StatusCode::FORBIDDEN,
            format!(
                "this download has no valid ticket for the entry; take archiveLocation from a fresh lookup (a ticket lasts {} minutes)",
                grant::TICKET_LIFETIME.as_secs() / 60
            ),
        ),
    };
    refuse(status, sentence)
}

/// The grant in the path, genuine and unexpired, with its repository's directory.
fn verified(cache: &Cache, presented: &str) -> Result<(Grant, String), Refusal> {
    let g = grant::verify(&cache.capability_key, presented, unix_now())
        .map_err(|d| denied(cache, d))?;
    let dir = repo_dir(&g.scope.repository);
    Ok((g, dir))
}

/// The `Authorization: Bearer` token of a call.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The caller's grant and repository directory: the grant in its path, verified, and the
/// runtime token of its task in its `Authorization`.
fn granted(
    cache: &Cache,
    presented: &str,
    headers: &HeaderMap,
) -> Result<(Grant, String), Refusal> {
    let (g, dir) = verified(cache, presented)?;
    g.admits(bearer(headers)).map_err(|d| denied(cache, d))?;
    Ok((g, dir))
}

#[derive(Deserialize)]
struct LookupQuery {
    keys: String,
    version: String,
}

/// Where the job reaches this cache: the executor-proxy says so in `x-forwarded-*`; a direct
/// caller reached the facade's own address (its `Host`, or over h2 the `:authority` hyper
/// keeps in the URI).
fn base_url(headers: &HeaderMap, uri: &Uri, grant: &str) -> String {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let proto = h("x-forwarded-proto").unwrap_or("https");
    let host = h("x-forwarded-host")
        .or(h("host"))
        .or(uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost");
    format!("{proto}://{host}{PREFIX}/{grant}/_apis/artifactcache")
}

async fn lookup(
    State(cache): State<Arc<Cache>>,
    UrlPath(presented): UrlPath<String>,
    Query(q): Query<LookupQuery>,
    headers: HeaderMap,
    uri: Uri,
) -> Answer {
    let (g, repo) = granted(&cache, &presented, &headers)?;
    let keys: Vec<&str> = q
        .keys
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    if keys.is_empty() || keys.len() > index::MAX_KEYS {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "a lookup needs 1 to {} keys, got {}",
                index::MAX_KEYS,
                keys.len()
            ),
        ));
    }
    for k in &keys {
        index::check_key("key", k, index::MAX_KEY)
            .map_err(|s| refuse(StatusCode::BAD_REQUEST, s))?;
    }
    index::check_key("version", &q.version, index::MAX_VERSION)
        .map_err(|s| refuse(StatusCode::BAD_REQUEST, s))?;
    // Held from the read to the touch, so no sweep deletes the entry in between (a touch
    // after that would bring its manifest back without its parts). While a sweep runs the
    // lookup does not wait: it answers without recording the use.
    let not_evicting = cache.evicting.try_read().ok();
    let entries = cache.storage.entries(&repo).await?;
    let Some(found) = index::find(&entries, &g.scope.reads, &keys, &q.version) else {
        cache.metrics.cache_miss();
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    cache.metrics.cache_hit();
    if not_evicting.is_some() {
        let mut used = found.clone();
        used.used = crate::cache::now();
        if let Err(e) = cache.storage.touch(&repo, &used).await {
            tracing::warn!(error = %e, "cache: cannot record a restore's use; the entry may be evicted early");
        }
    }
    drop(not_evicting);
    // Straight from the bucket when it signs URLs; else through this cache, with a ticket.
    let location = match cache
        .storage
        .direct_url(&repo, found, grant::TICKET_LIFETIME)
        .await?
    {
        Some(url) => url,
        None => {
            let expires = unix_now() + grant::TICKET_LIFETIME.as_secs() as i64;
            let ticket = g.ticket(&cache.capability_key, found.id, expires);
            format!(
                "{}/artifacts/{}?ticket={ticket}",
                base_url(&headers, &uri, &presented),
                found.id
            )
        }
    };
    let body = serde_json::json!({
        "result": "hit",
        "archiveLocation": location,
        "cacheKey": found.key,
    });
    Ok(axum::Json(body).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReserveBody {
    key: String,
    version: String,
    #[serde(default)]
    cache_size: Option<u64>,
}

async fn reserve(
    State(cache): State<Arc<Cache>>,
    UrlPath(presented): UrlPath<String>,
    headers: HeaderMap,
    body: Result<axum::Json<ReserveBody>, axum::extract::rejection::JsonRejection>,
) -> Answer {
    let (g, repo) = granted(&cache, &presented, &headers)?;
    let axum::Json(b) = body.map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "the reservation is not `{{key, version, cacheSize}}` JSON: {}",
                e.body_text()
            ),
        )
    })?;
    index::check_key("key", &b.key, index::MAX_KEY)
        .map_err(|s| refuse(StatusCode::BAD_REQUEST, s))?;
    index::check_key("version", &b.version, index::MAX_VERSION)
        .map_err(|s| refuse(StatusCode::BAD_REQUEST, s))?;
    if let Some(size) = b.cache_size {
        cache.check_size(size)?;
    }
    let entries = cache.storage.entries(&repo).await?;
    if index::existing(&entries, &g.scope.write, &b.key, &b.version).is_some() {
        return Err(refuse(
            StatusCode::CONFLICT,
            format!(
                "the cache entry `{}` exists already for this branch; entries are immutable, save under a new key",
                b.key
            ),
        ));
    }
    let r = Reservation {
        id: rand::random::<u64>() >> 12,
        key: b.key,
        version: b.version,
        size: b.cache_size,
        created: crate::cache::now(),
        scope: g.scope.write.clone(),
    };
    cache.storage.reserve(&repo, &r).await?;
    tracing::info!(task = g.task.get(), id = r.id, "cache: an upload reserved");
    Ok(axum::Json(serde_json::json!({ "cacheId": r.id })).into_response())
}

/// Reservation `id` of the caller's repository and branch.
async fn reservation(
    cache: &Cache,
    g: &Grant,
    repo: &str,
    id: &str,
) -> Result<Reservation, Refusal> {
    let unknown = || {
        refuse(
            StatusCode::NOT_FOUND,
            format!("no upload {id} is reserved in this repository; reserve one with POST caches"),
        )
    };
    let id: u64 = id.parse().map_err(|_| unknown())?;
    cache
        .storage
        .reservation(repo, id)
        .await?
        .filter(|r| r.scope == g.scope.write)
        .ok_or_else(unknown)
}

async fn upload(
    State(cache): State<Arc<Cache>>,
    UrlPath((presented, id)): UrlPath<(String, String)>,
    req: Request,
) -> Answer {
    let (g, repo) = granted(&cache, &presented, req.headers())?;
    let r = reservation(&cache, &g, &repo, &id).await?;
    let part = content_range(req.headers())?;
    // Never None: the parser refuses a range whose end does not fit.
    let end = part.end().unwrap_or(u64::MAX);
    cache.check_size(end)?;
    if let Some(size) = r.size
        && end > size
    {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("the range ends at byte {end}, past the {size} bytes reserved"),
        ));
    }
    let parts = cache.storage.parts(&repo, r.id).await?;
    if index::overlaps(&parts, part) {
        return Err(refuse(
            StatusCode::CONFLICT,
            format!(
                "the range starting at byte {} overlaps one uploaded already; send each range once",
                part.start
            ),
        ));
    }
    let body = req.into_body().into_data_stream();
    match cache.storage.upload_part(&repo, r.id, part, body).await {
        Ok(()) => Ok(StatusCode::OK.into_response()),
        Err(UploadError::Store(e)) => Err(e.into()),
        Err(e) => Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("the range was not kept: {e}"),
        )),
    }
}

/// The upload's `Content-Range`, parsed checked; a 400 saying what is wrong with it.
fn content_range(headers: &HeaderMap) -> Result<Part, Refusal> {
    let value = headers.get(header::CONTENT_RANGE).ok_or_else(|| {
        refuse(
            StatusCode::BAD_REQUEST,
            "an upload needs `Content-Range: bytes START-END/*`",
        )
    })?;
    let value = value.to_str().map_err(|_| {
        refuse(
            StatusCode::BAD_REQUEST,
            "the upload's Content-Range is not text; send `bytes START-END/*`",
        )
    })?;
    index::parse_content_range(value).map_err(|s| refuse(StatusCode::BAD_REQUEST, s))
}

/// The 409 of a commit that lost to another of the same key and version.
fn taken(key: &str) -> Refusal {
    refuse(
        StatusCode::CONFLICT,
        format!(
            "the cache entry `{key}` was committed by another job meanwhile; entries are immutable, this upload was dropped"
        ),
    )
}

#[derive(Deserialize)]
struct CommitBody {
    size: u64,
}

async fn commit(
    State(cache): State<Arc<Cache>>,
    UrlPath((presented, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Result<axum::Json<CommitBody>, axum::extract::rejection::JsonRejection>,
) -> Answer {
    let (g, repo) = granted(&cache, &presented, &headers)?;
    let r = reservation(&cache, &g, &repo, &id).await?;
    let axum::Json(b) = body.map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("the commit is not `{{size}}` JSON: {}", e.body_text()),
        )
    })?;
    cache.check_size(b.size)?;
    if let Some(reserved) = r.size
        && b.size != reserved
    {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "the commit's size {} is not the {reserved} bytes reserved; commit the size the reservation announced",
                b.size
            ),
        ));
    }
    let parts = cache.storage.parts(&repo, r.id).await?;
    let parts = index::whole(parts, b.size).map_err(|why| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("the entry is incomplete: {why}; upload every range, then commit its size"),
        )
    })?;
    // The common loser, refused before a join; the manifest's create-only put decides the
    // rest (and an entry saved by an earlier tenantci, named otherwise, is found only here).
    let entries = cache.storage.entries(&repo).await?;
    if index::existing(&entries, &r.scope, &r.key, &r.version).is_some_and(|e| e.id != r.id) {
        cache.storage.discard(&repo, r.id).await?;
        return Err(taken(&r.key));
    }
    let now = crate::cache::now();
    let entry = Entry {
        id: r.id,
        key: r.key,
        version: r.version,
        size: b.size,
        parts,
        created: now,
        used: now,
        scope: r.scope,
        joined: false,
        by_key: true,
    };
    if cache.storage.commit(&repo, &entry).await? == Committed::Taken {
        return Err(taken(&entry.key));
    }
    tracing::info!(
        task = g.task.get(),
        id = entry.id,
        size = entry.size,
        "cache: an entry committed"
    );
    cache.sweep_soon();
    Ok(StatusCode::OK.into_response())
}

#[derive(Deserialize)]
struct DownloadQuery {
    ticket: Option<String>,
}

async fn download(
    State(cache): State<Arc<Cache>>,
    UrlPath((presented, id)): UrlPath<(String, String)>,
    Query(q): Query<DownloadQuery>,
) -> Answer {
    let (g, repo) = verified(&cache, &presented)?;
    let unknown = || {
        refuse(
            StatusCode::NOT_FOUND,
            format!("no cache entry {id} in this repository"),
        )
    };
    let id: u64 = id.parse().map_err(|_| unknown())?;
    g.admits_download(&cache.capability_key, id, q.ticket.as_deref(), unix_now())
        .map_err(|d| denied(&cache, d))?;
    let entry = cache
        .storage
        .entry(&repo, id)
        .await?
        .filter(|e| g.scope.reads.contains(&e.scope))
        .ok_or_else(unknown)?;
    let stream = cache.storage.download(&repo, &entry);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, entry.size.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_id::TaskId;

    #[tokio::test]
    async fn a_request_without_a_grant_or_with_an_expired_one_is_unauthorized() {
        let dir = tempfile::tempdir().unwrap();
        let key = crate::capability::CapabilityKey::generate();
        let cache = Cache::open(
            &crate::cache::settings::CacheSettings::in_dir(dir.path()),
            key.clone(),
            Arc::new(crate::metrics::Metrics::default()),
        )
        .unwrap();
        let app = router(cache);
        let req = axum::http::Request::get(format!(
            "{PREFIX}/forged/_apis/artifactcache/cache?keys=a&version=v"
        ))
        .body(Body::empty())
        .unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

        // A genuine grant past its expiry, with its task's token: refused, saying why.
        let context = serde_json::json!({"repository": "sim/demo", "token": "tt"});
        let task = tenantci_core::forge::gitea::proto::Task {
            id: 7,
            context: Some(tenantci_core::forge::gitea::json::struct_from_json(
                context.as_object().unwrap().clone(),
            )),
            ..Default::default()
        };
        let expired = grant::mint(
            &key,
            TaskId::new(7),
            1,
            unix_now() - 1,
            &grant::task_cache(&task).unwrap(),
        );
        let req = axum::http::Request::get(format!(
            "{PREFIX}/{expired}/_apis/artifactcache/cache?keys=a&version=v"
        ))
        .header("authorization", "Bearer tt")
        .body(Body::empty())
        .unwrap();
        let resp = tower::ServiceExt::oneshot(app, req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        assert!(
            String::from_utf8_lossy(&body).contains("expired"),
            "{body:?}"
        );
    }

    #[test]
    fn the_archive_location_names_where_the_job_reached_the_cache() {
        let mut headers = HeaderMap::new();
        let h2: Uri = "https://10.0.0.7:8443/x".parse().unwrap();
        // An h2 caller sends no Host: its :authority is in the URI.
        assert_eq!(
            base_url(&headers, &h2, "g"),
            format!("https://10.0.0.7:8443{PREFIX}/g/_apis/artifactcache")
        );
        headers.insert("host", "facade:8443".parse().unwrap());
        let h1: Uri = "/x".parse().unwrap();
        assert_eq!(
            base_url(&headers, &h1, "g"),
            format!("https://facade:8443{PREFIX}/g/_apis/artifactcache")
        );
        // Through the executor's proxy: the job's own address.
        headers.insert("x-forwarded-proto", "http".parse().unwrap());
        headers.insert("x-forwarded-host", "127.0.0.1:8431".parse().unwrap());
        assert_eq!(
            base_url(&headers, &h2, "g"),
            format!("http://127.0.0.1:8431{PREFIX}/g/_apis/artifactcache")
        );
    }
}
