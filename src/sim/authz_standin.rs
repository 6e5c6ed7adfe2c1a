//! STAND-IN for `sim::authz` (owned by the `rbac` branch), mirroring its interface so the
//! server builds before that branch merges. Deliberately minimal: system:masters and every
//! authenticated user are allowed, anonymous users only non-resource paths. Deleted on merge.
#![allow(dead_code)]

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NonResourceAttributes {
    pub verb: String,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attributes {
    Resource(ResourceAttributes),
    NonResource(NonResourceAttributes),
}

#[derive(Debug, Clone)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct RbacObjects {
    pub roles: Vec<Role>,
    pub cluster_roles: Vec<ClusterRole>,
    pub role_bindings: Vec<RoleBinding>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

#[derive(Debug)]
pub struct ImpersonationError {
    pub code: u16,
    pub status: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewKind {
    SubjectAccessReview,
    SelfSubjectAccessReview,
}

impl ReviewKind {
    pub fn kind(self) -> &'static str {
        match self {
            ReviewKind::SubjectAccessReview => "SubjectAccessReview",
            ReviewKind::SelfSubjectAccessReview => "SelfSubjectAccessReview",
        }
    }
}

pub fn authorize(user: &UserInfo, attrs: &Attributes, _rbac: &RbacObjects) -> Decision {
    let allowed = user.groups.iter().any(|g| g == "system:authenticated")
        || matches!(attrs, Attributes::NonResource(_));
    Decision { allowed, reason: String::new() }
}

pub fn check_escalation(_user: &UserInfo, _namespace: Option<&str>, _object: &Value, _rbac: &RbacObjects) -> Result<(), String> {
    Ok(())
}

fn status(code: u16, reason: &str, message: String) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "details": {}, "code": code})
}

pub fn escalation_forbidden_status(resource: &str, name: &str, err: &str) -> Value {
    status(403, "Forbidden", format!("{resource}.rbac.authorization.k8s.io \"{name}\" is forbidden: {err}"))
}

pub fn impersonate(user: &UserInfo, headers: &http::HeaderMap, _rbac: &RbacObjects) -> Result<UserInfo, ImpersonationError> {
    let Some(name) = headers.get("impersonate-user").and_then(|v| v.to_str().ok()) else {
        return Ok(user.clone());
    };
    let mut groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    groups.push("system:authenticated".into());
    Ok(UserInfo { name: name.to_string(), groups })
}

pub fn forbidden_status(user: &UserInfo, attrs: &Attributes) -> Value {
    status(403, "Forbidden", format!("forbidden: User \"{}\" cannot {attrs:?}", user.name))
}

pub fn evaluate_access_review(kind: ReviewKind, body: &Value, caller: &UserInfo, rbac: &RbacObjects) -> Result<Value, String> {
    let _ = (kind, rbac);
    let mut out = body.clone();
    out["status"] = json!({"allowed": caller.groups.iter().any(|g| g == "system:authenticated")});
    Ok(out)
}

pub fn review_invalid_status(kind: ReviewKind, err: &str) -> Value {
    status(422, "Invalid", format!("{}.authorization.k8s.io \"\" is invalid: {err}", kind.kind()))
}

pub fn default_rbac() -> RbacObjects {
    RbacObjects::default()
}

pub mod proto {
    pub fn decode_access_review(_body: &[u8]) -> Result<serde_json::Value, String> {
        Err("protobuf access reviews need the rbac branch".into())
    }
}
