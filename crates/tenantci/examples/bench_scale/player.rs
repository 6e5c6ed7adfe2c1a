//! The in-process player: N runners at once, each found from its executor Pod (one watch of
//! the executor Pods, one GET of each Secret, before any measurement window), then played
//! through the facade only: Declare + FetchTask, an UpdateLog once a second, UpdateTask
//! SUCCESS when its phase is released.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use tenantci_core::forge::gitea::proto::{
    LogRow, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};
use tenantci_dispatch::backend::pod::executor::COMPONENT_SELECTOR;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::world::NAMESPACE;
use tokio::sync::watch;

/// What the player saw, shared with the phases.
#[derive(Default)]
pub struct Seen {
    /// Executor Pods seen created, and when.
    pub created: BTreeMap<i64, Instant>,
    /// Tasks fetched through the facade, and when.
    pub fetched: BTreeMap<i64, Instant>,
    /// Tasks whose UpdateTask SUCCESS was accepted.
    pub finished: Vec<i64>,
    /// UpdateLog round trips through the facade since the last [`Players::take_latencies`].
    pub update_log: Vec<Duration>,
    /// Executor Pods live now.
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

impl Players {
    pub fn start(kube: kube::Client) -> Players {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let release = Arc::new(Mutex::new(watch::Sender::new(false)));
        let task = tokio::spawn(follow(kube, seen.clone(), release.clone()));
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

/// Watches the executor Pods; plays each new one's task.
async fn follow(
    kube: kube::Client,
    seen: Arc<Mutex<Seen>>,
    release: Arc<Mutex<watch::Sender<bool>>>,
) {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(kube, NAMESPACE);
    let config = watcher::Config::default().labels(COMPONENT_SELECTOR);
    let mut events = std::pin::pin!(watcher(pods, config).default_backoff());
    while let Some(Ok(event)) = events.next().await {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let Some(task) = task_of(&pod) else { continue };
                let mut s = seen.lock().unwrap();
                if s.created.contains_key(&task) {
                    continue;
                }
                s.created.insert(task, Instant::now());
                s.live += 1;
                let rx = release.lock().unwrap().subscribe();
                tokio::spawn(play(secrets.clone(), pod, task, seen.clone(), rx));
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

/// One runner: its files from the Secret, FetchTask, a log line a second until released,
/// then SUCCESS.
async fn play(
    secrets: Api<Secret>,
    pod: Pod,
    task: i64,
    seen: Arc<Mutex<Seen>>,
    mut release: watch::Receiver<bool>,
) {
    let name = format!("gitea-task-{task}");
    let Ok(secret) = secrets.get(&name).await else {
        return;
    };
    let ex = Executor::from_objects(&secret, &pod);
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
