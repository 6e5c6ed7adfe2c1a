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
mod quote;
mod rbac;
mod refusal;
mod request;
mod review;
mod user;

pub use defaults::default_rbac;
pub use escalation::{check_escalation, check_escalation_for, escalation_forbidden_status};
pub use impersonation::{ImpersonationError, impersonate};
pub use rbac::{Decision, RBAC_GROUP, RbacObjects, authorize, rule_allows, rules_for};
pub use refusal::{
    forbidden_status, forbidden_status_for, forbidden_status_with_reason, unauthorized_status,
};
pub use request::{
    Attributes, NonResourceAttributes, RequestInfo, ResourceAttributes, request_info,
};
pub use review::{ReviewKind, evaluate_access_review, review_invalid_status};
pub use user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, SYSTEM_MASTERS, UserInfo};

#[cfg(test)]
mod tests;
