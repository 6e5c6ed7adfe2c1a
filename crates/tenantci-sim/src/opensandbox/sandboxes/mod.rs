//! The double's sandboxes and the Lifecycle API's rules over them, with the clock passed in:
//! creation checks, Pending until the boot delay has passed then Running, Failed when a test
//! says so, gone at DELETE or at expiry (as in the Kubernetes runtime, where the
//! `BatchSandbox` is deleted: GET answers 404 and list omits it), metadata merge patches and
//! the renew-expiration rules.
//!
//! Does not speak HTTP (`routes`). Errors are the API's `{code, message}` with a status.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};

use tenantci_core::opensandbox::label;

/// An API refusal: the HTTP status and the `{code, message}` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The API's error code (`SANDBOX_NOT_FOUND`, `INVALID_REQUEST`, ...).
    pub code: &'static str,
    /// The API's message.
    pub message: String,
}

impl ApiError {
    /// A refusal with `status`, `code` and `message`.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "INVALID_REQUEST", message)
    }

    /// 404 `SANDBOX_NOT_FOUND` for `id`.
    pub fn not_found(id: &str) -> Self {
        ApiError::new(404, "SANDBOX_NOT_FOUND", format!("sandbox {id} not found"))
    }
}

/// Why a sandbox left the API, kept for the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gone {
    /// DELETEd by a caller.
    UserDelete,
    /// Its timeout (or renewed expiry) passed.
    TtlExpiry,
}

/// One sandbox as the double keeps it (the admin view serializes all of it).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRec {
    /// The id the double gave it (`sbx-NNNNNN-XXXXXXXX`).
    pub id: String,
    /// The create request's `image` (`uri` required).
    pub image: Value,
    /// The command it runs.
    pub entrypoint: Vec<String>,
    /// Its environment (kept for the admin view; not part of the API's `Sandbox`).
    pub env: BTreeMap<String, String>,
    /// Its metadata labels (the label rules checked).
    pub metadata: BTreeMap<String, String>,
    /// The create request's `resourceLimits` (may be absent with a pool reference).
    pub resource_limits: Value,
    /// The timeout in seconds (60 or more), if the create asked for one.
    pub timeout: Option<u64>,
    /// When it was created.
    #[serde(skip)]
    pub created: SystemTime,
    /// When it turns Running (created + the boot delay).
    #[serde(skip)]
    pub running_at: SystemTime,
    /// When it expires, if it does.
    #[serde(skip)]
    pub expires: Option<SystemTime>,
    /// Why it failed, once a test failed it.
    pub failed: Option<Failure>,
}

/// A sandbox's failure, as its status reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The failure's `reason`.
    pub reason: String,
    /// The failure's `message`.
    pub message: String,
}

/// Figures for tests: how many were created and deleted, and the most ever alive at once.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Sandboxes created.
    pub created: u64,
    /// Sandboxes DELETEd.
    pub deleted: u64,
    /// Sandboxes gone at their expiry.
    pub expired: u64,
    /// Sandboxes alive now.
    pub live: usize,
    /// The most sandboxes ever alive at once.
    pub max_live: usize,
}

/// A list query: states OR'ed, metadata entries AND'ed, 1-based pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// The states wanted (none: any).
    pub states: Vec<String>,
    /// The metadata entries wanted, all of them.
    pub metadata: BTreeMap<String, String>,
    /// The page wanted (1-based; 0 is 1).
    pub page: usize,
    /// Sandboxes a page (0 is 1).
    pub page_size: usize,
}

/// Every sandbox of the double: those alive, and why the others went.
#[derive(Default)]
pub struct Sandboxes {
    next: u64,
    live: BTreeMap<String, SandboxRec>,
    gone: BTreeMap<String, Gone>,
    stats: Stats,
}

/// `t` as RFC 3339 with milliseconds, UTC (how the API writes times).
pub fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl SandboxRec {
    /// The lifecycle state at `now`.
    pub fn state(&self, now: SystemTime) -> &'static str {
        match (&self.failed, now >= self.running_at) {
            (Some(_), _) => "Failed",
            (None, true) => "Running",
            (None, false) => "Pending",
        }
    }

    /// The API's `Sandbox` object (env and resource limits are not part of it).
    pub fn to_api(&self, now: SystemTime) -> Value {
        let mut status = Map::new();
        status.insert("state".into(), self.state(now).into());
        if let Some(f) = &self.failed {
            status.insert("reason".into(), f.reason.clone().into());
            status.insert("message".into(), f.message.clone().into());
        }
        let mut v = serde_json::json!({
            "id": self.id,
            "status": status,
            "metadata": self.metadata,
            "entrypoint": self.entrypoint,
            "image": self.image,
            "createdAt": rfc3339(self.created),
        });
        if let Some(e) = self.expires {
            v["expiresAt"] = rfc3339(e).into();
        }
        v
    }
}

fn string_map(v: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(ApiError::invalid(format!("{field}.{k} must be a string"))),
            })
            .collect(),
        Some(_) => Err(ApiError::invalid(format!("{field} must be an object"))),
    }
}

fn check_labels(metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    label::check_all(metadata)
        .map_err(|e| ApiError::new(400, "INVALID_METADATA_LABEL", e.to_string()))
}

/// The parts of a `CreateSandboxRequest` the double keeps, checked.
fn parse_create(body: &Value) -> Result<SandboxRec, ApiError> {
    let image = body.get("image").cloned().unwrap_or(Value::Null);
    if image
        .get("uri")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::invalid("image.uri is required"));
    }
    let entrypoint: Vec<String> = match body.get("entrypoint") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::invalid("entrypoint must be a list of strings"))?,
        _ => Vec::new(),
    };
    if entrypoint.is_empty() {
        return Err(ApiError::invalid("entrypoint is required with image"));
    }
    let pool = body.pointer("/extensions/poolRef").is_some();
    let limits = body.get("resourceLimits").cloned().unwrap_or(Value::Null);
    if !pool && !limits.is_object() {
        return Err(ApiError::invalid(
            "resourceLimits is required unless extensions.poolRef is set",
        ));
    }
    let timeout = match body.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(t) if t >= 60 => Some(t),
            _ => return Err(ApiError::invalid("timeout must be at least 60 seconds")),
        },
    };
    let metadata = string_map(body.get("metadata"), "metadata")?;
    check_labels(&metadata)?;
    Ok(SandboxRec {
        id: String::new(),
        image,
        entrypoint,
        env: string_map(body.get("env"), "env")?,
        metadata,
        resource_limits: limits,
        timeout,
        created: SystemTime::UNIX_EPOCH,
        running_at: SystemTime::UNIX_EPOCH,
        expires: None,
        failed: None,
    })
}

/// A JSON merge patch (RFC 7396) of string values over `metadata`.
fn merge(
    metadata: &BTreeMap<String, String>,
    patch: &Value,
) -> Result<BTreeMap<String, String>, ApiError> {
    let Value::Object(patch) = patch else {
        return Err(ApiError::invalid("a metadata patch is a JSON object"));
    };
    let mut out = metadata.clone();
    for (k, v) in patch {
        match v {
            Value::Null => {
                out.remove(k);
            }
            Value::String(s) => {
                out.insert(k.clone(), s.clone());
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "metadata.{k} must be a string or null"
                )));
            }
        }
    }
    check_labels(&out)?;
    Ok(out)
}

impl Sandboxes {
    /// Drops the sandboxes whose expiry has passed (the platform deletes them).
    fn expire(&mut self, now: SystemTime) {
        let expired: Vec<String> = self
            .live
            .values()
            .filter(|s| s.expires.is_some_and(|e| e <= now))
            .map(|s| s.id.clone())
            .collect();
        for id in expired {
            self.live.remove(&id);
            self.gone.insert(id, Gone::TtlExpiry);
            self.stats.expired += 1;
        }
    }

    fn live_mut(&mut self, id: &str, now: SystemTime) -> Result<&mut SandboxRec, ApiError> {
        self.expire(now);
        self.live.get_mut(id).ok_or_else(|| ApiError::not_found(id))
    }

    /// Creates a sandbox from a `CreateSandboxRequest` body, Pending for `boot`; answers the API's
    /// `Sandbox`.
    pub fn create(
        &mut self,
        body: &Value,
        boot: Duration,
        now: SystemTime,
    ) -> Result<Value, ApiError> {
        self.expire(now);
        let mut rec = parse_create(body)?;
        self.next += 1;
        rec.id = format!("sbx-{:06}-{:08x}", self.next, rand::random::<u32>());
        rec.created = now;
        rec.running_at = now + boot;
        rec.expires = rec.timeout.map(|t| now + Duration::from_secs(t));
        let out = rec.to_api(now);
        self.live.insert(rec.id.clone(), rec);
        self.stats.created += 1;
        self.stats.max_live = self.stats.max_live.max(self.live.len());
        Ok(out)
    }

    /// Sandbox `id` if it is alive (404 once gone).
    pub fn get(&mut self, id: &str, now: SystemTime) -> Result<SandboxRec, ApiError> {
        self.live_mut(id, now).map(|s| s.clone())
    }

    /// The page of live sandboxes `q` asks for, with the API's pagination.
    pub fn list(&mut self, q: &ListQuery, now: SystemTime) -> Value {
        self.expire(now);
        let matching: Vec<Value> = self
            .live
            .values()
            .filter(|s| q.states.is_empty() || q.states.iter().any(|st| st == s.state(now)))
            .filter(|s| q.metadata.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
            .map(|s| s.to_api(now))
            .collect();
        let size = q.page_size.max(1);
        let page = q.page.max(1);
        let total = matching.len();
        let pages = total.div_ceil(size);
        let items: Vec<Value> = matching
            .into_iter()
            .skip((page - 1) * size)
            .take(size)
            .collect();
        serde_json::json!({
            "items": items,
            "pagination": {
                "page": page,
                "pageSize": size,
                "totalItems": total,
                "totalPages": pages,
                "hasNextPage": page < pages,
            }
        })
    }

    /// Merges `patch` (RFC 7396, string values) into the sandbox's metadata; answers the `Sandbox`.
    pub fn patch_metadata(
        &mut self,
        id: &str,
        patch: &Value,
        now: SystemTime,
    ) -> Result<Value, ApiError> {
        let s = self.live_mut(id, now)?;
        s.metadata = merge(&s.metadata, patch)?;
        Ok(s.to_api(now))
    }

    /// `expiresAt` must parse, be in the future and later than the current expiry.
    pub fn renew(&mut self, id: &str, body: &Value, now: SystemTime) -> Result<Value, ApiError> {
        let s = self.live_mut(id, now)?;
        let at = body
            .get("expiresAt")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .ok_or_else(|| ApiError::invalid("expiresAt must be an RFC 3339 time"))?;
        let at = SystemTime::from(at);
        if at <= now {
            return Err(ApiError::new(
                409,
                "INVALID_EXPIRATION",
                "expiresAt must be in the future",
            ));
        }
        if s.expires.is_some_and(|e| at <= e) {
            return Err(ApiError::new(
                409,
                "INVALID_EXPIRATION",
                "expiresAt must be later than the current expiry",
            ));
        }
        s.expires = Some(at);
        Ok(serde_json::json!({"expiresAt": rfc3339(at)}))
    }

    /// Deletes sandbox `id`: from now on GET answers 404 and list omits it.
    pub fn delete(&mut self, id: &str, now: SystemTime) -> Result<(), ApiError> {
        self.live_mut(id, now)?;
        self.live.remove(id);
        self.gone.insert(id.to_string(), Gone::UserDelete);
        self.stats.deleted += 1;
        Ok(())
    }

    /// A test's fault: the sandbox turns Failed (`runtime_error` unless told otherwise).
    pub fn fail(
        &mut self,
        id: &str,
        reason: Option<String>,
        message: Option<String>,
        now: SystemTime,
    ) -> Result<(), ApiError> {
        let s = self.live_mut(id, now)?;
        s.failed = Some(Failure {
            reason: reason.unwrap_or_else(|| "runtime_error".into()),
            message: message.unwrap_or_else(|| "the sandbox failed (simulated)".into()),
        });
        Ok(())
    }

    /// Every live sandbox, for the admin view.
    pub fn all(&mut self, now: SystemTime) -> Vec<SandboxRec> {
        self.expire(now);
        self.live.values().cloned().collect()
    }

    /// Why sandbox `id` went, if it did.
    pub fn gone(&self, id: &str) -> Option<Gone> {
        self.gone.get(id).copied()
    }

    /// The figures now.
    pub fn stats(&mut self, now: SystemTime) -> Stats {
        self.expire(now);
        Stats {
            live: self.live.len(),
            ..self.stats.clone()
        }
    }
}

#[cfg(test)]
mod tests;
