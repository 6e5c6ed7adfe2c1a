//! The Events of a task's executor Pod, oldest first: what `dispatch explain` shows under a
//! Pod that waits for a node (the scheduler's `FailedScheduling`, cluster-autoscaler's
//! `TriggeredScaleUp`, an image pull, a quota), as `kubectl describe pod` would.
//!
//! Read with the caller's client (an operator's kubeconfig: the dispatcher's own role does not
//! read events). Boundary: reads, never writes; lists the namespace's events and keeps the
//! Pod's, so no field selector is needed.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};

use crate::task::spec::TASK_ID_LABEL;
use crate::task_id::TaskId;

/// The events of `task`'s executor Pods in `namespace`, oldest first.
pub async fn of_task(
    client: &kube::Client,
    namespace: &str,
    task: TaskId,
) -> kube::Result<Vec<Event>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{TASK_ID_LABEL}={task}");
    let names: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut mine: Vec<Event> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object
                .name
                .as_ref()
                .is_some_and(|n| names.contains(n))
        })
        .collect();
    mine.sort_by(|a, b| {
        let at = |e: &Event| e.last_timestamp.as_ref().map(|t| t.0);
        at(a).cmp(&at(b))
    });
    Ok(mine)
}
