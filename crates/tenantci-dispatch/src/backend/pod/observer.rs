//! How the pod backend sees its executors: kube-runtime reflectors over this dispatcher's
//! executor Pods (whole: a pass reads their phase and node) and executor Secrets (metadata
//! only: the sealed assignment stays on the apiserver until a replacement or the hand-out
//! reads it), by label. Steady state costs the apiserver two open watches and the events of
//! what changed, not a LIST of everything that exists every pass.
//!
//! Started by the first observation (a leader's reconciler or keep-alive), so a follower,
//! whose facade only reads and patches single Secrets, holds no watch. A watch that ends
//! (timeout, apiserver restart, `410 Gone`) is taken up as kube-runtime's watcher does: watched
//! again from its last version, or re-listed once when that is too old, with the default
//! backoff (800 ms growing to 30 s, jittered) while the apiserver is away. The store keeps its
//! last whole view meanwhile (a re-list replaces it only once complete), so an outage costs
//! latency: every write of a pass fails and is tried again.
//!
//! The store follows the apiserver with a lag. The one case where that would mislead a pass,
//! objects this dispatcher deleted (or replaced by a later attempt) still in the store, is kept
//! out by [`Floors`]; an executor missing from the store is confirmed gone by a direct read
//! before its task is failed (`ExecutorLifecycle::exists`, which the reconciler calls).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use tokio::sync::Notify;

use crate::backend::Placement;
use crate::backend::pod::lifecycle::PodState;
use crate::backend::pod::manifest::{
    self, COMPONENT_SELECTOR, CONSUMED_ANNOTATION, FETCHED_ANNOTATION, TERMINAL_ANNOTATION,
};
use crate::backend::pod::objects::{annotation, task_of};
use crate::task::history::Mark;
use crate::task_id::TaskId;

/// How long an observation waits for the first list of a watch before it answers that the
/// executors cannot be seen yet (recovery then tries again; nothing is decided on an empty
/// store).
const FIRST_LIST: Duration = Duration::from_secs(10);

/// One task's objects as the store holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The Gitea task.
    pub task_id: TaskId,
    /// The attempt its objects carry (the Pod's when both are in the store).
    pub attempt: u32,
    /// None: no Pod, or no phase yet.
    pub pod_phase: Option<String>,
    /// Its Pod is in the store.
    pub pod_exists: bool,
    /// The Pod carries the terminal marker: Gitea accepted the final state.
    pub terminal: bool,
    /// Its Secret is in the store.
    pub secret_exists: bool,
    /// The sealed assignment is still in the Secret (no [`CONSUMED_ANNOTATION`]): no executor
    /// has reported yet.
    pub unfetched: bool,
    /// The executor called FetchTask at least once (the Secret's fetched-at annotation).
    pub fetched: bool,
    /// How long ago the Secret was created (this attempt's start).
    pub age: Option<Duration>,
    /// Where the Pod runs, once it is scheduled (None: no Pod, or not scheduled yet).
    pub placement: Option<Placement>,
    /// The Pod's resource class (`tenantci.io/class`).
    pub class: Option<String>,
    /// When the Pod was scheduled and its container started, as its status says.
    pub marks: Vec<(Mark, DateTime<Utc>)>,
    /// When the Pod was unschedulable (waiting for a node), as its status says.
    pub waited_for_node: Option<DateTime<Utc>>,
}

impl Observed {
    fn blank(task_id: TaskId, attempt: u32) -> Self {
        Observed {
            task_id,
            attempt,
            pod_phase: None,
            pod_exists: false,
            terminal: false,
            secret_exists: false,
            unfetched: false,
            fetched: false,
            age: None,
            placement: None,
            class: None,
            marks: Vec::new(),
            waited_for_node: None,
        }
    }

    /// What [`crate::backend::pod::lifecycle::decide`] reads of it.
    pub fn lifecycle(&self) -> PodState {
        PodState {
            pod_phase: self.pod_phase.clone().or_else(|| {
                // A Pod without a phase yet is Pending as far as the lifecycle goes.
                self.pod_exists.then(|| "Pending".to_string())
            }),
            terminal_marker: self.terminal,
            secret_exists: self.secret_exists,
            secret_age: self.age,
        }
    }
}

/// Keeps of a Pod what a pass reads (its metadata, node and phase, and the two times the task
/// history marks) and drops the rest before the store holds it: containers, volumes,
/// environment, conditions and managed fields were most of the dispatcher's memory at 1,000
/// executors (docs/benchmarks/scale.md).
fn slim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = pod.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|s| {
        let scheduled = s
            .conditions
            .unwrap_or_default()
            .into_iter()
            // Scheduled, or waiting for a node (the history's `waited_for_node`).
            .filter(|c| c.type_ == "PodScheduled" && (c.status == "True" || unschedulable(c)))
            .map(|c| PodCondition {
                type_: c.type_,
                status: c.status,
                reason: c.reason,
                last_transition_time: c.last_transition_time,
                ..PodCondition::default()
            })
            .collect::<Vec<_>>();
        let started = s
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| {
                let running = c.state?.running?;
                Some(ContainerStatus {
                    name: c.name,
                    state: Some(ContainerState {
                        running: Some(running),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                })
            })
            .collect::<Vec<_>>();
        PodStatus {
            phase: s.phase,
            conditions: (!scheduled.is_empty()).then_some(scheduled),
            container_statuses: (!started.is_empty()).then_some(started),
            ..PodStatus::default()
        }
    });
}

/// The task history's marks a Pod's status holds: scheduled (its `PodScheduled` condition)
/// and started (its first container running), each at its time.
fn marks(pod: &Pod) -> Vec<(Mark, DateTime<Utc>)> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ == "PodScheduled" && c.status == "True")
        .find_map(|c| c.last_transition_time.as_ref().map(|t| t.0));
    let started = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
        .map(|t| t.0)
        .min();
    [(Mark::Scheduled, scheduled), (Mark::Started, started)]
        .into_iter()
        .filter_map(|(m, t)| Some((m, DateTime::<Utc>::from(SystemTime::from(t?)))))
        .collect()
}

/// The scheduler's verdict on a Pod no node has room for (a node is rented for it, when the
/// cluster rents them).
fn unschedulable(c: &PodCondition) -> bool {
    c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
}

/// When the Pod was seen waiting for a node: its `PodScheduled` condition False with reason
/// `Unschedulable`, at its transition time (or `now` when the condition carries none).
fn waited_for_node(pod: &Pod, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && unschedulable(c))?;
    Some(
        c.last_transition_time
            .as_ref()
            .map_or(now, |t| DateTime::<Utc>::from(SystemTime::from(t.0))),
    )
}

fn placement(pod: &Pod) -> Option<Placement> {
    let node_name = pod
        .spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())?;
    Some(Placement {
        pod_name: pod.metadata.name.clone()?,
        pod_uid: pod.metadata.uid.clone()?,
        node_name,
        spiffe_id: annotation(&pod.metadata, manifest::SPIFFE_ID_ANNOTATION).map(str::to_string),
    })
}

/// Per task, the highest attempt whose objects this dispatcher deleted or replaced: objects
/// of that attempt or an earlier one are its own past writes that the store has not caught up
/// with, and are left out of a view until the store has no such object any more.
#[derive(Debug, Default)]
pub struct Floors(BTreeMap<TaskId, u32>);

impl Floors {
    /// `task`'s objects of `attempt` and earlier are gone; a floor never lowers.
    pub fn raise(&mut self, task: TaskId, attempt: u32) {
        let floor = self.0.entry(task).or_default();
        *floor = (*floor).max(attempt);
    }

    /// `view` without what lies at or under a floor; a floor with nothing left under it goes.
    pub fn apply(&mut self, view: &mut BTreeMap<TaskId, Observed>, stale: &BTreeMap<TaskId, u32>) {
        self.0.retain(|task, floor| {
            let under = stale.get(task).is_some_and(|lowest| lowest <= floor);
            if under {
                view.remove(task);
            }
            under
        });
    }
}

/// The two stores and what wakes a pass, running from the first observation on.
struct Watches {
    pods: Store<Pod>,
    secrets: Store<PartialObjectMeta<Secret>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// Drives one reflector until the process ends: every event applied to its store wakes a
/// pass; errors are logged once per outage (the backoff retries).
fn drive<S, T>(stream: S, what: &'static str, changed: Arc<Notify>) -> tokio::task::JoinHandle<()>
where
    S: futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    if failing {
                        tracing::info!("the watch of the executor {what} is back");
                    }
                    failing = false;
                    changed.notify_one();
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "the watch of the executor {what} failed; watching again with backoff (the reconciler acts on what it saw last meanwhile)");
                }
                Err(_) => {}
            }
        }
    })
}

impl Watches {
    fn start(pods: &Api<Pod>, secrets: &Api<Secret>, changed: &Arc<Notify>) -> Self {
        let config = watcher::Config::default().labels(COMPONENT_SELECTOR);
        let (pod_store, pod_writer) = reflector::store();
        let (secret_store, secret_writer) = reflector::store();
        let pod_events = watcher(pods.clone(), config.clone()).modify(slim);
        let pod_stream = reflector::reflector(pod_writer, pod_events).default_backoff();
        // `Api<PartialObjectMeta<_>>` asks for metadata only (`as=PartialObjectMetadata`).
        let metadata: Api<PartialObjectMeta<Secret>> = Api::namespaced(
            secrets.clone().into_client(),
            secrets.namespace().unwrap_or_default(),
        );
        let secret_stream =
            reflector::reflector(secret_writer, watcher(metadata, config)).default_backoff();
        Watches {
            pods: pod_store,
            secrets: secret_store,
            tasks: vec![
                drive(pod_stream, "Pods", changed.clone()),
                drive(secret_stream, "Secrets", changed.clone()),
            ],
        }
    }

    async fn ready(&self) -> bool {
        let both = async {
            let _ = self.pods.wait_until_ready().await;
            let _ = self.secrets.wait_until_ready().await;
        };
        tokio::time::timeout(FIRST_LIST, both).await.is_ok()
    }

    /// Every task's objects in the store; and per task the lowest attempt of any object.
    fn view(&self) -> (BTreeMap<TaskId, Observed>, BTreeMap<TaskId, u32>) {
        let mut out: BTreeMap<TaskId, Observed> = BTreeMap::new();
        let mut lowest: BTreeMap<TaskId, u32> = BTreeMap::new();
        let mut seen = |task: TaskId, attempt: u32| {
            let l = lowest.entry(task).or_insert(attempt);
            *l = (*l).min(attempt);
        };
        for pod in self.pods.state() {
            let Some((task, attempt)) = task_of(&pod.metadata, "Pod") else {
                continue;
            };
            seen(task, attempt);
            let o = out
                .entry(task)
                .or_insert_with(|| Observed::blank(task, attempt));
            o.pod_exists = true;
            o.pod_phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            o.terminal = annotation(&pod.metadata, TERMINAL_ANNOTATION).is_some();
            o.placement = placement(&pod);
            o.marks = marks(&pod);
            o.waited_for_node = waited_for_node(&pod, Utc::now());
            o.class = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::task::spec::CLASS_LABEL).cloned());
        }
        for secret in self.secrets.state() {
            let Some((task, attempt)) = task_of(&secret.metadata, "Secret") else {
                continue;
            };
            seen(task, attempt);
            let o = out
                .entry(task)
                .or_insert_with(|| Observed::blank(task, attempt));
            secret_into(&secret.metadata, o);
        }
        (out, lowest)
    }
}

fn secret_into(meta: &ObjectMeta, o: &mut Observed) {
    o.secret_exists = true;
    o.fetched = annotation(meta, FETCHED_ANNOTATION).is_some();
    o.unfetched = annotation(meta, CONSUMED_ANNOTATION).is_none();
    o.age = meta.creation_timestamp.as_ref().and_then(|t| {
        let created = SystemTime::from(t.0);
        SystemTime::now().duration_since(created).ok()
    });
}

/// Why the executors cannot be seen now.
#[derive(Debug, thiserror::Error)]
#[error(
    "the watches of the executor Pods and Secrets have not listed them yet (within {}s); observed again at the next pass",
    FIRST_LIST.as_secs()
)]
pub struct NotListed;

/// The pod backend's view of its executors (see the module header).
pub struct Observer {
    pods: Api<Pod>,
    secrets: Api<Secret>,
    watches: tokio::sync::OnceCell<Watches>,
    changed: Arc<Notify>,
    floors: Mutex<Floors>,
}

impl Observer {
    /// Over the executor Pods and Secrets these handles reach (one namespace); nothing is
    /// watched until the first [`Observer::view`].
    pub fn new(pods: Api<Pod>, secrets: Api<Secret>) -> Self {
        Observer {
            pods,
            secrets,
            watches: tokio::sync::OnceCell::new(),
            changed: Arc::new(Notify::new()),
            floors: Mutex::new(Floors::default()),
        }
    }

    async fn watches(&self) -> &Watches {
        self.watches
            .get_or_init(|| async { Watches::start(&self.pods, &self.secrets, &self.changed) })
            .await
    }

    /// Every executor's objects, by task, as the watches last saw them (the watches start
    /// with the first call, which waits for their first list).
    pub async fn view(&self) -> Result<BTreeMap<TaskId, Observed>, NotListed> {
        let watches = self.watches().await;
        if !watches.ready().await {
            return Err(NotListed);
        }
        let (mut view, lowest) = watches.view();
        self.floors.lock().unwrap().apply(&mut view, &lowest);
        Ok(view)
    }

    /// Returns when the watches saw a change since the last call (or once, after the first).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// This dispatcher deleted `task`'s objects of `attempt` and earlier (or replaced them).
    pub fn gone(&self, task: TaskId, attempt: u32) {
        self.floors.lock().unwrap().raise(task, attempt);
    }

    /// The attempt of `task` the store shows now, if any.
    pub fn attempt_seen(&self, task: TaskId) -> Option<u32> {
        let watches = self.watches.get()?;
        let name = manifest::object_name(task);
        let ns = self.pods.namespace().map(str::to_string);
        let pod_ref = reflector::ObjectRef::<Pod>::new(&name).within(ns.as_deref().unwrap_or(""));
        let secret_ref = reflector::ObjectRef::<PartialObjectMeta<Secret>>::new(&name)
            .within(ns.as_deref().unwrap_or(""));
        let pod = watches
            .pods
            .get(&pod_ref)
            .and_then(|p| task_of(&p.metadata, "Pod"));
        let secret = watches
            .secrets
            .get(&secret_ref)
            .and_then(|s| task_of(&s.metadata, "Secret"));
        pod.into_iter().chain(secret).map(|(_, a)| a).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pass reads of a Pod survives [`slim`]; the containers and conditions do not.
    #[test]
    fn a_slim_pod_keeps_what_a_pass_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gitea-task-7", "uid": "u", "labels": {"tenantci.io/task-id": "7"},
                "annotations": {"tenantci.io/terminal": "x"},
                "managedFields": [{"manager": "tenantci"}]},
            "spec": {"nodeName": "rented-1", "containers": [{"name": "runner", "image": "i",
                "env": [{"name": "A", "value": "b"}]}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let mut slimmed = pod.clone();
        slim(&mut slimmed);
        assert_eq!(placement(&slimmed), placement(&pod));
        assert!(placement(&slimmed).is_some());
        assert_eq!(slimmed.metadata.labels, pod.metadata.labels);
        assert_eq!(slimmed.metadata.annotations, pod.metadata.annotations);
        assert_eq!(
            slimmed.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(slimmed.spec.as_ref().unwrap().containers.is_empty());
        assert!(slimmed.status.unwrap().conditions.is_none());
        assert!(slimmed.metadata.managed_fields.is_none());
    }

    /// The two times the history marks survive [`slim`]; the other conditions do not.
    #[test]
    fn a_slim_pod_keeps_when_it_was_scheduled_and_started() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gitea-task-7"},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T10:00:05Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T10:00:09Z"}],
              "containerStatuses": [{"name": "runner", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0, "state": {"running": {"startedAt": "2026-12-07T10:00:08Z"}}}]}
        }))
        .unwrap();
        slim(&mut pod);
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        assert_eq!(
            marks(&pod),
            vec![
                (Mark::Scheduled, t("2026-12-07T10:00:05Z")),
                (Mark::Started, t("2026-12-07T10:00:08Z"))
            ]
        );
        assert_eq!(pod.status.unwrap().conditions.unwrap().len(), 1);
    }

    #[test]
    fn a_slim_pod_keeps_that_it_waits_for_a_node() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gitea-task-7"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": "2026-12-07T10:00:02Z"}]}
        }))
        .unwrap();
        slim(&mut pod);
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let now = t("2026-12-07T10:00:09Z");
        assert_eq!(waited_for_node(&pod, now), Some(t("2026-12-07T10:00:02Z")));
        assert_eq!(marks(&pod), vec![], "not scheduled yet");
        // Without a transition time (the simulator sets none): when it was seen.
        let mut bare = pod.clone();
        bare.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time = None;
        assert_eq!(waited_for_node(&bare, now), Some(now));
        // Scheduled on a node that was there: never seen waiting.
        let placed: Pod = serde_json::from_value(serde_json::json!({
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}
        }))
        .unwrap();
        assert_eq!(waited_for_node(&placed, now), None);
    }

    #[test]
    fn a_floor_hides_its_own_past_writes_until_the_store_drops_them() {
        let mut view = BTreeMap::from([
            (TaskId::new(7), Observed::blank(TaskId::new(7), 1)),
            (TaskId::new(8), Observed::blank(TaskId::new(8), 2)),
        ]);
        let mut floors = Floors::default();
        floors.raise(TaskId::new(7), 1);
        floors.raise(TaskId::new(8), 1);
        // Task 7's attempt 1 is still in the store: hidden. Task 8 shows attempt 2, a new
        // write above the floor: kept, and its floor goes.
        floors.apply(
            &mut view,
            &BTreeMap::from([(TaskId::new(7), 1), (TaskId::new(8), 2)]),
        );
        assert_eq!(
            view.keys().copied().collect::<Vec<_>>(),
            vec![TaskId::new(8)]
        );
        assert_eq!(
            floors.0.keys().copied().collect::<Vec<_>>(),
            vec![TaskId::new(7)]
        );
        // The store caught up: nothing of task 7 left, the floor goes too.
        floors.apply(&mut view, &BTreeMap::new());
        assert!(floors.0.is_empty());
    }
}
