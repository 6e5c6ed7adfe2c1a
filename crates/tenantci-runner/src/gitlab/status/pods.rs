//! Pure: the job Pods gitlab-runner created, read from the Pod objects and their Events. A job
//! Pod is one carrying gitlab-runner's (15.9+) `job.runner.gitlab.com/id` annotation; its
//! GitLab job is in that annotation family. Whether its node was rented for it or was warm
//! comes from its Events (cluster-autoscaler's `TriggeredScaleUp`), since the runner's role
//! reads no Nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, Pod};
use serde::Serialize;

/// gitlab-runner's annotation with the job's id.
pub const JOB_ID: &str = "job.runner.gitlab.com/id";
/// ... the job's page.
pub const JOB_URL: &str = "job.runner.gitlab.com/url";
/// ... the job's name.
pub const JOB_NAME: &str = "job.runner.gitlab.com/name";
/// ... the branch or tag.
pub const JOB_REF: &str = "job.runner.gitlab.com/ref";
/// ... the commit.
pub const JOB_SHA: &str = "job.runner.gitlab.com/sha";
/// ... the project's id.
pub const PROJECT_ID: &str = "project.runner.gitlab.com/id";

/// The GitLab job a Pod runs, from its annotations.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PodJob {
    /// The job's id.
    pub id: u64,
    /// Its page at GitLab.
    pub url: Option<String>,
    /// Its name.
    pub name: Option<String>,
    /// The branch or tag.
    #[serde(rename = "ref")]
    pub git_ref: Option<String>,
    /// The commit.
    pub sha: Option<String>,
    /// The project's id.
    pub project_id: Option<u64>,
}

/// One job Pod as `runner status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct JobPod {
    /// The Pod's name.
    pub name: String,
    /// Its GitLab job.
    pub job: PodJob,
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    pub phase: String,
    /// The node it is bound to; `None` while unscheduled.
    pub node: Option<String>,
    /// `rented` when a node was rented for it (its `TriggeredScaleUp` Event), `warm` when it
    /// was bound to a node that was already there, `None` while unbound.
    pub node_source: Option<&'static str>,
    /// Seconds since the Pod was created.
    pub age_seconds: i64,
    /// Container restarts, summed.
    pub restarts: i32,
    /// Why a container waits (`ErrImagePull`, `ImagePullBackOff`, ...), the first one.
    pub waiting: Option<String>,
    /// Its Events, oldest first, as `Type Reason (component): message`.
    pub events: Vec<String>,
    /// Whether its Events say a node boots for it (a scale-up, or nodes not ready yet).
    pub node_booting: bool,
}

/// One Event line: `Warning FailedScheduling (default-scheduler): 0/1 nodes are available...`.
pub fn event_line(e: &Event) -> String {
    let source = e
        .reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default();
    format!(
        "{} {} ({source}): {}",
        e.type_.as_deref().unwrap_or("Normal"),
        e.reason.as_deref().unwrap_or_default(),
        e.message.as_deref().unwrap_or_default()
    )
}

/// The job Pods among `pods`, with their Events, sorted by name.
pub fn job_pods(pods: &[Pod], events: &[Event], now: i64) -> Vec<JobPod> {
    let mut by_pod: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        if let Some(name) = e.involved_object.name.as_deref() {
            by_pod.entry(name).or_default().push(e);
        }
    }
    let mut out: Vec<JobPod> = pods
        .iter()
        .filter_map(|p| job_pod(p, by_pod.get(pod_name(p)).map(Vec::as_slice), now))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn pod_name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn job_pod(p: &Pod, events: Option<&[&Event]>, now: i64) -> Option<JobPod> {
    let notes = p.metadata.annotations.as_ref()?;
    let id = notes.get(JOB_ID)?.trim().parse().ok()?;
    let note = |k: &str| notes.get(k).cloned().filter(|v| !v.is_empty());
    let mut events: Vec<&Event> = events.unwrap_or_default().to_vec();
    events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
    let spec_node = p.spec.as_ref().and_then(|s| s.node_name.clone());
    let rented = events
        .iter()
        .any(|e| e.reason.as_deref() == Some("TriggeredScaleUp"));
    let status = p.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(now);
    Some(JobPod {
        name: pod_name(p).to_string(),
        job: PodJob {
            id,
            url: note(JOB_URL),
            name: note(JOB_NAME),
            git_ref: note(JOB_REF),
            sha: note(JOB_SHA),
            project_id: note(PROJECT_ID).and_then(|v| v.parse().ok()),
        },
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into()),
        node_source: spec_node
            .as_ref()
            .map(|_| if rented { "rented" } else { "warm" }),
        node: spec_node,
        age_seconds: now.saturating_sub(created).max(0),
        restarts: containers.iter().map(|c| c.restart_count).sum(),
        waiting: containers
            .iter()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .find(|r| r != "ContainerCreating" && r != "PodInitializing"),
        node_booting: rented
            || events.iter().any(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("node.kubernetes.io/not-ready"))
            }),
        events: events.iter().map(|e| event_line(e)).collect(),
    })
}

/// The label of tenantci's pause pods (`tenant prewarm`) and gitlab-runner's own.
const PAUSE_LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", crate::tenant::prewarm::NAME),
    ("runner.gitlab.com/pause-pod", "true"),
];

/// The pause pods among `pods` that run (warm slots) and all of them.
pub fn pause_pods(pods: &[Pod]) -> (usize, usize) {
    let pause: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            PAUSE_LABELS
                .iter()
                .any(|(k, v)| labels.and_then(|l| l.get(*k)).is_some_and(|have| have == v))
        })
        .collect();
    let running = pause
        .iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })
        .count();
    (running, pause.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn event(pod: &str, reason: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.1"), "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": pod},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "cluster-autoscaler"},
        }))
        .unwrap()
    }

    #[test]
    fn job_pods_carry_their_job_node_source_and_booting() {
        let pods = [
            pod(
                json!({"metadata": {"name": "runner-a", "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {JOB_ID: "7", JOB_REF: "main", PROJECT_ID: "42"}},
                "spec": {"containers": [], "nodeName": "rented-1"},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": "build", "image": "x", "imageID": "", "ready": true, "restartCount": 2}]}}),
            ),
            pod(
                json!({"metadata": {"name": "runner-b", "annotations": {JOB_ID: "8"}},
                "spec": {"containers": []}, "status": {"phase": "Pending"}}),
            ),
            pod(json!({"metadata": {"name": "not-a-job"}, "spec": {"containers": []}})),
        ];
        let events = [
            event("runner-a", "TriggeredScaleUp", "pod triggered scale-up"),
            event(
                "runner-b",
                "FailedScheduling",
                "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
            ),
        ];
        let now = 1_767_225_600 + 90;
        let got = job_pods(&pods, &events, now);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].job.id, 7);
        assert_eq!(got[0].job.project_id, Some(42));
        assert_eq!(got[0].node_source, Some("rented"));
        assert_eq!(got[0].restarts, 2);
        assert_eq!(got[0].age_seconds, 90);
        assert_eq!(got[1].node_source, None);
        assert!(got[1].node_booting);
        assert_eq!(got[1].events.len(), 1);
    }
}
