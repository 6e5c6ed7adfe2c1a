//! The pod backend: one executor Pod and its Secret per task on the tenant cluster.
//!
//! - [`manifest`]: the Secret and Pod of one task (pure);
//! - [`objects`]: every read and write of them on the apiserver;
//! - [`observer`]: how the reconciler and keep-alive see them: watches and a local store,
//!   metadata only for the Secrets, a pass on change and on a slow resync;
//! - [`lifecycle`]: the Pod's phase and markers -> the reconciler's decision (pure);
//! - [`pause`]: the warm pools as pause Pods (leader), sized by `sizing::warm`'s plan over
//!   `sizing::demand`, each pause Pod asking what one executor Pod does
//!   (`sizing::resources`);
//! - [`registrar`]: with executor identity on, each scheduled executor Pod's SPIRE entry,
//!   written from the reconciler's pass and deleted with the Pod;
//! - [`events`]: a task's Pod's Events, for `dispatch explain` (read with the operator's
//!   client).

pub mod events;
pub mod lifecycle;
pub mod manifest;
pub mod objects;
pub mod observer;
pub mod pause;
pub mod registrar;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Mutex;

use crate::backend::pod::registrar::Registrar;
use crate::backend::{
    AssignmentHandout, Backend, BackendError, BackendFacts, Created, ExecutorLifecycle,
    ExecutorObservation, Nouns, Observed, Presence, StartError,
};
use crate::backend_kind::BackendKind;
use crate::capability;
use crate::task::Progress;
use crate::task::spec::ExecutorSpec;
use crate::task_id::TaskId;
use objects::{CreateError, ExecutorObjects};
use observer::Observer;

const APISERVER: &str = "the tenant apiserver";

/// The executor Pods of this dispatcher, and (identity on) their SPIRE entries.
pub struct PodExecutors {
    /// Every read and write of the executor Secrets and Pods.
    pub objects: ExecutorObjects,
    observer: Observer,
    /// The reconciler's pass without a change seen (`[cluster] resync`).
    resync: Duration,
    /// Identity on: the SPIRE entries, written by the reconciler's pass (one writer).
    entries: Option<Mutex<Registrar>>,
}

impl PodExecutors {
    /// Over `objects`, passing again every `resync` without a change seen; `entries`: the
    /// SPIRE entries' writer when executor identity is on.
    pub fn new(objects: ExecutorObjects, resync: Duration, entries: Option<Registrar>) -> Self {
        PodExecutors {
            observer: Observer::new(objects.pods.clone(), objects.secrets.clone()),
            objects,
            resync,
            entries: entries.map(Mutex::new),
        }
    }
}

/// This backend's name.
pub const KIND: BackendKind = BackendKind::new("pod");

/// What the rest of the dispatcher knows about the pod backend (registered in `catalog`).
pub const FACTS: BackendFacts = BackendFacts {
    kind: KIND,
    // The default backend: every task no other backend's label selects.
    label: None,
    turned_on_by: "it is always on",
    default_capacity: 4,
    opt_in: false,
    section: None,
    rented_nodes: true,
    nouns: Nouns {
        executor: "executor Pod",
        executors: "executors",
        source: "the apiserver",
        gone: "the executor's Pod and Secret were deleted",
        lost_partly: "its Pod was lost (deleted, or the tenant apiserver lost it; its Secret was left)",
        lost_whole: "its Pod and Secret were lost (deleted while no dispatcher was leading, or the tenant apiserver lost them)",
    },
};

/// The pod backend's registration: always on.
pub struct Provider;

/// What `catalog` registers.
pub const PROVIDER: Provider = Provider;

impl crate::backend::provider::Provider for Provider {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }

    fn build(&self, i: &mut crate::backend::provider::Inputs) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(PodExecutors::new(
            ExecutorObjects::new(i.kube.clone(), &i.namespace),
            i.resync,
            i.registrar.take(),
        )))
    }
}

fn api(e: kube::Error) -> BackendError {
    BackendError::new(APISERVER, e)
}

/// A create the tenant apiserver did not take, worded for the task's log; the `kube::Error`
/// stays its source.
#[derive(Debug, thiserror::Error)]
enum CreateFailed {
    #[error("the tenant apiserver answered {}", answered(.0))]
    Busy(#[source] kube::Error),
    #[error("the tenant apiserver refused it {}", refused(.0))]
    Refused(#[source] kube::Error),
    #[error("cannot reach the tenant apiserver: {0}")]
    Unreachable(#[source] kube::Error),
}

/// "503: message" of an API answer.
fn answered(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{}: {}", s.code, s.message),
        other => other.to_string(),
    }
}

/// "(403): message" of an API answer.
fn refused(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("({}): {}", s.code, s.message),
        other => other.to_string(),
    }
}

fn classify(e: kube::Error) -> StartError {
    match &e {
        kube::Error::Api(s) if s.code == 429 || s.code >= 500 => {
            StartError::unavailable(CreateFailed::Busy(e))
        }
        kube::Error::Api(_) => StartError::refused(CreateFailed::Refused(e)),
        _ => StartError::unavailable(CreateFailed::Unreachable(e)),
    }
}

/// One task's objects in the generic layer's terms.
fn observed(o: &observer::Observed) -> Observed {
    Observed {
        task: o.task_id,
        attempt: o.attempt,
        decision: lifecycle::decide(&o.lifecycle()),
        terminal: o.terminal,
        // A Secret still holding its assignment without a Pod is a start cut short (or under
        // way): its assignment was not acked, so it comes back and the worker finishes it.
        complete: o.pod_exists || !o.unfetched,
        age: o.age,
        progress: Some(match (o.unfetched, o.fetched) {
            (false, _) => Progress::Reported,
            (true, true) => Progress::Fetched,
            (true, false) => Progress::Unfetched,
        }),
        placement: o.placement.clone(),
        class: o.class.clone(),
        recheck: lifecycle::recheck(&o.lifecycle()),
        marks: o.marks.clone(),
        waited_for_node: o.waited_for_node,
    }
}

impl Backend for PodExecutors {
    fn facts(&self) -> &'static BackendFacts {
        &FACTS
    }
}

impl ExecutorLifecycle for PodExecutors {
    /// Idempotent by name (a create that finds its objects checks they are this
    /// assignment's), so `fresh` saves nothing here.
    fn start<'a>(
        &'a self,
        spec: &'a ExecutorSpec,
        sealed: &'a [u8],
        _fresh: bool,
    ) -> BoxFuture<'a, Result<Created, StartError>> {
        Box::pin(async move {
            if spec.attempt > 1 {
                // The earlier attempts' objects are gone (replaced) whatever the store says.
                self.observer.gone(spec.task_id, spec.attempt - 1);
            }
            self.objects
                .create(spec, sealed)
                .await
                .map_err(|e| match e {
                    CreateError::Foreign { .. } => StartError::refused(e),
                    CreateError::Api(e) => classify(e),
                })
        })
    }

    fn exists(&self, task: TaskId) -> BoxFuture<'_, Result<bool, BackendError>> {
        Box::pin(async move { self.objects.any_exists(task).await.map_err(api) })
    }

    /// Pod and Secret, then (identity on) the SPIRE entry; an entry that cannot be deleted
    /// now is found without its Pod by the next pass.
    fn delete(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move {
            let seen = self.observer.attempt_seen(task);
            self.objects.delete(task).await.map_err(api)?;
            if let Some(attempt) = seen {
                self.observer.gone(task, attempt);
            }
            if let Some(entries) = &self.entries {
                entries.lock().await.forget(task).await;
            }
            Ok(())
        })
    }

    fn mark_terminal(&self, task: TaskId) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move { self.objects.mark_terminal(task).await.map_err(api) })
    }
}

impl ExecutorObservation for PodExecutors {
    fn observe(&self) -> BoxFuture<'_, Result<BTreeMap<TaskId, Observed>, BackendError>> {
        Box::pin(async move {
            let found = self
                .observer
                .view()
                .await
                .map_err(|e| BackendError::new(APISERVER, e))?;
            Ok(found.iter().map(|(t, o)| (*t, observed(o))).collect())
        })
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.observer.changed())
    }

    fn resync(&self) -> Duration {
        self.resync
    }

    /// Identity on: each scheduled executor Pod's SPIRE entry written, the rest deleted.
    fn reconciled<'a>(&'a self, found: &'a BTreeMap<TaskId, Observed>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(entries) = &self.entries {
                entries.lock().await.reconcile(found).await;
            }
        })
    }
}

impl AssignmentHandout for PodExecutors {
    fn sealed_assignment(
        &self,
        task: TaskId,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(async move { self.objects.sealed_assignment(task).await.map_err(api) })
    }

    /// From the Secret, to the attempt it names.
    fn fetch(
        &self,
        task: TaskId,
        attempt: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, BackendError>> {
        Box::pin(async move {
            self.objects
                .fetch_assignment(task, &capability::assignment_id(task, attempt))
                .await
                .map_err(api)
        })
    }

    fn consume(&self, task: TaskId, attempt: u32) -> BoxFuture<'_, Result<Presence, BackendError>> {
        Box::pin(async move {
            self.objects
                .consume_assignment(task, &capability::assignment_id(task, attempt))
                .await
                .map_err(api)
        })
    }
}
