//! "Check both halves before blaming the runner" (runbook step 5): the certificate's subject
//! is what the binding names, SubjectAccessReviews as (CN, groups) allow everything the
//! Kubernetes executor needs and deny what a runner must never do, and one real request with
//! the credential itself succeeds. The checks are data (`executor_needs`, `must_deny`), the
//! reviews are the I/O.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde::Serialize;

use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

/// One access the runner must have (or must not have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subresource: Option<&'static str>,
    /// None: the runner namespace; `Some("")`: cluster scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<&'static str>,
}

const fn a(verb: &'static str, resource: &'static str, sub: Option<&'static str>) -> Access {
    Access {
        verb,
        group: "",
        resource,
        subresource: sub,
        namespace: None,
    }
}

/// What gitlab-runner's Kubernetes executor calls in its namespace (facts/gitlab-runner.md §2).
pub fn executor_needs() -> Vec<Access> {
    let mut v = Vec::new();
    for verb in ["create", "delete", "get", "list", "watch"] {
        v.push(a(verb, "pods", None));
    }
    // exec and attach are authorized as `create` (POST, and the websocket GET since 1.30).
    v.push(a("create", "pods", Some("exec")));
    v.push(a("create", "pods", Some("attach")));
    v.push(a("get", "pods", Some("log")));
    for verb in ["create", "delete", "get", "update"] {
        v.push(a(verb, "secrets", None));
    }
    v.push(a("get", "serviceaccounts", None));
    v.push(a("create", "services", None));
    v.push(a("list", "events", None));
    v
}

/// What gitlab-runner's own pause-pod autoscaler (Runner 18.10+) calls besides: its pause
/// Deployment in the namespace, and the `gitlab-runner-idle-capacity` PriorityClass it creates
/// when missing (cluster scope).
pub fn autoscaler_needs() -> Vec<Access> {
    let mut v: Vec<Access> = ["create", "get", "list", "update", "delete"]
        .into_iter()
        .map(|verb| Access {
            group: "apps",
            ..a(verb, "deployments", None)
        })
        .collect();
    for verb in ["get", "create"] {
        v.push(Access {
            group: "scheduling.k8s.io",
            namespace: Some(""),
            ..a(verb, "priorityclasses", None)
        });
    }
    v
}

/// What a runner with the autoscaler rules must still never be allowed: they are bound in its
/// namespace only.
pub fn autoscaler_must_deny() -> Vec<Access> {
    vec![Access {
        group: "apps",
        namespace: Some("kube-system"),
        ..a("create", "deployments", None)
    }]
}

/// What a runner must never be allowed.
pub fn must_deny() -> Vec<Access> {
    vec![
        Access {
            verb: "get",
            group: "",
            resource: "secrets",
            subresource: None,
            namespace: Some("kube-system"),
        },
        Access {
            verb: "create",
            group: "rbac.authorization.k8s.io",
            resource: "clusterrolebindings",
            subresource: None,
            namespace: None,
        },
    ]
}

/// The outcome of one review.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewResult {
    #[serde(flatten)]
    pub access: Access,
    pub namespace: String,
    pub allowed: bool,
    pub expected: bool,
}

/// The whole verification, `-o json`'s `verify` section.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    pub subject: String,
    pub reviews: Vec<ReviewResult>,
    pub live_request: String,
}

/// Half one: the certificate names the user and group the binding expects.
pub fn check_subject(cert: &CertInfo, common_name: &str, group: &str) -> Result<()> {
    if cert.common_name.as_deref() != Some(common_name)
        || !cert.organizations.iter().any(|o| o == group)
    {
        return Err(Error::check_failed(format!(
            "the credential's certificate is `{}` but the binding expects user `{common_name}` in group `{group}`",
            cert.subject
        ))
        .hint("the organization (O) must be the group the ClusterRoleBinding names; when they disagree every job fails with a 403 that reads as a broken runner. Re-mint with --rotate"));
    }
    Ok(())
}

fn sar(user: &str, groups: &[String], access: &Access, namespace: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        metadata: Default::default(),
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(groups.to_vec()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(access.verb.into()),
                group: Some(access.group.into()),
                resource: Some(access.resource.into()),
                subresource: access.subresource.map(str::to_string),
                namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        status: None,
    }
}

/// Half two: access reviews as (CN, groups) with the admin client, then one real request
/// (list pods in the namespace) with the runner's own client. `positive` runs the reviews of
/// what the executor needs (and, with `autoscaler`, what gitlab-runner's pause-pod autoscaler
/// needs and must not have); a re-run whose RBAC objects were unchanged skips them (the rules it applied last
/// time still grant them) and keeps the negative reviews, which another binding could have
/// broken since.
pub async fn verify(
    admin: &kube::Client,
    runner: &kube::Client,
    user: &str,
    groups: &[String],
    namespace: &str,
    positive: bool,
    autoscaler: bool,
) -> Result<Vec<ReviewResult>> {
    let api: Api<SubjectAccessReview> = Api::all(admin.clone());
    let mut results = Vec::new();
    let mut needs = Vec::new();
    let mut denied = must_deny();
    if positive {
        needs.extend(executor_needs());
        // The autoscaler's denial checks the namespaced binding we just applied, so it runs
        // with the positive reviews; `must_deny` guards the crown jewels on every run.
        if autoscaler {
            needs.extend(autoscaler_needs());
            denied.extend(autoscaler_must_deny());
        }
    }
    let checks = needs
        .into_iter()
        .map(|a| (a, true))
        .chain(denied.into_iter().map(|a| (a, false)));
    for (access, expected) in checks {
        let ns = match access.namespace {
            Some(n) => n.to_string(),
            None if access.resource == "clusterrolebindings" => String::new(),
            None => namespace.to_string(),
        };
        let review = api
            .create(&PostParams::default(), &sar(user, groups, &access, &ns))
            .await
            .map_err(|e| {
                Error::external("the tenant apiserver failed a SubjectAccessReview").caused_by(e)
            })?;
        let allowed = review.status.is_some_and(|s| s.allowed);
        results.push(ReviewResult {
            access,
            namespace: ns,
            allowed,
            expected,
        });
    }
    if let Some(bad) = results.iter().find(|r| r.allowed != r.expected) {
        let what = format!(
            "{} {}{} in {}",
            bad.access.verb,
            bad.access.resource,
            bad.access
                .subresource
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            if bad.namespace.is_empty() {
                "the cluster scope".to_string()
            } else {
                format!("namespace {}", bad.namespace)
            }
        );
        return Err(if bad.expected {
            Error::check_failed(format!("user `{user}` in groups {groups:?} may not {what}, which the Kubernetes executor needs"))
                .hint("the ClusterRoleBinding must name the credential's organization as its Group; a mismatch is a 403 that reads as a broken runner")
        } else {
            Error::check_failed(format!("user `{user}` in groups {groups:?} may {what}, which a runner must never do"))
                .hint("remove the broader binding that grants it; never give a runner system:masters or cluster-admin")
        });
    }
    let pods: Api<Pod> = Api::namespaced(runner.clone(), namespace);
    pods.list(&ListParams::default().limit(1)).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 401 => Error::check_failed("the tenant apiserver rejected the runner's credential (401)")
            .hint("the credential is not from this cluster's ClientCA: re-mint it with --rotate"),
        kube::Error::Api(s) if s.code == 403 => Error::check_failed(format!("the runner's credential may not list pods in {namespace}: {}", s.message))
            .hint("the organization (O) must be the bound group; a mismatch is a 403 that reads as a broken runner"),
        _ => Error::external("the runner's own request to the tenant apiserver failed").caused_by(e),
    })?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_needs_exec_and_attach_separately_from_pods() {
        let needs = executor_needs();
        assert!(needs.contains(&a("create", "pods", Some("exec"))));
        assert!(needs.contains(&a("create", "pods", Some("attach"))));
        assert!(needs.contains(&a("create", "secrets", None)));
    }

    #[test]
    fn autoscaler_needs_deployments_here_and_priorityclasses_cluster_wide() {
        let needs = autoscaler_needs();
        let deploy = needs
            .iter()
            .find(|x| x.resource == "deployments" && x.verb == "create")
            .unwrap();
        assert_eq!((deploy.group, deploy.namespace), ("apps", None));
        let pc = needs
            .iter()
            .find(|x| x.resource == "priorityclasses" && x.verb == "create")
            .unwrap();
        assert_eq!((pc.group, pc.namespace), ("scheduling.k8s.io", Some("")));
        assert_eq!(autoscaler_must_deny()[0].namespace, Some("kube-system"));
    }
}
