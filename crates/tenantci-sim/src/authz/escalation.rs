//! Escalation prevention on RBAC writes, as kube-apiserver's RBAC storage
//! (`pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased`,
//! `pkg/registry/rbac/escalation_check.go`, `pkg/registry/rbac/validation/{rule,policy_comparator}.go`):
//!
//! - `system:masters` may write anything.
//! - A Role/ClusterRole write is allowed with verb `escalate` on `roles`/`clusterroles`
//!   (group rbac.authorization.k8s.io, the request's namespace and name), else every rule it
//!   holds must be covered by rules the writer already holds in that namespace; an
//!   `aggregationRule` needs full authority (`*` on everything).
//! - A (Cluster)RoleBinding write is allowed with verb `bind` on the referenced role (name =
//!   the role's name, namespace = the binding's), else the referenced role must exist and its
//!   rules must be covered.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde_json::Value;

use super::quote::{go_quote, go_quote_list};
use super::rbac::{
    RBAC_GROUP, RbacObjects, aggregate, list, non_resource_url_matches, rbac_authorize, rules_for,
};
use super::refusal::forbidden_status_for;
use super::request::{Attributes, ResourceAttributes};
use super::user::UserInfo;

/// Checks a write of `object` (a Role, ClusterRole, RoleBinding or ClusterRoleBinding, by its
/// `kind`) in `namespace` (`None` for cluster-scoped kinds). The request name is taken from the
/// object's `metadata.name`; the server, which knows whether the request named an object, should
/// prefer [`check_escalation_for`]. A body without `kind` (kube-apiserver defaults it from the
/// URL) is taken as a binding when it has a `roleRef`, else as a role when it has `rules` or an
/// `aggregationRule`, namespaced when `namespace` is given. Objects of other kinds pass.
///
/// `Err` holds kube-apiserver's error text (for example `user "u" (groups=["g"]) is attempting
/// to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`);
/// [`escalation_forbidden_status`] wraps it in the 403 Status.
pub fn check_escalation(
    user: &UserInfo,
    namespace: Option<&str>,
    object: &Value,
    rbac: &RbacObjects,
) -> Result<(), String> {
    let Some(resource) = object_resource(object, namespace.is_some()) else {
        return Ok(());
    };
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut attrs = ResourceAttributes::new("create", RBAC_GROUP, resource).name(name);
    attrs.api_version = "v1".into();
    if let Some(ns) = namespace {
        attrs.namespace = ns.to_string();
    }
    check_escalation_for(user, &attrs, object, rbac)
}

/// As [`check_escalation`], with the request's attributes (resource, namespace and the name
/// from the URL, empty for a create) deciding what is written. Requests for resources other
/// than the four RBAC kinds pass.
pub fn check_escalation_for(
    user: &UserInfo,
    request: &ResourceAttributes,
    object: &Value,
    rbac: &RbacObjects,
) -> Result<(), String> {
    if request.api_group != RBAC_GROUP || user.is_privileged() {
        return Ok(());
    }
    let namespace = match request.resource.as_str() {
        "roles" | "rolebindings" => request.namespace.as_str(),
        _ => "",
    };
    match request.resource.as_str() {
        "roles" | "clusterroles" => {
            let escalate = ResourceAttributes {
                verb: "escalate".into(),
                api_version: "*".into(),
                ..request.clone()
            };
            if rbac_authorize(user, &escalate.into(), rbac).allowed {
                return Ok(());
            }
            let (rules, aggregated) = if request.resource == "roles" {
                (parse::<Role>(object, "Role")?.rules, false)
            } else {
                let role = parse::<ClusterRole>(object, "ClusterRole")?;
                (role.rules, role.aggregation_rule.is_some())
            };
            confirm_no_escalation(user, namespace, rules.as_deref().unwrap_or(&[]), rbac)?;
            if aggregated {
                confirm_no_escalation(user, namespace, &full_authority(), rbac).map_err(|_| {
                    "must have cluster-admin privileges to use the aggregationRule".to_string()
                })?;
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = if request.resource == "rolebindings" {
                parse::<RoleBinding>(object, "RoleBinding")?.role_ref
            } else {
                parse::<ClusterRoleBinding>(object, "ClusterRoleBinding")?.role_ref
            };
            let bind_resource = match role_ref.kind.as_str() {
                "ClusterRole" => Some("clusterroles"),
                "Role" => Some("roles"),
                _ => None,
            };
            if let Some(resource) = bind_resource {
                let bind = ResourceAttributes::new(
                    "bind",
                    role_ref.api_group.as_deref().unwrap_or(""),
                    resource,
                )
                .namespace(namespace)
                .name(&role_ref.name);
                if rbac_authorize(user, &Attributes::Resource(bind), rbac).allowed {
                    return Ok(());
                }
            }
            let rules = rbac.role_ref_rules(&role_ref, namespace)?.to_vec();
            confirm_no_escalation(user, namespace, &rules, rbac)
        }
        _ => Ok(()),
    }
}

/// The 403 Status for a refused RBAC write, e.g.
/// `clusterrolebindings.rbac.authorization.k8s.io "x" is forbidden: user "u" (groups=[...]) is
/// attempting to grant RBAC permissions not currently held: ...`. `name` is the object's name.
pub fn escalation_forbidden_status(resource: &str, name: &str, err: &str) -> Value {
    forbidden_status_for(RBAC_GROUP, resource, name, err)
}

fn object_resource(object: &Value, namespaced: bool) -> Option<&'static str> {
    match object.get("kind").and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() => kind_resource(kind),
        _ if object.get("roleRef").is_some() => Some(if namespaced {
            "rolebindings"
        } else {
            "clusterrolebindings"
        }),
        _ if object.get("rules").is_some() || object.get("aggregationRule").is_some() => {
            Some(if namespaced { "roles" } else { "clusterroles" })
        }
        _ => None,
    }
}

fn kind_resource(kind: &str) -> Option<&'static str> {
    match kind {
        "Role" => Some("roles"),
        "ClusterRole" => Some("clusterroles"),
        "RoleBinding" => Some("rolebindings"),
        "ClusterRoleBinding" => Some("clusterrolebindings"),
        _ => None,
    }
}

fn parse<T: serde::de::DeserializeOwned>(object: &Value, kind: &str) -> Result<T, String> {
    serde_json::from_value(object.clone()).map_err(|e| format!("invalid {kind}: {e}"))
}

fn full_authority() -> Vec<PolicyRule> {
    let all = || Some(vec!["*".to_string()]);
    vec![
        PolicyRule {
            verbs: vec!["*".into()],
            api_groups: all(),
            resources: all(),
            ..PolicyRule::default()
        },
        PolicyRule {
            verbs: vec!["*".into()],
            non_resource_urls: all(),
            ..PolicyRule::default()
        },
    ]
}

/// `ConfirmNoEscalation`: every rule in `rules` must be covered by what `user` holds in
/// `namespace`.
fn confirm_no_escalation(
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
    rbac: &RbacObjects,
) -> Result<(), String> {
    let (owner, errors) = rules_for(user, namespace, rbac);
    let missing = uncovered(&owner, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let descriptions: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut msg = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        descriptions.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", aggregate(&errors)));
    }
    Err(msg)
}

/// `Covers`: the broken-down servant rules no owner rule covers.
pub(crate) fn uncovered(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    servant
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// `BreakdownRule`: one rule per (group, resource, verb[, name]) and per (url, verb).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| Some(vec![s.clone()]);
    let mut out = Vec::new();
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    ..PolicyRule::default()
                };
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    out.push(base);
                } else {
                    out.extend(names.iter().map(|n| PolicyRule {
                        resource_names: one(n),
                        ..base.clone()
                    }));
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

fn resource_covers_all(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn non_resource_urls_cover_all(owner: &[String], wanted: &[String]) -> bool {
    wanted
        .iter()
        .all(|path| owner.iter().any(|o| non_resource_url_matches(o, path)))
}

/// `ruleCovers`: whether `owner` covers `sub` (a broken-down rule).
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), "*")
        || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resource_covers_all(list(&owner.resources), list(&sub.resources));
    let urls =
        non_resource_urls_cover_all(list(&owner.non_resource_urls), list(&sub.non_resource_urls));
    let owner_names = list(&owner.resource_names);
    let sub_names = list(&sub.resource_names);
    let names = if sub_names.is_empty() {
        owner_names.is_empty()
    } else {
        owner_names.is_empty() || has_all(owner_names, sub_names)
    };
    verbs && groups && resources && names && urls
}

/// `CompactRules`: merges the verbs of simple rules (one group, one resource, at most one name,
/// no URLs) that name the same thing.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let mut simple: BTreeMap<(String, String, Option<String>), PolicyRule> = BTreeMap::new();
    for rule in rules {
        let groups = list(&rule.api_groups);
        let resources = list(&rule.resources);
        let names = list(&rule.resource_names);
        let is_simple = names.len() <= 1
            && list(&rule.non_resource_urls).is_empty()
            && groups.len() == 1
            && resources.len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        let key = (
            groups[0].clone(),
            resources[0].clone(),
            names.first().cloned(),
        );
        match simple.get_mut(&key) {
            Some(existing) => {
                for verb in rule.verbs {
                    if !existing.verbs.contains(&verb) {
                        existing.verbs.push(verb);
                    }
                }
            }
            None => {
                simple.insert(key, rule);
            }
        }
    }
    out.extend(simple.into_values());
    out
}

/// `rbacv1helpers.CompactString`: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    let mut field = |label: &str, items: &[String]| {
        if !items.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(items)));
        }
    };
    field("APIGroups", list(&rule.api_groups));
    field("Resources", list(&rule.resources));
    field("NonResourceURLs", list(&rule.non_resource_urls));
    field("ResourceNames", list(&rule.resource_names));
    field("Verbs", &rule.verbs);
    format!("{{{}}}", parts.join(", "))
}
