//! `Status` bodies exactly as kube-apiserver writes them, and the error type every handler
//! returns. One constructor per reason, so messages stay in kube-apiserver's wording.

use serde_json::{Value, json};

/// A failed API request: HTTP code plus the `Status` body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub code: u16,
    /// The `Status` body.
    pub body: Value,
}

/// A handler's result: its value, or the Status to answer.
pub type ApiResult<T> = Result<T, ApiError>;

/// Names a resource in messages: `pods`, `deployments.apps`.
#[derive(Debug, Clone, Copy)]
pub struct GroupResource<'a> {
    /// The API group (empty: the core group).
    pub group: &'a str,
    /// The plural resource name.
    pub resource: &'a str,
}

impl std::fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

fn details(gr: GroupResource<'_>, name: &str) -> Value {
    let mut d = json!({});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !gr.group.is_empty() {
        d["group"] = json!(gr.group);
    }
    d["kind"] = json!(gr.resource);
    d
}

impl ApiError {
    /// A Failure `Status` with `code`, `reason`, `message` and, when given, `details`.
    pub fn new(
        code: u16,
        reason: &str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message.into(),
            "reason": reason,
        });
        if let Some(d) = details {
            body["details"] = d;
        }
        body["code"] = json!(code);
        ApiError { code, body }
    }

    /// Wraps a Status body produced elsewhere (the authorizer's 403).
    pub fn from_status(body: Value) -> Self {
        let code = body["code"].as_u64().unwrap_or(500) as u16;
        ApiError { code, body }
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized", None)
    }

    /// 400 BadRequest with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// 404 NotFound: `<resource> "<name>" not found`.
    pub fn not_found(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{gr} \"{name}\" not found"),
            Some(details(gr, name)),
        )
    }

    /// An unknown path or resource.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        )
    }

    /// 409 AlreadyExists: `<resource> "<name>" already exists`.
    pub fn already_exists(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{gr} \"{name}\" already exists"),
            Some(details(gr, name)),
        )
    }

    /// 409 Conflict: `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} \"{name}\": {why}"),
            Some(details(gr, name)),
        )
    }

    /// 409 Conflict for a write against an older resourceVersion.
    pub fn modified(gr: GroupResource<'_>, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one field cause; `kind` is the object kind (`Pod`).
    pub fn invalid(
        kind: &str,
        group: &str,
        name: &str,
        field: &str,
        cause_reason: &str,
        detail: &str,
    ) -> Self {
        let mut d = json!({"name": name});
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        d["kind"] = json!(kind);
        d["causes"] = json!([{"reason": cause_reason, "message": detail, "field": field}]);
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {field}: {detail}"),
            Some(d),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        )
    }

    /// 415 UnsupportedMediaType, naming the content type received.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"
            ),
            None,
        )
    }

    /// 410 Expired (a watch from a version no longer kept).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message, None)
    }

    /// 500 InternalError with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message, None)
    }
}
