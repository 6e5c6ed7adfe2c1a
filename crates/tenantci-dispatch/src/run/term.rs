//! One leadership term: for each backend its consumer bound, recovery, then its reconciler
//! and worker; beside them the scheduler, keep-alive, the labels' Declare, the waiting-jobs
//! watch (`[waiting_jobs]`) and the warm pools (a class with one), until the term stops (the
//! lease is lost, or the drain).
//!
//! Each backend has its own durable consumer and admission slots (the seed's workers in one
//! process) and starts in its own task, the same code for all: a backend that cannot start
//! yet (its consumer not bound, its API away at recovery) holds no other up. Until a backend
//! has recovered, the scheduler counts none of its slots as free, so nothing is claimed for
//! slots whose executors are not known yet.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use tokio::sync::{Notify, watch};

use crate::backend::keep_alive::KeepAlive;
use crate::backend::pod::pause::{PriorityClassTried, WarmPools};
use crate::backend::reconciler::{Reconciler, Restarts};
use crate::backend::worker::Worker;
use crate::backend::{Backend, Context};
use crate::backend_kind::BackendKind;
use crate::capability::CapabilityKey;
use crate::claim::scheduler::{Pool, Scheduler};
use crate::claim::waiting::WaitingWatch;
use crate::config::Config;
use crate::queue::STREAM;
use crate::queue::assignment::SealingKey;
use crate::queue::consumer::{CappedConsumer, ConsumerSettings};
use crate::queue::producer::Producer;
use crate::task::ledger::Ledger;
use crate::task::spec::{ExecutorTemplate, GiteaForExecutors};
use tenantci_core::forge::gitea::client::RunnerClient;
use tenantci_core::forge::gitea::proto::DeclareRequest;

/// What a leadership term needs; cloned into each term.
#[derive(Clone)]
pub(super) struct Shared {
    pub cfg: Config,
    /// The backend layer's view: Gitea and the claim ledger behind their ports.
    pub ctx: Context,
    /// The same Gitea client and ledger, concrete, for the scheduler, the labels' Declare
    /// and the waiting-jobs watch.
    pub runner: RunnerClient,
    pub ledger: Ledger,
    /// The tenant cluster (the warm pools' Deployments).
    pub kube: kube::Client,
    /// Whether a term settled the warm pools' PriorityClass (once per process).
    pub priority_class: Arc<PriorityClassTried>,
    /// Every backend this dispatcher runs, in registration order (the default backend first).
    pub backends: Vec<Arc<dyn Backend>>,
    pub producer: Producer,
    pub worker_client: async_nats::Client,
    pub capability_key: CapabilityKey,
    pub sealing_key: SealingKey,
    pub facade_ca_pem: String,
    /// Gitea as the executors' proxies reach it.
    pub gitea: GiteaForExecutors,
    /// The webhook receiver's nudges, for the scheduler of the current term.
    pub nudge: Arc<Notify>,
    /// The Forgejo API token of `[waiting_jobs]`.
    pub waiting_token: Option<tenantci_core::secret::Secret>,
}

pub(super) struct Term {
    stop: watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl Term {
    /// Starts a term in the background: binding the consumers and recovery may retry for a
    /// while (NATS or a backend's API away), and the runtime must stay responsive to SIGTERM
    /// and to losing the lease meanwhile.
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

/// One term's life: every backend started in its own task, the scheduler over their pools,
/// keep-alive over all of them, until `stop`; then wait for them.
async fn run_term(s: Shared, mut stop_rx: watch::Receiver<bool>) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut starting = Vec::new();
    for executors in &s.backends {
        let ready = Arc::new(AtomicBool::new(false));
        let (shared, executors, mut stop) = (s.clone(), executors.clone(), stop_rx.clone());
        starting.push((executors.backend(), ready.clone()));
        tasks.spawn(async move {
            let mut backend = tokio::task::JoinSet::new();
            if start_backend(&shared, executors, &mut stop, &mut backend).await {
                ready.store(true, Ordering::SeqCst);
                while backend.join_next().await.is_some() {}
            }
        });
    }
    let mut pools = Vec::new();
    for (backend, ready) in starting {
        let Some(consumer) = lookup(&s, backend, &mut stop_rx).await else {
            return;
        };
        pools.push(Pool {
            backend,
            consumer,
            capacity: s.cfg.capacity.of(backend),
            ready,
        });
    }
    tasks.spawn(declare(
        s.runner.clone(),
        s.cfg.declared_labels(),
        stop_rx.clone(),
    ));
    tasks.spawn(scheduler(&s, pools).run(stop_rx.clone()));
    if let Some(watch) = waiting_watch(&s) {
        tasks.spawn(watch.run(stop_rx.clone()));
    }
    if s.cfg.executor.classes.iter().any(|c| c.warm.is_some()) {
        tasks.spawn(warm_pools(&s).run(stop_rx.clone()));
    }
    let keep_alive = KeepAlive {
        ctx: s.ctx.clone(),
        backends: s.backends.clone(),
        interval: s.cfg.gitea.keepalive_interval.get(),
    };
    tasks.spawn(keep_alive.run(stop_rx.clone()));
    let _ = stop_rx.wait_for(|s| *s).await;
    while tasks.join_next().await.is_some() {}
}

/// Declares the registration's labels (`gitea.labels` and every class label) at Gitea, as a
/// runner does at each start, so a class added to the config is claimable after a restart
/// without re-running `init`. Tried until Gitea answers: an outage delays it, never the term.
async fn declare(gitea: RunnerClient, labels: Vec<String>, mut stop: watch::Receiver<bool>) {
    let req = DeclareRequest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        labels,
        capabilities: Vec::new(),
    };
    loop {
        match gitea.declare(&req).await {
            Ok(_) => {
                tracing::info!(labels = ?req.labels, "labels declared at Gitea");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot declare the labels at the forge; trying again in 5s (jobs of undeclared labels wait at the forge)")
            }
        }
        if stopped_within(&mut stop, Duration::from_secs(5)).await {
            return;
        }
    }
}

/// One backend: its consumer bound, recovery from the claim ledger and what the backend
/// lists, then its reconciler and worker. False: stopped first.
async fn start_backend(
    s: &Shared,
    executors: Arc<dyn Backend>,
    stop_rx: &mut watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> bool {
    let backend = executors.backend();
    let Some(consumer) = bind_consumer(s, backend, stop_rx).await else {
        return false;
    };
    let mut reconciler = Reconciler::new(
        executors.clone(),
        s.ctx.clone(),
        restarts(s),
        consumer.clone(),
    );
    loop {
        match reconciler.recover().await {
            Ok(()) => break,
            Err(e) => {
                tracing::error!(error = %e, %backend, "recovery of the {backend} backend's executors failed (its API or the claim ledger); trying again in 2s ({backend} tasks wait in the queue)");
                if stopped_within(stop_rx, Duration::from_secs(2)).await {
                    return false;
                }
            }
        }
    }
    tasks.spawn(reconciler.run(stop_rx.clone()));
    let worker = Arc::new(Worker {
        executors,
        template: template(s),
        ctx: s.ctx.clone(),
    });
    let mut stop = stop_rx.clone();
    tasks.spawn(async move {
        consumer
            .run(move |job| worker.clone().handle(job), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    });
    true
}

/// Binds `backend`'s consumer, retrying while NATS or the topology is away; None: stopped.
async fn bind_consumer(
    s: &Shared,
    backend: BackendKind,
    stop_rx: &mut watch::Receiver<bool>,
) -> Option<Arc<CappedConsumer>> {
    loop {
        match CappedConsumer::bind(
            s.worker_client.clone(),
            backend,
            s.cfg.capacity.of(backend) as usize,
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

/// `backend`'s consumer for its depth, as the scheduler reads it, retrying while NATS or the
/// topology is away; None: stopped.
async fn lookup(
    s: &Shared,
    backend: BackendKind,
    stop_rx: &mut watch::Receiver<bool>,
) -> Option<PullConsumer> {
    loop {
        match async_nats::jetstream::new(s.worker_client.clone())
            .get_consumer_from_stream(backend.consumer(), STREAM)
            .await
        {
            Ok(c) => return Some(c),
            Err(e) => {
                tracing::error!(error = %e, %backend, "cannot look up the consumer; nothing is claimed until it is found (run `tenantci queue init`)");
                if stopped_within(stop_rx, Duration::from_secs(5)).await {
                    return None;
                }
            }
        }
    }
}

/// The waiting-jobs watch of `[waiting_jobs]` (validated with the config), nudging this
/// term's scheduler.
fn waiting_watch(s: &Shared) -> Option<WaitingWatch> {
    let w = s.cfg.waiting_jobs.as_ref()?;
    Some(WaitingWatch {
        forge: s.runner.clone(),
        scope: w.scope().ok()?,
        token: s.waiting_token.clone()?,
        interval: w.interval.get(),
        labels: s.cfg.declared_labels(),
        metrics: s.ctx.metrics.clone(),
        nudge: s.nudge.clone(),
    })
}

fn scheduler(s: &Shared, pools: Vec<Pool>) -> Scheduler {
    Scheduler {
        gitea: s.runner.clone(),
        forge: s.cfg.gitea.forge,
        producer: s.producer.clone(),
        pools,
        sealing_key: s.sealing_key.clone(),
        registry: s.ctx.registry.clone(),
        ledger: s.ledger.clone(),
        metrics: s.ctx.metrics.clone(),
        polling: crate::claim::scheduler::Polling::of(&s.cfg.gitea, s.cfg.webhook.as_ref()),
        nudge: s.nudge.clone(),
        classes: s.cfg.executor.classes.clone(),
        warm: s.ctx.warm.clone(),
    }
}

fn warm_pools(s: &Shared) -> WarmPools {
    WarmPools {
        client: s.kube.clone(),
        namespace: s.cfg.cluster.namespace.clone(),
        executor: s.cfg.executor.clone(),
        demand: s.ctx.warm.clone(),
        priority_class: s.priority_class.clone(),
        registry: s.ctx.registry.clone(),
        metrics: s.ctx.metrics.clone(),
    }
}

fn template(s: &Shared) -> ExecutorTemplate {
    ExecutorTemplate {
        namespace: s.cfg.cluster.namespace.clone(),
        facade_url: s.cfg.facade.url.clone(),
        facade_ca_pem: s.facade_ca_pem.clone(),
        gitea: s.gitea.clone(),
        runner_name: s.cfg.gitea.runner_name.clone(),
        executor: s.cfg.executor.clone(),
        capability_key: s.capability_key.clone(),
        sealing_key: s.sealing_key.clone(),
        // A loaded config is valid, so a present section parses.
        identity: s.cfg.identity.as_ref().and_then(|i| i.parse().ok()),
        cache_grant_lifetime: s.cfg.cache.as_ref().map(|c| c.grant_lifetime.get()),
    }
}

fn restarts(s: &Shared) -> Restarts {
    Restarts {
        claim: s.cfg.claim.clone(),
        template: template(s),
    }
}
