//! Carries out `entries::plan` on the tenant cluster: lists this dispatcher's
//! ClusterStaticEntries, writes the entry of each scheduled executor Pod (its node's UID read
//! for the parent ID), and deletes the rest. The pod backend runs it once per reconciler pass
//! (`ExecutorObservation::reconciled`: leader only, so there is one writer), and its `delete`
//! deletes a task's entry with its Pod and Secret.
//!
//! Everything is idempotent by name, so a dispatcher killed mid-write and restarted finds its
//! entries, rewrites none that is right, and never makes a second one. What fails (the
//! apiserver away, the CRD not served, RBAC missing) is logged and tried again next pass:
//! the executor waits for its SVID meanwhile, and the start deadline bounds that wait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};

use crate::backend::Observed;
use crate::backend::pod::manifest;
use crate::identity::Parsed;
use crate::identity::entries::{self, Action, LiveEntry, ScheduledPod};
use crate::metrics::Metrics;
use crate::task_id::TaskId;

/// The writer of the executor Pods' SPIRE entries (ClusterStaticEntries) of one dispatcher.
pub struct Registrar {
    entries: Api<DynamicObject>,
    metrics: Arc<Metrics>,
    nodes: Api<Node>,
    identity: Parsed,
    namespace: String,
    /// Tasks whose entry could not be written, logged once until it is.
    failing: BTreeSet<TaskId>,
    /// The last pass could not list the entries (logged once until it can).
    list_failing: bool,
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(entries::GROUP, entries::VERSION, entries::KIND),
        entries::PLURAL,
    )
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The scheduled, unfinished executor Pods of identity mode, from a reconciler list.
fn scheduled(found: &BTreeMap<TaskId, Observed>) -> Vec<ScheduledPod> {
    found
        .values()
        .filter(|o| !o.terminal)
        .filter_map(|o| {
            let p = o.placement.as_ref()?;
            Some(ScheduledPod {
                task: o.task,
                pod_name: p.pod_name.clone(),
                pod_uid: p.pod_uid.clone(),
                node_name: p.node_name.clone(),
                spiffe_id: p.spiffe_id.clone()?,
            })
        })
        .collect()
}

impl Registrar {
    /// For the executors in `namespace` of the tenant cluster `client` reaches, with the
    /// `[identity]` section as parsed; failures count in `metrics`.
    pub fn new(
        client: kube::Client,
        identity: Parsed,
        namespace: &str,
        metrics: Arc<Metrics>,
    ) -> Self {
        Registrar {
            entries: Api::all_with(client.clone(), &resource()),
            metrics,
            nodes: Api::all(client),
            identity,
            namespace: namespace.to_string(),
            failing: BTreeSet::new(),
            list_failing: false,
        }
    }

    /// One pass over the executors the reconciler `found`.
    pub async fn reconcile(&mut self, found: &BTreeMap<TaskId, Observed>) {
        let live = match self.list().await {
            Ok(live) => {
                self.list_failing = false;
                live
            }
            Err(e) => {
                self.metrics.spire_entry_error();
                if !std::mem::replace(&mut self.list_failing, true) {
                    tracing::warn!(error = %e, "cannot list the executors' SPIRE entries (ClusterStaticEntry) at the tenant apiserver; trying again at the next pass (executors wait for their SVIDs until this works)");
                }
                return;
            }
        };
        for action in entries::plan(&self.namespace, &scheduled(found), &live) {
            match action {
                Action::Write { pod, replace } => self.write(&pod, replace).await,
                Action::Delete { name } => {
                    if self.delete(&name).await {
                        tracing::info!(entry = %name, "SPIRE entry deleted: its executor Pod is gone, ended or replaced");
                    }
                }
            }
        }
    }

    /// Deletes the entry of `task`'s executor (its Pod and Secret were deleted). False when
    /// the apiserver did not take it; the next pass finds the entry without Pod and retries.
    pub async fn forget(&mut self, task: TaskId) -> bool {
        self.failing.remove(&task);
        let name = entries::entry_name(&self.namespace, &manifest::object_name(task));
        self.delete(&name).await
    }

    async fn list(&self) -> Result<Vec<LiveEntry>, kube::Error> {
        let lp = ListParams::default().labels(&entries::selector(&self.namespace));
        let list = self.entries.list(&lp).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| LiveEntry::from_object(&serde_json::to_value(o).ok()?))
            .collect())
    }

    async fn write(&mut self, pod: &ScheduledPod, replace: Option<String>) {
        match self.try_write(pod, replace).await {
            Ok(written) => {
                self.failing.remove(&pod.task);
                if written {
                    tracing::info!(task = pod.task.get(), spiffe_id = %pod.spiffe_id, node = %pod.node_name, "SPIRE entry written for the executor Pod");
                }
            }
            Err(why) => {
                self.metrics.spire_entry_error();
                if self.failing.insert(pod.task) {
                    tracing::warn!(
                        task = pod.task.get(),
                        "cannot write the executor's SPIRE entry: {why}; retrying each pass"
                    );
                }
            }
        }
    }

    /// True when written now; false when someone wrote it meanwhile (the next pass compares).
    async fn try_write(&self, pod: &ScheduledPod, replace: Option<String>) -> Result<bool, String> {
        let node = self
            .nodes
            .get_opt(&pod.node_name)
            .await
            .map_err(|e| format!("cannot read node {}: {e}", pod.node_name))?
            .ok_or_else(|| format!("node {} is gone", pod.node_name))?;
        let node_uid = node
            .metadata
            .uid
            .ok_or_else(|| format!("node {} has no UID", pod.node_name))?;
        let desired = entries::desired(&self.identity, &self.namespace, pod, &node_uid)?;
        let mut obj: DynamicObject =
            serde_json::from_value(desired).map_err(|e| format!("entry object: {e}"))?;
        let name = entries::entry_name(&self.namespace, &pod.pod_name);
        let pp = PostParams::default();
        let written = match replace {
            None => self.entries.create(&pp, &obj).await,
            Some(version) => {
                obj.metadata.resource_version = Some(version);
                self.entries.replace(&name, &pp, &obj).await
            }
        };
        match written {
            Ok(_) => Ok(true),
            // Written meanwhile (another term) or changed since the list: the next pass
            // compares again.
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(format!("cannot write ClusterStaticEntry {name}: {e}")),
        }
    }

    async fn delete(&self, name: &str) -> bool {
        match self.entries.delete(name, &DeleteParams::default()).await {
            Ok(_) => true,
            Err(e) if is_status(&e, 404) => true,
            Err(e) => {
                self.metrics.spire_entry_error();
                tracing::warn!(entry = %name, error = %e, "cannot delete the SPIRE entry (ClusterStaticEntry) at the tenant apiserver; retrying next pass");
                false
            }
        }
    }
}
