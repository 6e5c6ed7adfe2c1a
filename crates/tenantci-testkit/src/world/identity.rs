//! A [`World`]'s SPIRE side: ClusterStaticEntries created as an operator would (the
//! dispatcher's own, admin or not), and the executors' entries the dispatchers made.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use tenantci_dispatch::identity::entries;

use super::{CLUSTER, NAMESPACE, World};
use crate::spire::{admin_entry_yaml, entry_yaml};
use crate::wait::eventually;

/// The simulated node's SPIRE agent, every entry's parent.
const PARENT_ID: &str = "spiffe://example.org/spire/agent/k8s_psat/ci/node-uid-1";

impl World {
    /// Creates the ClusterStaticEntry `name` for `spiffe_id` (as an operator does for the
    /// dispatcher's own identity) and waits until the stand-in serves its SVID.
    pub async fn create_entry(&self, name: &str, spiffe_id: &str) {
        self.create_entry_with(name, spiffe_id, false).await
    }

    /// [`World::create_entry`], an admin entry when `admin`.
    pub async fn create_entry_with(&self, name: &str, spiffe_id: &str, admin: bool) {
        let yaml = if admin { admin_entry_yaml } else { entry_yaml }(
            name,
            spiffe_id,
            PARENT_ID,
            &format!("pod-uid-of-{name}"),
        );
        self.apply_entry(name, &yaml).await;
    }

    /// The ClusterStaticEntry `name` for `spiffe_id` selecting the Pod `pod_uid` (no labels:
    /// nothing a dispatcher collects), once the stand-in serves it.
    pub async fn create_entry_for_pod(&self, name: &str, spiffe_id: &str, pod_uid: &str) {
        let yaml = entry_yaml(name, spiffe_id, PARENT_ID, pod_uid);
        self.apply_entry(name, &yaml).await;
    }

    async fn apply_entry(&self, name: &str, yaml: &str) {
        let obj: DynamicObject = serde_yaml::from_str(yaml).unwrap();
        self.entries_api()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        self.spire().served(&self.http, CLUSTER, name).await;
    }

    /// Makes the entry `name` an admin one (as an operator would, when the mints are refused).
    pub async fn make_admin(&self, name: &str) {
        let patch = serde_json::json!({"spec": {"admin": true}});
        self.entries_api()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    fn entries_api(&self) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterStaticEntry"),
            "clusterstaticentries",
        );
        Api::all_with(self.kube.clone(), &ar)
    }

    /// The ClusterStaticEntries the dispatchers of [`NAMESPACE`] made for their executors.
    pub async fn task_entries(&self) -> Vec<DynamicObject> {
        let lp = kube::api::ListParams::default().labels(&entries::selector(NAMESPACE));
        self.entries_api().list(&lp).await.unwrap().items
    }

    /// Waits until the dispatcher wrote `task`'s entry and the stand-in serves it; its name.
    pub async fn task_entry_served(&self, task: i64) -> String {
        let name = entries::entry_name(NAMESPACE, &format!("gitea-task-{task}"));
        self.spire().served(&self.http, CLUSTER, &name).await;
        name
    }

    /// Waits until no executor entry of [`NAMESPACE`] is left.
    pub async fn no_task_entries(&self) {
        eventually("the executors' SPIRE entries to be deleted", || async {
            self.task_entries().await.is_empty().then_some(())
        })
        .await
    }
}
