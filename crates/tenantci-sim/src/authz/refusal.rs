//! The 401 and 403 Status bodies kube-apiserver writes
//! (`responsewriters.Forbidden`, `apierrors.NewForbidden`).

use serde_json::{Value, json};

use super::quote::go_quote as q;
use super::request::Attributes;
use super::user::UserInfo;

/// The body of a 401 (no valid credentials).
pub fn unauthorized_status() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401
    })
}

/// `responsewriters.forbiddenMessage`: who cannot do what, where.
fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    match attrs {
        Attributes::NonResource(n) => {
            format!(
                "User {} cannot {} path {}",
                q(&user.name),
                n.verb,
                q(&n.path)
            )
        }
        Attributes::Resource(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            if r.namespace.is_empty() {
                format!(
                    "User {} cannot {} resource {} in API group {} at the cluster scope",
                    q(&user.name),
                    r.verb,
                    q(&resource),
                    q(&r.api_group)
                )
            } else {
                format!(
                    "User {} cannot {} resource {} in API group {} in the namespace {}",
                    q(&user.name),
                    r.verb,
                    q(&resource),
                    q(&r.api_group),
                    q(&r.namespace)
                )
            }
        }
    }
}

/// The 403 body for a request the authorizer did not allow, e.g.
/// `pods "p" is forbidden: User "u" cannot get resource "pods" in API group "" in the namespace "ns"`.
pub fn forbidden_status(user: &UserInfo, attrs: &Attributes) -> Value {
    forbidden_status_with_reason(user, attrs, "")
}

/// As [`forbidden_status`], with the authorizer's reason appended (`...: <reason>`) when it is
/// not empty, as kube-apiserver does.
pub fn forbidden_status_with_reason(user: &UserInfo, attrs: &Attributes, reason: &str) -> Value {
    let msg = sanitize(&forbidden_message(user, attrs));
    let err = if reason.is_empty() {
        msg
    } else {
        format!("{msg}: {reason}")
    };
    match attrs {
        Attributes::Resource(r) => forbidden_status_for(&r.api_group, &r.resource, &r.name, &err),
        Attributes::NonResource(_) => forbidden_status_for("", "", "", &err),
    }
}

/// `apierrors.NewForbidden(GroupResource{group, resource}, name, err)` as a Status body.
pub fn forbidden_status_for(group: &str, resource: &str, name: &str, err: &str) -> Value {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let message = if group.is_empty() && resource.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} {} is forbidden: {err}", q(name))
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), Value::String(name.into()));
    }
    if !group.is_empty() {
        details.insert("group".into(), Value::String(group.into()));
    }
    if !resource.is_empty() {
        details.insert("kind".into(), Value::String(resource.into()));
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403
    })
}

/// The HTML-escaping kube-apiserver applies to the forbidden message.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
