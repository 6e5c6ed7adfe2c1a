//! The `Impersonate-*` headers, as kube-apiserver's `WithImpersonation` filter
//! (k8s.io/apiserver/pkg/endpoints/filters/impersonation.go).
//!
//! Each requested value is authorized separately with verb `impersonate`: `users` (core group,
//! name = the user), `serviceaccounts` (namespace and name of a `system:serviceaccount:ns:n`
//! user), `groups` (core group), `userextras/<key>` and `uids` (authentication.k8s.io). The
//! first refusal is a 403. Groups, extras or a UID without a user are a server error, as in
//! kube-apiserver (client-go refuses to send them).

use std::fmt;

use serde_json::{Value, json};

use super::rbac::{RbacObjects, authorize};
use super::refusal::forbidden_status_with_reason;
use super::request::{Attributes, ResourceAttributes};
use super::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo};
use crate::validate::{is_dns1123_label, is_dns1123_subdomain};

pub const IMPERSONATE_USER: &str = "impersonate-user";
pub const IMPERSONATE_GROUP: &str = "impersonate-group";
pub const IMPERSONATE_UID: &str = "impersonate-uid";
pub const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

/// A refused impersonation: `code` is the HTTP status and `status` the Status body to send
/// (403 Forbidden naming the refused value, or 500 for groups without a user).
#[derive(Clone, Debug, PartialEq)]
pub struct ImpersonationError {
    /// The HTTP status to answer.
    pub code: u16,
    /// The Status body to answer with.
    pub status: Value,
}

impl fmt::Display for ImpersonationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = self
            .status
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("");
        write!(f, "impersonation refused ({}): {msg}", self.code)
    }
}

impl std::error::Error for ImpersonationError {}

enum Request {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Request {
    fn describe(&self) -> String {
        match self {
            Request::User(n) => format!("{{User  {n}    }}"),
            Request::ServiceAccount { namespace, name } => {
                format!("{{ServiceAccount {namespace} {name}    }}")
            }
            Request::Group(n) => format!("{{Group  {n}    }}"),
            Request::Extra { key, value } => {
                format!("{{UserExtra  {value}  authentication.k8s.io/v1  {key}}}")
            }
            Request::Uid(u) => format!("{{UID  {u}  authentication.k8s.io/v1  }}"),
        }
    }

    fn attributes(&self) -> ResourceAttributes {
        const AUTHN: &str = "authentication.k8s.io";
        let (group, version, resource, namespace, name, sub) = match self {
            Request::User(n) => ("", "", "users", "", n.as_str(), ""),
            Request::ServiceAccount { namespace, name } => (
                "",
                "",
                "serviceaccounts",
                namespace.as_str(),
                name.as_str(),
                "",
            ),
            Request::Group(n) => ("", "", "groups", "", n.as_str(), ""),
            Request::Extra { key, value } => {
                (AUTHN, "v1", "userextras", "", value.as_str(), key.as_str())
            }
            Request::Uid(u) => (AUTHN, "v1", "uids", "", u.as_str(), ""),
        };
        ResourceAttributes {
            verb: "impersonate".into(),
            api_group: group.into(),
            api_version: version.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// Applies the `Impersonate-*` headers of a request made by `user`. Without such headers the
/// user is returned unchanged. The impersonated user gets exactly the requested groups (a
/// service account without requested groups gets its fixed groups) plus `system:authenticated`
/// (or `system:unauthenticated` for `system:anonymous`), unless already present. Extras and the
/// UID are authorized but not carried ([`UserInfo`] has no place for them).
pub fn impersonate(
    user: &UserInfo,
    headers: &http::HeaderMap,
    rbac: &RbacObjects,
) -> Result<UserInfo, ImpersonationError> {
    let requests = requests(headers)?;
    if requests.is_empty() {
        return Ok(user.clone());
    }
    let groups_specified = headers.get_all(IMPERSONATE_GROUP).iter().next().is_some();
    let mut name = String::new();
    let mut groups: Vec<String> = Vec::new();
    for request in &requests {
        match request {
            Request::User(n) => name = n.clone(),
            Request::ServiceAccount { namespace, name: n } => {
                name = format!("system:serviceaccount:{namespace}:{n}");
                if !groups_specified {
                    groups = vec![
                        "system:serviceaccounts".to_string(),
                        format!("system:serviceaccounts:{namespace}"),
                    ];
                }
            }
            Request::Group(g) => groups.push(g.clone()),
            Request::Extra { .. } | Request::Uid(_) => {}
        }
        let attrs = Attributes::Resource(request.attributes());
        let decision = authorize(user, &attrs, rbac);
        if !decision.allowed {
            return Err(ImpersonationError {
                code: 403,
                status: forbidden_status_with_reason(user, &attrs, &decision.reason),
            });
        }
    }
    if name != ANONYMOUS {
        if !groups
            .iter()
            .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
        {
            groups.push(ALL_AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == ALL_UNAUTHENTICATED) {
        groups.push(ALL_UNAUTHENTICATED.to_string());
    }
    Ok(UserInfo { name, groups })
}

fn header_values(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// `buildImpersonationRequests`: user, then groups, then extras, then the UID.
fn requests(headers: &http::HeaderMap) -> Result<Vec<Request>, ImpersonationError> {
    let mut out = Vec::new();
    let requested_user = header_values(headers, IMPERSONATE_USER)
        .into_iter()
        .next()
        .unwrap_or_default();
    let has_user = !requested_user.is_empty();
    if has_user {
        out.push(match split_service_account(&requested_user) {
            Some((namespace, name)) => Request::ServiceAccount { namespace, name },
            None => Request::User(requested_user),
        });
    }
    let mut others = false;
    for group in header_values(headers, IMPERSONATE_GROUP) {
        others = true;
        out.push(Request::Group(group));
    }
    let mut extra_names: Vec<&http::HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(IMPERSONATE_EXTRA_PREFIX))
        .collect();
    extra_names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    for header in extra_names {
        others = true;
        let key = unescape_extra_key(&header.as_str()[IMPERSONATE_EXTRA_PREFIX.len()..]);
        for value in header_values(headers, header.as_str()) {
            out.push(Request::Extra {
                key: key.clone(),
                value,
            });
        }
    }
    let uid = header_values(headers, IMPERSONATE_UID)
        .into_iter()
        .next()
        .unwrap_or_default();
    if !uid.is_empty() {
        others = true;
        out.push(Request::Uid(uid));
    }
    if others && !has_user {
        let described: Vec<String> = out.iter().map(Request::describe).collect();
        let message = format!(
            "requested [{}] without impersonating a user",
            described.join(" ")
        );
        return Err(ImpersonationError {
            code: 500,
            status: json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {message}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": message}]},
                "code": 500
            }),
        });
    }
    Ok(out)
}

/// `url.PathUnescape` of the lower-cased key; a malformed escape leaves the key as it is.
fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// `serviceaccount.SplitUsername`: `system:serviceaccount:<namespace>:<name>` with a valid
/// namespace (DNS-1123 label) and name (DNS-1123 subdomain).
fn split_service_account(user: &str) -> Option<(String, String)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let parts: Vec<&str> = rest.split(':').collect();
    let [namespace, name] = parts.as_slice() else {
        return None;
    };
    (is_dns1123_label(namespace) && is_dns1123_subdomain(name))
        .then(|| (namespace.to_string(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::split_service_account;

    /// The namespace is a DNS-1123 label (63 at most), the name a DNS-1123 subdomain: 253 at
    /// most in all, but a label inside it may be longer than 63.
    #[test]
    fn service_account_names_split_as_kube_apiserver_splits_them() {
        let split = |ns: &str, name: &str| {
            split_service_account(&format!("system:serviceaccount:{ns}:{name}"))
        };
        let long_label = format!("{}.b", "a".repeat(64));
        assert_eq!(
            split("ci", &long_label),
            Some(("ci".into(), long_label.clone()))
        );
        assert!(split(&"n".repeat(63), "a").is_some());
        assert!(split(&"n".repeat(64), "a").is_none());
        assert!(split("ci", &"a".repeat(253)).is_some());
        assert!(split("ci", &"a".repeat(254)).is_none());
        for (ns, name) in [
            ("Ci", "a"),
            ("ci", "A"),
            ("ci", ""),
            ("", "a"),
            ("ci", "a."),
            ("c.i", "a"),
        ] {
            assert!(split(ns, name).is_none(), "{ns:?} {name:?}");
        }
        assert!(split_service_account("system:serviceaccount:ci:a:b").is_none());
    }
}
