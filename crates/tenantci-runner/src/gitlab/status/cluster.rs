//! The tenant cluster's side of `runner status` and `runner explain`, read with the entry's own
//! credential (`[runners.kubernetes]` host, cert_file, key_file, ca_file), as gitlab-runner
//! reads it: the Pods and Events of its namespace (what the role `bootstrap runner` binds
//! allows: no Secret, no Node, nothing cluster-scoped). Reads, never writes.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};

use super::pods::{self, JobPod};
use crate::gitlab::check::entry::EntryView;
use tenantci_core::kubeconfig::{self, Material};
use tenantci_core::{Error, Result};

/// What the namespace holds for this runner.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    /// The job Pods, by name.
    pub pods: Vec<JobPod>,
    /// Pause pods that run (warm slots).
    pub warm: usize,
    /// Pause pods in all.
    pub pause: usize,
}

/// A client with the entry's credential; bad input when the entry lacks one.
async fn client(view: &EntryView) -> Result<kube::Client> {
    let (Some(host), Some(ca), Some(cert), Some(key)) = (
        view.host.as_deref(),
        view.ca_file.as_deref(),
        view.cert_file.as_deref(),
        view.key_file.as_deref(),
    ) else {
        return Err(Error::bad_input(format!(
            "the entry `{}` lacks host, cert_file, key_file or ca_file in [runners.kubernetes]",
            view.name
        ))
        .hint("run `tenantci runner check` and re-run `tenantci bootstrap runner`"));
    };
    let material = Material::Files { ca, cert, key };
    let yaml = kubeconfig::render(&view.name, host, &material);
    tenantci_core::kube_client::from_kubeconfig_yaml(&yaml, "the entry's credential").await
}

/// Lists the namespace's Pods and Events; `now` is Unix seconds.
pub async fn read(view: &EntryView, now: i64) -> Result<ClusterView> {
    let client = client(view).await?;
    let ns = view.namespace.as_str();
    let failed = |what: &str, e: kube::Error| {
        Error::external(format!(
            "cannot list the {what} of namespace {ns} at {} with the entry's credential",
            view.host.as_deref().unwrap_or_default()
        ))
        .hint("run `tenantci runner check` on this entry")
        .caused_by(e)
    };
    let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| failed("Pods", e))?
        .items;
    let events: Vec<Event> = Api::<Event>::namespaced(client, ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| failed("Events", e))?
        .items;
    let (warm, pause) = pods::pause_pods(&pods);
    Ok(ClusterView {
        pods: pods::job_pods(&pods, &events, now),
        warm,
        pause,
    })
}
