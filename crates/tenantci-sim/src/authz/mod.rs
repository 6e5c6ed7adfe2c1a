//! The simulator's authorization layer: what kube-apiserver does between authentication and
//! the storage, as pure functions over the stored RBAC objects.
//!
//! - [`request_info`] parses a request line the way kube-apiserver's `RequestInfoFactory` does;
//!   [`Attributes`] is what the authorizer sees (also built from access-review specs).
//! - [`authorize`] is the `system:masters` short cut followed by the RBAC authorizer
//!   (`plugin/pkg/auth/authorizer/rbac`): deny by default, ClusterRoleBindings everywhere,
//!   RoleBindings only in their namespace.
//! - [`check_escalation`] is the RBAC storage's escalation prevention (`escalate`, `bind`).
//! - [`impersonate`] is the `Impersonate-*` header filter.
//! - [`evaluate_access_review`] answers (Self)SubjectAccessReviews; [`proto`] reads the
//!   protobuf envelope kubectl sends them in.
//! - [`forbidden_status`] / [`unauthorized_status`] are the Status bodies kube-apiserver writes.
//!
//! Boundary: no I/O, no HTTP serving, no storage; the caller passes a snapshot of the RBAC
//! objects ([`RbacObjects`]) and turns the results into responses. Aggregated ClusterRoles are
//! evaluated with the rules they hold (no aggregation controller runs); see
//! docs/simulator-authz.md for what else is left out.

mod defaults;
mod escalation;
mod impersonation;
pub mod proto;
mod rbac;
mod request;
mod review;
mod status;

pub use defaults::default_rbac;
pub use escalation::{check_escalation, check_escalation_for, escalation_forbidden_status};
pub use impersonation::{ImpersonationError, impersonate};
pub use rbac::{RbacObjects, authorize, rule_allows, rules_for};
pub use request::{
    Attributes, NonResourceAttributes, RequestInfo, ResourceAttributes, request_info,
};
pub use review::{ReviewKind, evaluate_access_review, review_invalid_status};
pub use status::{
    forbidden_status, forbidden_status_for, forbidden_status_with_reason, unauthorized_status,
};

/// The group every authenticated user carries.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The anonymous user's name.
pub const ANONYMOUS: &str = "system:anonymous";
/// Members are allowed everything before RBAC runs (and may escalate).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The API group of the RBAC kinds.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Who is asking, as the authenticator (or impersonation) established it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user exactly as given (no group added): what a SubjectAccessReview evaluates.
    pub fn new(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.into_iter().map(Into::into).collect(),
        }
    }

    /// An authenticated user: the given groups plus `system:authenticated` (once).
    pub fn authenticated(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let mut user = UserInfo::new(name, groups);
        if !user.in_group(ALL_AUTHENTICATED) {
            user.groups.push(ALL_AUTHENTICATED.to_string());
        }
        user
    }

    /// The user of a request without credentials.
    pub fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Members of `system:masters` bypass authorization and escalation checks.
    pub fn is_privileged(&self) -> bool {
        self.in_group(SYSTEM_MASTERS)
    }
}

/// The outcome of [`authorize`]. `reason` is what kube-apiserver reports: on allow the binding
/// that granted it (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to Group "z"`,
/// empty for `system:masters`); on deny empty unless a binding referenced a missing role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

#[cfg(test)]
mod tests;

/// Go's `%q` for a string (`strconv.Quote`): the messages kube-apiserver writes use it.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                if (c as u32) < 0x80 {
                    out.push_str(&format!("\\x{:02x}", c as u32));
                } else if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` for a `[]string`: `["a" "b"]`.
pub(crate) fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}
