//! SubjectAccessReview and SelfSubjectAccessReview evaluation, as
//! `pkg/registry/authorization/{subjectaccessreview,selfsubjectaccessreview}/rest.go`.

use serde_json::{Map, Value, json};

use super::rbac::{RbacObjects, authorize};
use super::request::Attributes;
use super::user::UserInfo;

/// Which review a body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewKind {
    /// Evaluates `spec.user` / `spec.groups` exactly as given (no group added).
    SubjectAccessReview,
    /// Evaluates the caller (after impersonation).
    SelfSubjectAccessReview,
}

impl ReviewKind {
    /// The review's `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            ReviewKind::SubjectAccessReview => "SubjectAccessReview",
            ReviewKind::SelfSubjectAccessReview => "SelfSubjectAccessReview",
        }
    }

    /// The plural resource name.
    pub fn resource(self) -> &'static str {
        match self {
            ReviewKind::SubjectAccessReview => "subjectaccessreviews",
            ReviewKind::SelfSubjectAccessReview => "selfsubjectaccessreviews",
        }
    }
}

/// Evaluates a review body (JSON, or what [`super::proto::decode_access_review`] returned) and
/// returns it with `kind`, `apiVersion` and `status {allowed, reason?}` filled (`denied` is never
/// set: RBAC has no explicit deny). `Err` is the validation error (kube-apiserver answers 422;
/// see [`review_invalid_status`]).
pub fn evaluate_access_review(
    kind: ReviewKind,
    body: &Value,
    caller: &UserInfo,
    rbac: &RbacObjects,
) -> Result<Value, String> {
    let Some(object) = body.as_object() else {
        return Err("body: expected an object".to_string());
    };
    let spec = object
        .get("spec")
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    if !spec.is_object() {
        return Err("spec: expected an object".to_string());
    }
    let attrs = Attributes::from_review_spec(&spec)?;
    let user = match kind {
        ReviewKind::SelfSubjectAccessReview => caller.clone(),
        ReviewKind::SubjectAccessReview => {
            let name = spec
                .get("user")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let groups: Vec<String> = match spec.get("groups") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|g| {
                        g.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| "spec.groups: expected strings".to_string())
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("spec.groups: expected a list".to_string()),
            };
            if name.is_empty() && groups.is_empty() {
                return Err(
                    "spec.user: Invalid value: \"\": at least one of user or group must be specified"
                        .to_string(),
                );
            }
            UserInfo { name, groups }
        }
    };
    let decision = authorize(&user, &attrs, rbac);
    let mut out = object.clone();
    out.insert("kind".into(), Value::String(kind.kind().into()));
    out.insert(
        "apiVersion".into(),
        Value::String("authorization.k8s.io/v1".into()),
    );
    out.entry("metadata").or_insert_with(|| json!({}));
    out.insert("spec".into(), spec);
    let mut status = Map::new();
    status.insert("allowed".into(), Value::Bool(decision.allowed));
    if !decision.reason.is_empty() {
        status.insert("reason".into(), Value::String(decision.reason));
    }
    out.insert("status".into(), Value::Object(status));
    Ok(Value::Object(out))
}

/// The 422 Status for a review [`evaluate_access_review`] refused with `err`
/// (`<field>: <message>`), as `apierrors.NewInvalid`.
pub fn review_invalid_status(kind: ReviewKind, err: &str) -> Value {
    let mut cause = Map::new();
    cause.insert("reason".into(), Value::String("FieldValueInvalid".into()));
    match err.split_once(": ") {
        Some((field, message)) if field.starts_with("spec") && !field.contains(' ') => {
            cause.insert("message".into(), Value::String(message.into()));
            cause.insert("field".into(), Value::String(field.into()));
        }
        _ => {
            cause.insert("message".into(), Value::String(err.into()));
        }
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{}.authorization.k8s.io \"\" is invalid: {err}", kind.kind()),
        "reason": "Invalid",
        "details": {
            "group": "authorization.k8s.io",
            "kind": kind.kind(),
            "causes": [cause]
        },
        "code": 422
    })
}
