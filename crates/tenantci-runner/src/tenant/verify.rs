//! "Check both halves before blaming the runner" (runbook step 5): the certificate's subject
//! is what the binding names, SubjectAccessReviews as (CN, groups) allow everything the
//! Kubernetes executor needs and deny what a runner must never do, and one real request with
//! the credential itself succeeds. The checks are data ([`executor_needs`], [`must_deny`], and
//! with gitlab-runner's own pause pods [`autoscaler_needs`] and [`autoscaler_must_deny`]); the
//! reviews are `tenant::access`'s I/O.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde::Serialize;

use super::access::{self, Reviewer};
pub use super::access::{Access, ReviewResult, Scope};
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

const fn core(verb: &'static str, resource: &'static str) -> Access {
    Access::new(verb, "", resource)
}

/// What gitlab-runner's Kubernetes executor calls in its namespace (listed in
/// docs/runbooks/gitlab-runner.md, the `access` check).
pub fn executor_needs() -> Vec<Access> {
    let mut v = Vec::new();
    for verb in ["create", "delete", "get", "list", "watch"] {
        v.push(core(verb, "pods"));
    }
    // exec and attach are authorized as `create` (POST, and the websocket GET since 1.30).
    v.push(core("create", "pods").sub("exec"));
    v.push(core("create", "pods").sub("attach"));
    v.push(core("get", "pods").sub("log"));
    for verb in ["create", "delete", "get", "update"] {
        v.push(core(verb, "secrets"));
    }
    v.push(core("get", "serviceaccounts"));
    v.push(core("create", "services"));
    v.push(core("list", "events"));
    v
}

/// What gitlab-runner's own pause-pod autoscaler (Runner 18.10+) calls besides: its pause
/// Deployment in the namespace, and the `gitlab-runner-idle-capacity` PriorityClass it creates
/// when missing (cluster scope).
pub fn autoscaler_needs() -> Vec<Access> {
    let mut v: Vec<Access> = ["create", "get", "list", "update", "delete"]
        .into_iter()
        .map(|verb| Access::new(verb, "apps", "deployments"))
        .collect();
    for verb in ["get", "create"] {
        v.push(Access::new(verb, "scheduling.k8s.io", "priorityclasses").scope(Scope::Cluster));
    }
    v
}

/// What a runner with the autoscaler rules must still never be allowed: they are bound in its
/// namespace only.
pub fn autoscaler_must_deny() -> Vec<Access> {
    vec![Access::new("create", "apps", "deployments").scope(Scope::Namespace("kube-system"))]
}

/// What a runner must never be allowed.
pub fn must_deny() -> Vec<Access> {
    vec![
        core("get", "secrets").scope(Scope::Namespace("kube-system")),
        Access::new("create", "rbac.authorization.k8s.io", "clusterrolebindings")
            .scope(Scope::Cluster),
    ]
}

/// The whole verification, `-o json`'s `verify` section.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// The certificate's subject, as [`check_subject`] checked it.
    pub subject: String,
    /// Every access review, with its answer and expectation.
    pub reviews: Vec<ReviewResult>,
    /// The one real request made with the credential (list pods in the namespace) and its result.
    pub live_request: String,
}

/// Half one: the certificate names the user and group the binding expects.
pub fn check_subject(cert: &CertInfo, common_name: &str, group: &str) -> Result<()> {
    let identity = cert.identity().map_err(|a| {
        Error::check_failed(format!(
            "the credential's certificate `{}` is refused: {a}",
            cert.subject
        ))
        .hint("re-mint it with --rotate: tenantci writes one CN and UTF8String values only")
    })?;
    if identity.user != common_name || !identity.groups.iter().any(|o| o == group) {
        return Err(Error::check_failed(format!(
            "the credential's certificate is `{}` but the binding expects user `{common_name}` in group `{group}`",
            cert.subject
        ))
        .hint("the organization (O) must be the group the ClusterRoleBinding names; when they disagree every job fails with a 403 that reads as a broken runner. Re-mint with --rotate"));
    }
    Ok(())
}

/// The reviews a run asks for: see [`verify`].
fn checks(positive: bool, autoscaler: bool) -> Vec<(Access, bool)> {
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
    access::checks(needs, denied)
}

fn mismatch_error(bad: &ReviewResult, user: &str, groups: &[String]) -> Error {
    let what = bad.describe();
    if bad.expected {
        Error::check_failed(format!("user `{user}` in groups {groups:?} may not {what}, which the Kubernetes executor needs"))
            .hint("the ClusterRoleBinding must name the credential's organization as its Group; a mismatch is a 403 that reads as a broken runner")
    } else {
        Error::check_failed(format!("user `{user}` in groups {groups:?} may {what}, which a runner must never do"))
            .hint("remove the broader binding that grants it; never give a runner system:masters or cluster-admin")
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
    let who = Reviewer::Subject {
        admin,
        user,
        groups,
    };
    let results = access::review(&who, checks(positive, autoscaler), namespace)
        .await
        .map_err(|e| {
            Error::external("the tenant apiserver failed a SubjectAccessReview").caused_by(e)
        })?;
    if let Some(bad) = access::first_mismatch(&results) {
        return Err(mismatch_error(bad, user, groups));
    }
    list_pods_as_runner(runner, namespace).await?;
    Ok(results)
}

/// The one real request: the credential itself, not a review of it.
async fn list_pods_as_runner(runner: &kube::Client, namespace: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(runner.clone(), namespace);
    pods.list(&ListParams::default().limit(1)).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 401 => Error::check_failed("the tenant apiserver rejected the runner's credential (401)")
            .hint("the credential is not from this cluster's ClientCA: re-mint it with --rotate"),
        kube::Error::Api(s) if s.code == 403 => Error::check_failed(format!("the runner's credential may not list pods in {namespace}: {}", s.message))
            .hint("the organization (O) must be the bound group; a mismatch is a 403 that reads as a broken runner"),
        _ => Error::external("the runner's own request to the tenant apiserver failed").caused_by(e),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_needs_exec_and_attach_separately_from_pods() {
        let needs = executor_needs();
        assert!(needs.contains(&core("create", "pods").sub("exec")));
        assert!(needs.contains(&core("create", "pods").sub("attach")));
        assert!(needs.contains(&core("create", "secrets")));
    }

    #[test]
    fn autoscaler_needs_deployments_here_and_priorityclasses_cluster_wide() {
        let needs = autoscaler_needs();
        let deploy = needs
            .iter()
            .find(|x| x.resource == "deployments" && x.verb == "create")
            .unwrap();
        assert_eq!((deploy.group, deploy.scope), ("apps", Scope::Reviewed));
        let pc = needs
            .iter()
            .find(|x| x.resource == "priorityclasses" && x.verb == "create")
            .unwrap();
        assert_eq!((pc.group, pc.scope), ("scheduling.k8s.io", Scope::Cluster));
        assert_eq!(
            autoscaler_must_deny()[0].scope,
            Scope::Namespace("kube-system")
        );
    }

    #[test]
    fn an_unchanged_rerun_keeps_only_the_denials() {
        let expected = |c: &[(Access, bool)]| c.iter().filter(|(_, e)| *e).count();
        assert_eq!(checks(false, true), access::checks([], must_deny()));
        assert_eq!(expected(&checks(true, false)), executor_needs().len());
        let all = checks(true, true);
        assert_eq!(
            expected(&all),
            executor_needs().len() + autoscaler_needs().len()
        );
        assert_eq!(all.len() - expected(&all), 3);
    }
}
