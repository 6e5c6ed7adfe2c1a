//! Watches a [`super::World`]'s executor Pods for a whole test: the most alive at once (per
//! resource class too), and how many distinct Pods (by uid) each name had. Reads only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};

use super::NAMESPACE;
use crate::wait::eventually;

/// Watches executor Pods for the whole test: the most alive at once, and how many distinct
/// Pods (by uid) each name had.
pub struct PodWatch {
    inner: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct WatchState {
    live: BTreeSet<String>,
    max_live: usize,
    /// Live Pods by their `tenantci.io/class`, and the most of each class live at once.
    live_of_class: BTreeMap<String, BTreeSet<String>>,
    max_live_of_class: BTreeMap<String, usize>,
    uids: BTreeMap<String, BTreeSet<String>>,
}

impl PodWatch {
    /// Starts watching the Pods of [`NAMESPACE`] with `kube`, and returns once its first list
    /// is complete: its LIST then lies behind the caller, who may count the apiserver's
    /// requests from here on without this watch's own start among them. Stops when dropped.
    pub async fn start(kube: kube::Client) -> PodWatch {
        let inner = Arc::new(Mutex::new(WatchState::default()));
        let state = inner.clone();
        let api = Api::<Pod>::namespaced(kube, NAMESPACE);
        let (listed_tx, listed) = tokio::sync::oneshot::channel();
        let mut listed_tx = Some(listed_tx);
        let task = tokio::spawn(async move {
            // With backoff: once the simulator is gone, errors must not spin this task.
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let mut s = state.lock().unwrap();
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        s.uids
                            .entry(name.clone())
                            .or_default()
                            .insert(p.metadata.uid.clone().unwrap_or_default());
                        s.live.insert(name.clone());
                        s.max_live = s.max_live.max(s.live.len());
                        let labels = p.metadata.labels.as_ref();
                        if let Some(class) = labels.and_then(|l| l.get("tenantci.io/class")) {
                            let live = s.live_of_class.entry(class.clone()).or_default();
                            live.insert(name);
                            let n = live.len();
                            let max = s.max_live_of_class.entry(class.clone()).or_default();
                            *max = (*max).max(n);
                        }
                    }
                    watcher::Event::Delete(p) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        s.live.remove(&name);
                        for live in s.live_of_class.values_mut() {
                            live.remove(&name);
                        }
                    }
                    // A relist: the live set is rebuilt from the InitApply events that follow.
                    watcher::Event::Init => {
                        s.live.clear();
                        s.live_of_class.clear();
                    }
                    watcher::Event::InitDone => {
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                }
            }
        });
        tokio::time::timeout(crate::wait::DEADLINE, listed)
            .await
            .expect("the test's watch of the executor Pods listed them within the deadline")
            .expect("the test's watch of the executor Pods ended before its first list");
        PodWatch { inner, task }
    }

    /// The most executor Pods alive at once since the watch started.
    pub fn max_live(&self) -> usize {
        self.inner.lock().unwrap().max_live
    }

    /// The most executor Pods of resource class `class` alive at once.
    pub fn max_live_of_class(&self, class: &str) -> usize {
        let s = self.inner.lock().unwrap();
        s.max_live_of_class.get(class).copied().unwrap_or(0)
    }

    /// Waits until no executor Pod is live, then counts the most live at once afresh.
    pub async fn reset_max_live_once_none_is_live(&self) {
        eventually("no executor Pod live", || async {
            let mut s = self.inner.lock().unwrap();
            s.live.is_empty().then(|| s.max_live = 0)
        })
        .await
    }

    /// Pods ever created per name.
    pub fn creations(&self) -> BTreeMap<String, usize> {
        self.inner
            .lock()
            .unwrap()
            .uids
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }
}
