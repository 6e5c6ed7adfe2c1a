//! Pre-warmed pause pods: a PriorityClass at -10 and a Deployment of pause pods sized like a
//! job pod, so a rented node is booted before the job arrives. A real job pod (priority 0)
//! preempts a pause pod at once; the Deployment recreates it Pending, which rents the next node.
//!
//! [`desired_priority_class`] and [`desired_deployment`] compute the objects (pure,
//! unit-tested); the I/O is [`check`] (server-side dry runs, for a caller's phase one),
//! [`apply`] (server-side apply under the field manager `tenantci`, skipping unchanged objects)
//! and [`remove`] (deletes both). When gitlab-runner keeps the pause pods itself
//! (`--gitlab-native-pause-pods`), [`remove_for_native`] takes tenantci's Deployment away so
//! the two never both hold nodes.

use crate::steps::Outcome;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Namespace, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Toleration,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;

use tenantci_core::quantity::{self, Milli};
use tenantci_core::{Error, Result};

/// Name of both objects.
pub const NAME: &str = "tenantci-pause";
/// Exactly the autoscaler's cutoff: pods at -10 still make it rent a node; below do not.
pub const PRIORITY: i32 = -10;
/// The pause image used unless another is given.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";
const SELECTOR_LABEL: &str = "app.kubernetes.io/name";
/// The pause image runs as this user (nobody in distroless terms).
const PAUSE_UID: i64 = 65535;

/// What the operator asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct PrewarmSpec {
    /// The Deployment's namespace: the runner's, where job pods run.
    pub namespace: String,
    /// How many pause pods to keep; 0 keeps the objects with no pod.
    pub replicas: i32,
    /// Requests of one pause pod: the whole job pod (build + helper + services).
    pub cpu: Milli,
    /// Memory request of one pause pod (the whole job pod's), in millibytes.
    pub memory: Milli,
    /// The job pods' node selector, so pause pods rent the nodes jobs will use; empty for none.
    pub node_selector: BTreeMap<String, String>,
    /// The job pods' tolerations; empty for none.
    pub tolerations: Vec<TolerationSpec>,
    /// The job pods' labels, so pause pods match the same affinities and spread constraints; empty
    /// for none.
    pub labels: BTreeMap<String, String>,
    /// The pause container's image, e.g. [`DEFAULT_IMAGE`].
    pub image: String,
}

/// `key=value:Effect` or `key:Effect` (Exists), as on the CLI and in gitlab-runner's
/// `node_tolerations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TolerationSpec {
    /// The taint key tolerated.
    pub key: String,
    /// The taint value to match (operator `Equal`); `None` tolerates any value (`Exists`).
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl TolerationSpec {
    /// Parses `key=value:Effect` or `key:Effect`; an error (bad input) for another form, an empty
    /// key or another effect.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::bad_input(format!("the toleration `{s}` is not `key=value:Effect` or `key:Effect`"))
                .hint("e.g. `--toleration dedicated=ci:NoSchedule`; Effect is NoSchedule, PreferNoSchedule or NoExecute")
        };
        let (kv, effect) = s.rsplit_once(':').ok_or_else(bad)?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") || kv.is_empty() {
            return Err(bad());
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(bad());
        }
        Ok(TolerationSpec {
            key: key.into(),
            value,
            effect: effect.into(),
        })
    }

    fn to_k8s(&self) -> Toleration {
        Toleration {
            key: Some(self.key.clone()),
            operator: Some(
                if self.value.is_some() {
                    "Equal"
                } else {
                    "Exists"
                }
                .into(),
            ),
            value: self.value.clone(),
            effect: Some(self.effect.clone()),
            ..Default::default()
        }
    }
}

/// Parses `k=v` (node selectors, labels).
pub fn parse_key_value(flag: &str, s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(Error::bad_input(format!("{flag} `{s}` is not `key=value`"))
            .hint(format!("e.g. `{flag} kubernetes.io/arch=amd64`"))),
    }
}

/// The PriorityClass [`NAME`] at [`PRIORITY`]: it never preempts and is not the global default.
pub fn desired_priority_class() -> PriorityClass {
    PriorityClass {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            labels: Some(managed_labels()),
            ..Default::default()
        },
        value: Some(PRIORITY),
        global_default: Some(false),
        preemption_policy: Some("Never".into()),
        description: Some(
            "tenantci pause pods: hold a rented node warm; any job pod preempts them".into(),
        ),
    }
}

fn managed_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "tenantci".to_string(),
    )])
}

/// The Deployment [`NAME`] in the spec's namespace: `replicas` pause pods of the job pod's size and
/// placement, in the pause PriorityClass, admitted under Pod Security `restricted`.
pub fn desired_deployment(spec: &PrewarmSpec) -> Deployment {
    let selector = BTreeMap::from([(SELECTOR_LABEL.to_string(), NAME.to_string())]);
    // The job pods' labels first, so a pause pod matches the same affinities and spread
    // constraints; our selector label last so it cannot be overridden.
    let mut pod_labels = spec.labels.clone();
    pod_labels.extend(selector.clone());
    let mut deployment_labels = managed_labels();
    deployment_labels.extend(selector.clone());
    Deployment {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(spec.namespace.clone()),
            labels: Some(deployment_labels),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(pause_pod(spec)),
            },
            ..Default::default()
        },
        status: None,
    }
}

/// A pause Pod: the job pods' size and placement, preemptible (the pause PriorityClass), and
/// admitted under Pod Security `restricted`.
fn pause_pod(spec: &PrewarmSpec) -> PodSpec {
    let requests = BTreeMap::from([
        ("cpu".to_string(), Quantity(quantity::format_cpu(spec.cpu))),
        (
            "memory".to_string(),
            Quantity(quantity::format_memory(spec.memory)),
        ),
    ]);
    PodSpec {
        priority_class_name: Some(NAME.into()),
        termination_grace_period_seconds: Some(0),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
        tolerations: (!spec.tolerations.is_empty()).then(|| {
            spec.tolerations
                .iter()
                .map(TolerationSpec::to_k8s)
                .collect()
        }),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(PAUSE_UID),
            run_as_group: Some(PAUSE_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![Container {
            name: "pause".into(),
            image: Some(spec.image.clone()),
            resources: Some(ResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            security_context: Some(SecurityContext {
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// What `tenant prewarm` did, `-o json`'s shape.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrewarmReport {
    /// The Deployment's namespace.
    pub namespace: String,
    /// How many pause pods were asked for.
    pub replicas: i32,
    /// CPU request of one pause pod, e.g. `1100m`.
    pub cpu: String,
    /// Memory request of one pause pod, e.g. `1152Mi`.
    pub memory: String,
    /// The PriorityClass's name ([`NAME`]).
    pub priority_class: String,
    /// Its priority ([`PRIORITY`]).
    pub priority: i32,
    /// The Deployment as `namespace/name`.
    pub deployment: String,
    /// Applied, Unchanged or Removed.
    pub action: Outcome,
    /// Whether the changes were server-side dry runs only.
    pub dry_run: bool,
}

fn api_error(what: &str, e: kube::Error) -> Error {
    tenantci_core::kube_client::api_error(
        e,
        what,
        "pre-warm with the tenant-admin kubeconfig (the runner's credential may not write priorityclasses)",
    )
}

/// Phase one of `tenant prewarm`: the namespace exists and both objects pass a server-side
/// dry run, so a refusal of the Deployment cannot leave the cluster-scoped PriorityClass
/// behind without it. Writes nothing.
pub async fn check(client: &kube::Client, spec: &PrewarmSpec) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let found = namespaces
        .get_opt(&spec.namespace)
        .await
        .map_err(|e| api_error("read the namespace", e))?;
    if found.is_none() {
        return Err(Error::bad_input(format!(
            "the namespace `{}` does not exist in the tenant cluster",
            spec.namespace
        ))
        .hint("pass --namespace naming the runner's namespace (`bootstrap runner` creates it with the runner's RBAC)"));
    }
    apply(client, spec, true).await.map(|_| ())
}

/// Server-side applies the PriorityClass and the Deployment (dry-run when asked).
pub async fn apply(
    client: &kube::Client,
    spec: &PrewarmSpec,
    dry_run: bool,
) -> Result<PrewarmReport> {
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    let pc = super::apply::apply(&pcs, &desired_priority_class(), dry_run)
        .await
        .map_err(|e| api_error("apply the pause PriorityClass", e))?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &spec.namespace);
    let d = super::apply::apply(&deployments, &desired_deployment(spec), dry_run)
        .await
        .map_err(|e| api_error("apply the pause Deployment", e))?;
    let action = if pc.outcome == Outcome::Unchanged && d.outcome == Outcome::Unchanged {
        Outcome::Unchanged
    } else {
        Outcome::Applied
    };
    Ok(report(spec, action, dry_run))
}

/// Deletes the Deployment and the PriorityClass; absent objects are fine (idempotent).
pub async fn remove(
    client: &kube::Client,
    spec: &PrewarmSpec,
    dry_run: bool,
) -> Result<PrewarmReport> {
    let params = DeleteParams {
        dry_run,
        ..Default::default()
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &spec.namespace);
    ignore_not_found(deployments.delete(NAME, &params).await.map(|_| ()))
        .map_err(|e| api_error("delete the pause Deployment", e))?;
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    ignore_not_found(pcs.delete(NAME, &params).await.map(|_| ()))
        .map_err(|e| api_error("delete the pause PriorityClass", e))?;
    Ok(report(spec, Outcome::Removed, dry_run))
}

/// What [`remove_for_native`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeSwitch {
    /// tenantci's Deployment existed in the namespace and was deleted.
    pub deployment_removed: bool,
    /// ... and no other namespace's Deployment used the PriorityClass, so it went too.
    pub priority_class_removed: bool,
}

/// gitlab-runner keeps the pause pods now: deletes tenantci's Deployment in `namespace`, and
/// the cluster-scoped PriorityClass only when no other namespace's pause Deployment still
/// uses it (another runner may stay in Deployment mode). On a re-run this is one request (a
/// 404); the PriorityClass is looked at only in the run that removed a Deployment.
pub async fn remove_for_native(
    client: &kube::Client,
    namespace: &str,
    dry_run: bool,
) -> Result<NativeSwitch> {
    let params = DeleteParams {
        dry_run,
        ..Default::default()
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment_removed = match deployments.delete(NAME, &params).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => return Err(api_error("delete the pause Deployment", e)),
    };
    let mut priority_class_removed = false;
    if deployment_removed {
        let all: Api<Deployment> = Api::all(client.clone());
        let others = all
            .list(&ListParams::default().labels(&format!("{SELECTOR_LABEL}={NAME}")))
            .await
            .map_err(|e| api_error("list pause Deployments", e))?
            .items
            .into_iter()
            // Ours may still be listed (a dry run, or a deletion still in progress).
            .filter(|d| d.metadata.namespace.as_deref() != Some(namespace))
            .count();
        if others == 0 {
            let pcs: Api<PriorityClass> = Api::all(client.clone());
            ignore_not_found(pcs.delete(NAME, &params).await.map(|_| ()))
                .map_err(|e| api_error("delete the pause PriorityClass", e))?;
            priority_class_removed = true;
        }
    }
    Ok(NativeSwitch {
        deployment_removed,
        priority_class_removed,
    })
}

fn ignore_not_found(
    r: std::result::Result<(), kube::Error>,
) -> std::result::Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

fn report(spec: &PrewarmSpec, action: Outcome, dry_run: bool) -> PrewarmReport {
    PrewarmReport {
        namespace: spec.namespace.clone(),
        replicas: spec.replicas,
        cpu: quantity::format_cpu(spec.cpu),
        memory: quantity::format_memory(spec.memory),
        priority_class: NAME.into(),
        priority: PRIORITY,
        deployment: format!("{}/{NAME}", spec.namespace),
        action,
        dry_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PrewarmSpec {
        PrewarmSpec {
            namespace: "gitlab-runner".into(),
            replicas: 2,
            cpu: Milli(1100),
            memory: quantity::parse("1152Mi").unwrap(),
            node_selector: BTreeMap::from([("pool".into(), "ci".into())]),
            tolerations: vec![TolerationSpec::parse("dedicated=ci:NoSchedule").unwrap()],
            labels: BTreeMap::from([("team".into(), "a".into())]),
            image: DEFAULT_IMAGE.into(),
        }
    }

    #[test]
    fn priority_class_is_minus_ten_and_never_preempts() {
        let pc = desired_priority_class();
        assert_eq!(pc.value, Some(-10));
        assert_eq!(pc.global_default, Some(false));
        assert_eq!(pc.preemption_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn pause_pods_carry_the_job_pods_placement_and_size() {
        let d = desired_deployment(&spec());
        let pod = d.spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.priority_class_name.as_deref(), Some(NAME));
        assert_eq!(pod.termination_grace_period_seconds, Some(0));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.node_selector.as_ref().unwrap()["pool"], "ci");
        assert_eq!(
            pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
            Some("dedicated")
        );
        let c = &pod.containers[0];
        let req = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(req["cpu"].0, "1100m");
        assert_eq!(req["memory"].0, "1152Mi");
        assert_eq!(
            c.security_context
                .as_ref()
                .unwrap()
                .read_only_root_filesystem,
            Some(true)
        );
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        assert_eq!(
            tenantci_core::pod_security::restricted(pod),
            Vec::<String>::new(),
            "admitted under Pod Security `restricted`"
        );
        let labels = d
            .spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[SELECTOR_LABEL], NAME);
    }

    #[test]
    fn native_pause_pods_default_to_the_same_image() {
        assert_eq!(
            DEFAULT_IMAGE,
            crate::gitlab::config::entry::DEFAULT_PAUSE_POD_IMAGE
        );
    }

    #[test]
    fn tolerations_parse_both_forms() {
        let t = TolerationSpec::parse("gpu:NoExecute").unwrap();
        assert_eq!(t.value, None);
        assert_eq!(t.to_k8s().operator.as_deref(), Some("Exists"));
        for bad in [
            "",
            "a",
            "a=b",
            "a=b:Sometimes",
            ":NoSchedule",
            "=x:NoSchedule",
        ] {
            assert!(TolerationSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
