//! The in-process player: N runners at once, each found from its executor before any
//! measurement window (pod backend: one watch of the executor Pods and one GET of each Secret;
//! VM backend: the OpenSandbox double's admin view, polled, and one admin read of each new
//! sandbox's env), then played through the facade only: Declare + FetchTask, an UpdateLog
//! once a second, UpdateTask SUCCESS when its phase is released.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use tenantci_core::forge::gitea::proto::{
    LogRow, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};
use tenantci_dispatch::backend::pod::manifest::COMPONENT_SELECTOR;
use tenantci_dispatch::task::spec::TASK_ID_LABEL;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::opensandbox::OpenSandbox;
use tenantci_testkit::world::NAMESPACE;
use tokio::sync::watch;

/// What the player saw, shared with the phases.
#[derive(Default)]
pub struct Seen {
    /// Executors (Pods, sandboxes) seen created, and when.
    pub created: BTreeMap<i64, Instant>,
    /// Tasks fetched through the facade, and when.
    pub fetched: BTreeMap<i64, Instant>,
    /// Tasks whose UpdateTask SUCCESS was accepted.
    pub finished: Vec<i64>,
    /// UpdateLog round trips through the facade since the last [`Players::take_latencies`].
    pub update_log: Vec<Duration>,
    /// Executors live now.
    pub live: usize,
}

pub struct Players {
    pub seen: Arc<Mutex<Seen>>,
    /// The current phase's release: every runner started now finishes when it turns true.
    release: Arc<Mutex<watch::Sender<bool>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Players {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where the player finds the executors.
pub enum Source {
    /// The pod backend's executor Pods and Secrets, through the tenant apiserver.
    Pods(kube::Client),
    /// The VM backend's sandboxes, through the OpenSandbox double's admin view (not its
    /// Lifecycle API, whose calls are the dispatcher's figures).
    Sandboxes(OpenSandbox),
}

type Release = Arc<Mutex<watch::Sender<bool>>>;

impl Players {
    pub fn start(source: Source) -> Players {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let release = Arc::new(Mutex::new(watch::Sender::new(false)));
        let task = match source {
            Source::Pods(kube) => tokio::spawn(follow_pods(kube, seen.clone(), release.clone())),
            Source::Sandboxes(o) => {
                tokio::spawn(follow_sandboxes(o, seen.clone(), release.clone()))
            }
        };
        Players {
            seen,
            release,
            task,
        }
    }

    /// Releases the runners started so far (they finish) and starts a new phase.
    pub fn release(&self) {
        let old = std::mem::replace(
            &mut *self.release.lock().unwrap(),
            watch::Sender::new(false),
        );
        let _ = old.send(true);
    }

    pub fn take_latencies(&self) -> Vec<Duration> {
        std::mem::take(&mut self.seen.lock().unwrap().update_log)
    }
}

/// Records `task`'s executor as created and live; its phase's release, unless it was seen.
fn created(seen: &Mutex<Seen>, release: &Release, task: i64) -> Option<watch::Receiver<bool>> {
    let mut s = seen.lock().unwrap();
    if s.created.contains_key(&task) {
        return None;
    }
    s.created.insert(task, Instant::now());
    s.live += 1;
    Some(release.lock().unwrap().subscribe())
}

/// Watches the executor Pods; plays each new one's task.
async fn follow_pods(kube: kube::Client, seen: Arc<Mutex<Seen>>, release: Release) {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(kube, NAMESPACE);
    let config = watcher::Config::default().labels(COMPONENT_SELECTOR);
    let mut events = std::pin::pin!(watcher(pods, config).default_backoff());
    while let Some(Ok(event)) = events.next().await {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let Some(task) = task_of(&pod) else { continue };
                let Some(rx) = created(&seen, &release, task) else {
                    continue;
                };
                tokio::spawn(play_pod(secrets.clone(), pod, task, seen.clone(), rx));
            }
            watcher::Event::Delete(pod) if task_of(&pod).is_some() => {
                seen.lock().unwrap().live -= 1;
            }
            _ => {}
        }
    }
}

fn task_of(pod: &Pod) -> Option<i64> {
    let name = pod.metadata.name.as_deref()?;
    name.strip_prefix("gitea-task-")?.parse().ok()
}

/// How often the sandbox player looks at the double's figures (a cheap read; the ids are
/// read only when a sandbox was created or deleted since).
const SANDBOX_POLL: Duration = Duration::from_millis(100);

/// Polls the OpenSandbox double's admin view (there is no watch); plays each new sandbox's
/// task. The live count is the listed sandboxes that name a task, set from each listing (not
/// counted up and down, so a replacement's second sandbox or a failed read cannot skew it).
async fn follow_sandboxes(o: OpenSandbox, seen: Arc<Mutex<Seen>>, release: Release) {
    let http = reqwest::Client::new();
    let mut known: BTreeMap<String, i64> = BTreeMap::new();
    let mut last = None;
    loop {
        tokio::time::sleep(SANDBOX_POLL).await;
        let stats = o.stats(&http).await;
        let now = ["created", "deleted", "expired"].map(|k| stats[k].as_u64());
        if last == Some(now) {
            continue;
        }
        last = Some(now);
        let ids: BTreeSet<String> = o.ids(&http).await.into_iter().collect();
        known.retain(|id, _| ids.contains(id));
        for id in ids {
            if known.contains_key(&id) {
                continue;
            }
            let (status, sandbox) = o.sandbox(&http, &id).await;
            let task = sandbox["metadata"][TASK_ID_LABEL]
                .as_str()
                .and_then(|t| t.parse().ok());
            let (200, Some(task)) = (status, task) else {
                continue;
            };
            known.insert(id, task);
            if let Some(rx) = created(&seen, &release, task) {
                let ex = Executor::from_sandbox(&sandbox);
                tokio::spawn(play(ex, task, seen.clone(), rx));
            }
        }
        seen.lock().unwrap().live = known.len();
    }
}

/// A Pod's runner: its files from the Secret, then [`play`].
async fn play_pod(
    secrets: Api<Secret>,
    pod: Pod,
    task: i64,
    seen: Arc<Mutex<Seen>>,
    release: watch::Receiver<bool>,
) {
    let name = format!("gitea-task-{task}");
    let Ok(secret) = secrets.get(&name).await else {
        return;
    };
    play(Executor::from_objects(&secret, &pod), task, seen, release).await;
}

/// One runner: FetchTask, a log line a second until released, then SUCCESS.
async fn play(ex: Executor, task: i64, seen: Arc<Mutex<Seen>>, mut release: watch::Receiver<bool>) {
    let fetched = ex.fetch().await;
    assert_eq!(
        fetched.id, task,
        "the facade hands out the caller's own task"
    );
    seen.lock().unwrap().fetched.insert(task, Instant::now());
    let client = ex.own();
    let mut index = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !*release.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = release.changed() => break,
        }
        let row = LogRow {
            time: None,
            content: format!("line {index} of task {task}"),
        };
        let request = UpdateLogRequest {
            task_id: task,
            index,
            rows: vec![row],
            no_more: false,
        };
        let started = Instant::now();
        if client.update_log(&request).await.is_ok() {
            seen.lock().unwrap().update_log.push(started.elapsed());
            index += 1;
        }
    }
    let last = UpdateLogRequest {
        task_id: task,
        index,
        rows: vec![],
        no_more: true,
    };
    let done = UpdateTaskRequest {
        state: Some(TaskState {
            id: task,
            result: TaskResult::Success as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    if client.update_log(&last).await.is_ok() && client.update_task(&done).await.is_ok() {
        seen.lock().unwrap().finished.push(task);
    }
}
