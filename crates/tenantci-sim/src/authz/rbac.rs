//! The RBAC authorizer: rule matching as `pkg/apis/rbac/v1/evaluation_helpers.go`, rule
//! resolution as `pkg/registry/rbac/validation/rule.go` (`VisitRulesFor`), decisions as
//! `plugin/pkg/auth/authorizer/rbac/rbac.go`.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use super::quote::go_quote as q;
use super::request::Attributes;
use super::user::UserInfo;

/// The API group of the RBAC kinds.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The outcome of [`authorize`]. `reason` is what kube-apiserver reports: on allow the binding
/// that granted it (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to Group "z"`,
/// empty for `system:masters`); on deny empty unless a binding referenced a missing role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// What kube-apiserver reports as the decision's reason.
    pub reason: String,
}

/// A snapshot of the stored RBAC objects. Namespaced objects must carry
/// `metadata.namespace`.
#[derive(Clone, Debug, Default)]
pub struct RbacObjects {
    /// Roles (namespaced).
    pub roles: Vec<Role>,
    /// ClusterRoles.
    pub cluster_roles: Vec<ClusterRole>,
    /// RoleBindings (namespaced).
    pub role_bindings: Vec<RoleBinding>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

impl RbacObjects {
    /// Adds every object of `other` (used to layer stored objects over [`super::default_rbac`]).
    pub fn extend(&mut self, other: RbacObjects) {
        self.roles.extend(other.roles);
        self.cluster_roles.extend(other.cluster_roles);
        self.role_bindings.extend(other.role_bindings);
        self.cluster_role_bindings
            .extend(other.cluster_role_bindings);
    }

    fn role(&self, namespace: &str, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| {
            r.metadata.name.as_deref() == Some(name)
                && r.metadata.namespace.as_deref().unwrap_or("") == namespace
        })
    }

    fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
    }

    /// The rules a role reference grants when bound in `namespace` (`""` for a
    /// ClusterRoleBinding), or the error kube-apiserver's resolver reports.
    pub fn role_ref_rules(
        &self,
        role_ref: &RoleRef,
        namespace: &str,
    ) -> Result<&[PolicyRule], String> {
        match role_ref.kind.as_str() {
            "Role" => self
                .role(namespace, &role_ref.name)
                .map(|r| r.rules.as_deref().unwrap_or(&[]))
                .ok_or_else(|| {
                    format!(
                        "role.rbac.authorization.k8s.io {} not found",
                        q(&role_ref.name)
                    )
                }),
            "ClusterRole" => self
                .cluster_role(&role_ref.name)
                .map(|r| r.rules.as_deref().unwrap_or(&[]))
                .ok_or_else(|| {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io {} not found",
                        q(&role_ref.name)
                    )
                }),
            other => Err(format!("unsupported role reference kind: {}", q(other))),
        }
    }
}

pub(crate) fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or(&[])
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups)
        .iter()
        .any(|g| g == "*" || g == group)
}

fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || names.iter().any(|n| n == name)
}

/// `nonResourceURLs`: `*`, exact, or a prefix ending in `*`.
pub(crate) fn non_resource_url_matches(rule_url: &str, path: &str) -> bool {
    rule_url == "*"
        || rule_url == path
        || (rule_url.ends_with('*') && path.starts_with(rule_url.trim_end_matches('*')))
}

/// Whether one rule allows the request (`RuleAllows`).
pub fn rule_allows(attrs: &Attributes, rule: &PolicyRule) -> bool {
    match attrs {
        Attributes::Resource(r) => {
            let combined = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            verb_matches(rule, &r.verb)
                && api_group_matches(rule, &r.api_group)
                && resource_matches(rule, &combined, &r.subresource)
                && resource_name_matches(rule, &r.name)
        }
        Attributes::NonResource(n) => {
            verb_matches(rule, &n.verb)
                && list(&rule.non_resource_urls)
                    .iter()
                    .any(|u| non_resource_url_matches(u, &n.path))
        }
    }
}

fn is_service_account(user: &str, namespace: &str, name: &str) -> bool {
    user.strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.strip_prefix(namespace))
        .and_then(|rest| rest.strip_prefix(':'))
        == Some(name)
}

fn applies_to(user: &UserInfo, subject: &Subject, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.in_group(&subject.name),
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            !ns.is_empty() && is_service_account(&user.name, ns, &subject.name)
        }
        _ => false,
    }
}

fn first_applying<'a>(
    user: &UserInfo,
    subjects: &'a Option<Vec<Subject>>,
    binding_namespace: &str,
) -> Option<&'a Subject> {
    subjects
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .find(|s| applies_to(user, s, binding_namespace))
}

fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    if s.kind == "ServiceAccount" {
        let ns = s
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_namespace);
        format!("{} {}", s.kind, q(&format!("{}/{}", s.name, ns)))
    } else {
        format!("{} {}", s.kind, q(&s.name))
    }
}

/// Calls `visit(source, rule)` for every rule granted to `user` in `namespace` (ClusterRoleBindings
/// first, then the namespace's RoleBindings) until it returns false. Resolution errors (a
/// binding to a missing role) are collected and returned.
fn visit_rules(
    user: &UserInfo,
    namespace: &str,
    rbac: &RbacObjects,
    mut visit: impl FnMut(&dyn Fn() -> String, &PolicyRule) -> bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    for crb in &rbac.cluster_role_bindings {
        let Some(subject) = first_applying(user, &crb.subjects, "") else {
            continue;
        };
        match rbac.role_ref_rules(&crb.role_ref, "") {
            Err(e) => errors.push(e),
            Ok(rules) => {
                let source = || {
                    format!(
                        "ClusterRoleBinding {} of {} {} to {}",
                        q(crb.metadata.name.as_deref().unwrap_or("")),
                        crb.role_ref.kind,
                        q(&crb.role_ref.name),
                        describe_subject(subject, "")
                    )
                };
                for rule in rules {
                    if !visit(&source, rule) {
                        return errors;
                    }
                }
            }
        }
    }
    if namespace.is_empty() {
        return errors;
    }
    for rb in &rbac.role_bindings {
        if rb.metadata.namespace.as_deref().unwrap_or("") != namespace {
            continue;
        }
        let Some(subject) = first_applying(user, &rb.subjects, namespace) else {
            continue;
        };
        match rbac.role_ref_rules(&rb.role_ref, namespace) {
            Err(e) => errors.push(e),
            Ok(rules) => {
                let source = || {
                    format!(
                        "RoleBinding {} of {} {} to {}",
                        q(&format!(
                            "{}/{}",
                            rb.metadata.name.as_deref().unwrap_or(""),
                            namespace
                        )),
                        rb.role_ref.kind,
                        q(&rb.role_ref.name),
                        describe_subject(subject, namespace)
                    )
                };
                for rule in rules {
                    if !visit(&source, rule) {
                        return errors;
                    }
                }
            }
        }
    }
    errors
}

/// Every rule granted to `user` in `namespace` (`""` = cluster-wide bindings only), plus the
/// resolution errors (`RulesFor`).
pub fn rules_for(
    user: &UserInfo,
    namespace: &str,
    rbac: &RbacObjects,
) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules = Vec::new();
    let errors = visit_rules(user, namespace, rbac, |_, rule| {
        rules.push(rule.clone());
        true
    });
    (rules, errors)
}

/// The RBAC authorizer alone (no `system:masters` short cut).
pub(crate) fn rbac_authorize(user: &UserInfo, attrs: &Attributes, rbac: &RbacObjects) -> Decision {
    let mut allowed_by = None;
    let errors = visit_rules(user, attrs.namespace(), rbac, |source, rule| {
        if rule_allows(attrs, rule) {
            allowed_by = Some(source());
            false
        } else {
            true
        }
    });
    match allowed_by {
        Some(source) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {source}"),
        },
        None => Decision {
            allowed: false,
            reason: if errors.is_empty() {
                String::new()
            } else {
                format!("RBAC: {}", aggregate(&errors))
            },
        },
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is, several as `[a, b]`.
pub(crate) fn aggregate(errors: &[String]) -> String {
    let mut unique: Vec<&String> = Vec::new();
    for e in errors {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        unique[0].clone()
    } else {
        format!(
            "[{}]",
            unique
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// kube-apiserver's authorizer chain as the simulator runs it: members of `system:masters` are
/// allowed (reason empty) before RBAC; everyone else is allowed only by an RBAC rule.
pub fn authorize(user: &UserInfo, attrs: &Attributes, rbac: &RbacObjects) -> Decision {
    if user.is_privileged() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    rbac_authorize(user, attrs, rbac)
}
