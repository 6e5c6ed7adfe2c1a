//! One leadership term: recovery first, then the scheduler, keep-alive, and for each backend
//! its worker and reconciler, until the term stops (the lease is lost, or the drain).
//!
//! Each backend has its own durable consumer and admission slots (the seed's two workers in
//! one process): the pod backend always, the VM backend when `[vm]` is configured. A backend
//! that cannot start (its consumer not bound yet, OpenSandbox away at recovery) is retried in
//! its own task, so neither holds the other up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use tokio::sync::{Notify, watch};

use crate::backend::pod::objects::ExecutorObjects;
use crate::backend::reconciler::{Reconciler, Restarts};
use crate::backend::registry::Registry;
use crate::backend::vm::reconciler::VmReconciler;
use crate::backend::vm::sandboxes::Sandboxes;
use crate::backend::worker::{ExecutorTemplate, Executors, Worker};
use crate::claim::scheduler::{self, Scheduler};
use crate::config::Config;
use crate::facade::capability::CapabilityKey;
use crate::identity::registrar::Registrar;
use crate::metrics::Metrics;
use crate::queue::assignment::SealingKey;
use crate::queue::consumer::{CappedConsumer, ConsumerSettings};
use crate::queue::ledger::Ledger;
use crate::queue::producer::Producer;
use crate::queue::{Backend, STREAM};
use tenantci_core::forge::gitea::client::RunnerClient;

/// What a leadership term needs; cloned into each term.
#[derive(Clone)]
pub(super) struct Shared {
    pub cfg: Config,
    pub gitea: RunnerClient,
    pub kube: kube::Client,
    pub objects: ExecutorObjects,
    /// The VM backend's executors, when it is on.
    pub sandboxes: Option<Sandboxes>,
    pub registry: Arc<Registry>,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    pub producer: Producer,
    pub worker_client: async_nats::Client,
    pub capability_key: CapabilityKey,
    pub sealing_key: SealingKey,
    pub facade_ca_pem: String,
    /// The webhook receiver's nudges, for the scheduler of the current term.
    pub nudge: Arc<Notify>,
}

pub(super) struct Term {
    stop: watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl Term {
    /// Starts a term in the background: binding the consumers and recovery may retry for a
    /// while (NATS, the apiserver or OpenSandbox away), and the runtime must stay responsive
    /// to SIGTERM and to losing the lease meanwhile.
    pub fn start(s: Shared) -> Term {
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(run_term(s, stop_rx));
        Term { stop, tasks }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// True when `stop` turned true within `wait`.
async fn stopped_within(stop: &mut watch::Receiver<bool>, wait: Duration) -> bool {
    tokio::time::timeout(wait, stop.wait_for(|s| *s))
        .await
        .is_ok()
}

/// One term's life: each backend bound and recovered before anything is claimed, then every
/// component until `stop`, then wait for them.
async fn run_term(s: Shared, mut stop_rx: watch::Receiver<bool>) {
    let mut tasks = tokio::task::JoinSet::new();
    if !start_pod_backend(&s, &mut stop_rx, &mut tasks).await {
        return;
    }
    let Some(pod_consumer) = lookup(&s, Backend::Pod).await else {
        return;
    };
    // The VM backend starts beside, not before: OpenSandbox away at recovery must not hold
    // the pod backend up. Until it has recovered, the scheduler counts no VM slot as free.
    let vm_ready = Arc::new(AtomicBool::new(false));
    let vm_consumer = match s.sandboxes {
        Some(_) => {
            let (vm, mut stop, ready) = (s.clone(), stop_rx.clone(), vm_ready.clone());
            tasks.spawn(async move {
                let mut backend = tokio::task::JoinSet::new();
                if start_vm_backend(&vm, &mut stop, &mut backend).await {
                    ready.store(true, Ordering::SeqCst);
                    while backend.join_next().await.is_some() {}
                }
            });
            lookup(&s, Backend::Vm).await
        }
        None => None,
    };
    tasks.spawn(scheduler(&s, pod_consumer, vm_consumer, vm_ready).run(stop_rx.clone()));
    tasks.spawn(scheduler::keep_alive(
        s.gitea.clone(),
        s.objects.clone(),
        s.registry.clone(),
        s.ledger.clone(),
        s.metrics.clone(),
        s.cfg.gitea.keepalive_interval.get(),
        stop_rx.clone(),
    ));
    let _ = stop_rx.wait_for(|s| *s).await;
    while tasks.join_next().await.is_some() {}
}

/// The pod backend: its consumer bound, recovery from the ledger and the apiserver, then its
/// reconciler and worker. False: stopped first.
async fn start_pod_backend(
    s: &Shared,
    stop_rx: &mut watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> bool {
    let Some(consumer) = bind_consumer(s, Backend::Pod, s.cfg.capacity.pod, stop_rx).await else {
        return false;
    };
    let slots = consumer.clone();
    let mut reconciler = Reconciler {
        objects: s.objects.clone(),
        gitea: s.gitea.clone(),
        registry: s.registry.clone(),
        ledger: s.ledger.clone(),
        metrics: s.metrics.clone(),
        logged: Default::default(),
        restarts: restarts(s),
        lost: Default::default(),
        reserve: Box::new(move || slots.reserve_slot()),
        entries: registrar(s),
    };
    loop {
        match reconciler.recover().await {
            Ok(_) => break,
            Err(e) => {
                tracing::error!(error = %e, "recovery: retrying");
                if stopped_within(stop_rx, Duration::from_secs(2)).await {
                    return false;
                }
            }
        }
    }
    tasks.spawn(reconciler.run(stop_rx.clone()));
    spawn_worker(
        tasks,
        consumer,
        worker(s, s.objects.clone()),
        stop_rx.clone(),
    );
    true
}

/// The VM backend, as the pod backend: consumer, recovery from the ledger and the sandboxes
/// the Lifecycle API lists for this dispatcher, reconciler, worker. False: stopped first.
async fn start_vm_backend(
    s: &Shared,
    stop_rx: &mut watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> bool {
    let Some(sandboxes) = s.sandboxes.clone() else {
        return true;
    };
    let Some(consumer) = bind_consumer(s, Backend::Vm, s.cfg.capacity.vm, stop_rx).await else {
        return false;
    };
    let slots = consumer.clone();
    let mut reconciler = VmReconciler {
        sandboxes: sandboxes.clone(),
        gitea: s.gitea.clone(),
        registry: s.registry.clone(),
        ledger: s.ledger.clone(),
        metrics: s.metrics.clone(),
        restarts: restarts(s),
        logged: Default::default(),
        lost: Default::default(),
        reserve: Box::new(move || slots.reserve_slot()),
    };
    loop {
        match reconciler.recover().await {
            Ok(()) => break,
            Err(e) => {
                tracing::error!(error = %e, "VM recovery: retrying (vm tasks wait in the queue)");
                if stopped_within(stop_rx, Duration::from_secs(2)).await {
                    return false;
                }
            }
        }
    }
    tasks.spawn(reconciler.run(stop_rx.clone()));
    spawn_worker(tasks, consumer, worker(s, sandboxes), stop_rx.clone());
    true
}

fn spawn_worker<E: Executors>(
    tasks: &mut tokio::task::JoinSet<()>,
    consumer: Arc<CappedConsumer>,
    worker: Worker<E>,
    mut stop: watch::Receiver<bool>,
) {
    let worker = Arc::new(worker);
    tasks.spawn(async move {
        consumer
            .run(move |job| worker.clone().handle(job), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    });
}

/// Binds `backend`'s consumer, retrying while NATS or the topology is away; None: stopped.
async fn bind_consumer(
    s: &Shared,
    backend: Backend,
    capacity: u32,
    stop_rx: &mut watch::Receiver<bool>,
) -> Option<Arc<CappedConsumer>> {
    loop {
        match CappedConsumer::bind(
            s.worker_client.clone(),
            backend,
            capacity as usize,
            ConsumerSettings::default(),
        )
        .await
        {
            Ok(c) => return Some(Arc::new(c)),
            Err(e) => {
                tracing::error!(error = %e, %backend, "cannot bind the consumer (run `tenantci queue init`, or give the dispatcher ci-admin's password); retrying");
                if stopped_within(stop_rx, Duration::from_secs(5)).await {
                    return None;
                }
            }
        }
    }
}

/// `backend`'s consumer for its depth, as the scheduler reads it.
async fn lookup(s: &Shared, backend: Backend) -> Option<PullConsumer> {
    match async_nats::jetstream::new(s.worker_client.clone())
        .get_consumer_from_stream(backend.consumer(), STREAM)
        .await
    {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(error = %e, %backend, "cannot look up the consumer; this term claims nothing (restart after `tenantci queue init`)");
            None
        }
    }
}

fn scheduler(
    s: &Shared,
    pod_consumer: PullConsumer,
    vm_consumer: Option<PullConsumer>,
    vm_ready: Arc<AtomicBool>,
) -> Scheduler {
    Scheduler {
        gitea: s.gitea.clone(),
        producer: s.producer.clone(),
        pod_consumer,
        vm_consumer,
        vm_ready,
        sealing_key: s.sealing_key.clone(),
        registry: s.registry.clone(),
        ledger: s.ledger.clone(),
        metrics: s.metrics.clone(),
        pod_capacity: s.cfg.capacity.pod,
        vm_capacity: s.cfg.capacity.vm,
        polling: crate::run::polling(&s.cfg),
        nudge: s.nudge.clone(),
    }
}

fn template(s: &Shared) -> ExecutorTemplate {
    ExecutorTemplate {
        namespace: s.cfg.cluster.namespace.clone(),
        facade_url: s.cfg.facade.url.clone(),
        facade_ca_pem: s.facade_ca_pem.clone(),
        runner_name: s.cfg.gitea.runner_name.clone(),
        executor: s.cfg.executor.clone(),
        // A loaded config is valid, so a present section parses.
        identity: s
            .cfg
            .identity
            .as_ref()
            .and_then(|i| i.parse().ok())
            .map(|settings| crate::backend::worker::TemplateIdentity {
                settings,
                sealing_key: s.sealing_key.clone(),
            }),
    }
}

/// The SPIRE entries of the executor Pods, with identity on.
fn registrar(s: &Shared) -> Option<Registrar> {
    let settings = s.cfg.identity.as_ref()?.parse().ok()?;
    Some(Registrar::new(
        s.kube.clone(),
        settings,
        &s.cfg.cluster.namespace,
        s.metrics.clone(),
    ))
}

fn restarts(s: &Shared) -> Restarts {
    Restarts {
        claim: s.cfg.claim.clone(),
        sealing_key: s.sealing_key.clone(),
        capability_key: s.capability_key.clone(),
        template: template(s),
    }
}

fn worker<E: Executors>(s: &Shared, executors: E) -> Worker<E> {
    Worker {
        executors,
        template: template(s),
        capability_key: s.capability_key.clone(),
        gitea: s.gitea.clone(),
        registry: s.registry.clone(),
        ledger: s.ledger.clone(),
        metrics: s.metrics.clone(),
    }
}
