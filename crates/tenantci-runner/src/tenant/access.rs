//! Access reviews: whether an identity may do one thing (a verb on a resource in a scope), asked
//! of the apiserver either for a named user and groups with an admin client
//! (SubjectAccessReview) or for the credential a client holds (SelfSubjectAccessReview).
//!
//! The accesses are data, kept by their owners (`tenant::verify` for the GitLab runner,
//! `provision::access` in tenantci-dispatch for the dispatcher); this module asks and compares.
//! It does not word a failure: what a missing or excess access means, and how to fix it, is the
//! owner's.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde::Serialize;

/// Where an access is reviewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The namespace the review is about (the runner's or the dispatcher's).
    Reviewed,
    /// A fixed namespace, e.g. `kube-system`.
    Namespace(&'static str),
    /// A namespaced resource in every namespace.
    AllNamespaces,
    /// A cluster-scoped resource.
    Cluster,
}

/// One access to review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Access {
    /// The verb, e.g. `create`, `list`.
    pub verb: &'static str,
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The resource, plural, e.g. `pods`.
    pub resource: &'static str,
    /// The subresource, e.g. `exec`; `None` for the resource itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<&'static str>,
    /// Reported as the result's resolved `namespace`.
    #[serde(skip)]
    pub scope: Scope,
}

impl Access {
    /// `verb` on `resource` of API `group` ("" is core) in the reviewed namespace.
    pub const fn new(verb: &'static str, group: &'static str, resource: &'static str) -> Access {
        Access {
            verb,
            group,
            resource,
            subresource: None,
            scope: Scope::Reviewed,
        }
    }

    /// This access on `subresource` (e.g. `exec`, `log`).
    pub const fn sub(self, subresource: &'static str) -> Access {
        Access {
            subresource: Some(subresource),
            ..self
        }
    }

    /// This access reviewed in `scope` instead of the reviewed namespace.
    pub const fn scope(self, scope: Scope) -> Access {
        Access { scope, ..self }
    }

    /// The review's namespace attribute; empty is all namespaces or the cluster scope.
    pub fn namespace_in(&self, reviewed: &str) -> String {
        match self.scope {
            Scope::Reviewed => reviewed.to_string(),
            Scope::Namespace(ns) => ns.to_string(),
            Scope::AllNamespaces | Scope::Cluster => String::new(),
        }
    }

    fn attributes(&self, namespace: &str) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.into()),
            group: Some(self.group.into()),
            resource: Some(self.resource.into()),
            subresource: self.subresource.map(str::to_string),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            ..Default::default()
        }
    }
}

/// The accesses that must be allowed, then those that must be denied, each with its expectation.
pub fn checks(
    allow: impl IntoIterator<Item = Access>,
    deny: impl IntoIterator<Item = Access>,
) -> Vec<(Access, bool)> {
    allow
        .into_iter()
        .map(|a| (a, true))
        .chain(deny.into_iter().map(|a| (a, false)))
        .collect()
}

/// The outcome of one review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewResult {
    /// What was reviewed.
    #[serde(flatten)]
    pub access: Access,
    /// The namespace reviewed; empty: all namespaces or the cluster scope.
    pub namespace: String,
    /// The apiserver's answer.
    pub allowed: bool,
    /// The owner's expectation: true when it must be allowed, false when it must be denied.
    pub expected: bool,
}

impl ReviewResult {
    /// E.g. `create pods/exec in namespace ci`, `list secrets in all namespaces`.
    pub fn describe(&self) -> String {
        let a = &self.access;
        let sub = a.subresource.map(|s| format!("/{s}")).unwrap_or_default();
        let group = if a.group.is_empty() {
            String::new()
        } else {
            format!(".{}", a.group)
        };
        let place = match a.scope {
            Scope::AllNamespaces => "all namespaces".to_string(),
            Scope::Cluster => "the cluster scope".to_string(),
            Scope::Reviewed | Scope::Namespace(_) => format!("namespace {}", self.namespace),
        };
        format!("{} {}{sub}{group} in {place}", a.verb, a.resource)
    }
}

/// The first review whose answer is not the expected one.
pub fn first_mismatch(results: &[ReviewResult]) -> Option<&ReviewResult> {
    results.iter().find(|r| r.allowed != r.expected)
}

/// Whose access is reviewed.
pub enum Reviewer<'a> {
    /// SubjectAccessReview with an admin client: what `user` in `groups` may do.
    Subject {
        /// A client that may create SubjectAccessReviews (the tenant-admin's).
        admin: &'a kube::Client,
        /// The user reviewed (the credential's CN).
        user: &'a str,
        /// The user's groups (the credential's organizations).
        groups: &'a [String],
    },
    /// SelfSubjectAccessReview: what this client's own credential may do, so the answer
    /// covers the certificate, the binding and the rules at once.
    Own(&'a kube::Client),
}

impl Reviewer<'_> {
    async fn allows(&self, attributes: ResourceAttributes) -> Result<bool, kube::Error> {
        let status = match self {
            Reviewer::Subject {
                admin,
                user,
                groups,
            } => {
                let review = SubjectAccessReview {
                    metadata: Default::default(),
                    spec: SubjectAccessReviewSpec {
                        user: Some(user.to_string()),
                        groups: Some(groups.to_vec()),
                        resource_attributes: Some(attributes),
                        ..Default::default()
                    },
                    status: None,
                };
                Api::<SubjectAccessReview>::all((*admin).clone())
                    .create(&PostParams::default(), &review)
                    .await?
                    .status
            }
            Reviewer::Own(client) => {
                let review = SelfSubjectAccessReview {
                    metadata: Default::default(),
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(attributes),
                        ..Default::default()
                    },
                    status: None,
                };
                Api::<SelfSubjectAccessReview>::all((*client).clone())
                    .create(&PostParams::default(), &review)
                    .await?
                    .status
            }
        };
        Ok(status.is_some_and(|s| s.allowed))
    }
}

/// Reviews every check in `namespace` (for [`Scope::Reviewed`]), in order; the caller judges
/// the answers ([`first_mismatch`]) and words the failure.
pub async fn review(
    who: &Reviewer<'_>,
    checks: Vec<(Access, bool)>,
    namespace: &str,
) -> Result<Vec<ReviewResult>, kube::Error> {
    let mut results = Vec::with_capacity(checks.len());
    for (access, expected) in checks {
        let namespace = access.namespace_in(namespace);
        let allowed = who.allows(access.attributes(&namespace)).await?;
        results.push(ReviewResult {
            access,
            namespace,
            allowed,
            expected,
        });
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(access: Access, allowed: bool, expected: bool) -> ReviewResult {
        ReviewResult {
            access,
            namespace: access.namespace_in("ci"),
            allowed,
            expected,
        }
    }

    #[test]
    fn scopes_resolve_to_the_review_namespace() {
        let a = Access::new("get", "", "secrets");
        assert_eq!(a.namespace_in("ci"), "ci");
        assert_eq!(
            a.scope(Scope::Namespace("kube-system")).namespace_in("ci"),
            "kube-system"
        );
        assert_eq!(a.scope(Scope::AllNamespaces).namespace_in("ci"), "");
        let attrs = a.scope(Scope::Cluster).attributes("");
        assert_eq!(attrs.namespace, None, "empty: no namespace attribute");
        assert_eq!(
            Access::new("create", "", "pods")
                .sub("exec")
                .attributes("ci")
                .subresource
                .as_deref(),
            Some("exec")
        );
    }

    #[test]
    fn descriptions_name_the_verb_resource_group_and_place() {
        let cases = [
            (
                Access::new("create", "", "pods").sub("exec"),
                "create pods/exec in namespace ci",
            ),
            (
                Access::new("list", "", "secrets").scope(Scope::AllNamespaces),
                "list secrets in all namespaces",
            ),
            (
                Access::new("create", "rbac.authorization.k8s.io", "clusterrolebindings")
                    .scope(Scope::Cluster),
                "create clusterrolebindings.rbac.authorization.k8s.io in the cluster scope",
            ),
            (
                Access::new("create", "apps", "deployments").scope(Scope::Namespace("kube-system")),
                "create deployments.apps in namespace kube-system",
            ),
        ];
        for (access, want) in cases {
            assert_eq!(result(access, true, true).describe(), want);
        }
    }

    #[test]
    fn the_first_unexpected_answer_is_the_mismatch() {
        let get = Access::new("get", "", "pods");
        let del = Access::new("delete", "", "pods");
        let results = [
            result(get, true, true),
            result(del, true, false),
            result(get, false, true),
        ];
        assert_eq!(first_mismatch(&results), Some(&results[1]));
        assert_eq!(first_mismatch(&results[..1]), None);
        let c = checks([get], [del]);
        assert_eq!(c, [(get, true), (del, false)]);
    }
}
