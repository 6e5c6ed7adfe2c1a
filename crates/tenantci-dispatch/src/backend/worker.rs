//! A backend worker: pulls assignments from its backend's consumer only while an admission
//! slot is free (`queue::consumer::CappedConsumer`), starts one executor per assignment, and
//! acks once the executor exists. The slot stays taken until the reconciler removes the
//! executor, so slots = live executors.
//!
//! [`Executors`] is where a backend's executors live: the pod backend implements it with
//! executor Pods ([`ExecutorObjects`]); a VM backend would implement it against its sandbox
//! API (not built yet: see docs/runbooks/gitea-dispatcher.md).
//!
//! No task runs twice: a redelivered assignment whose executor is gone is started again only
//! if Gitea still has the task open (a redelivery can follow a crash between creating the
//! executor and the ack, and the executor may have finished meanwhile), and an assignment the
//! claim ledger has as final, or superseded by a later attempt, is dropped. Each start is
//! recorded in the ledger with its sealed assignment.

use std::future::Future;
use std::sync::Arc;

use crate::backend::pod::executor::{ExecutorIdentity, ExecutorSpec};
use crate::backend::pod::objects::{CreateError, Created, ExecutorObjects};
use crate::backend::registry::Registry;
use crate::backend::report;
use crate::facade::capability::{self, CapabilityKey};
use crate::identity;
use crate::metrics::Metrics;
use crate::queue::Backend;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::queue::consumer::{Job, Outcome};
use crate::queue::ledger::{Entry, Ledger, Phase};
use tenantci_core::forge::gitea::client::RunnerClient;
use tenantci_core::forge::gitea::proto::TaskResult;

/// Why an executor could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Worth another delivery (the backend is unreachable, throttling, 5xx).
    #[error("{0}")]
    Unavailable(String),
    /// It will never work (refused by policy, invalid, someone else's object).
    #[error("{0}")]
    Refused(String),
}

pub trait Executors: Send + Sync + 'static {
    fn backend(&self) -> Backend;
    /// Starts the executor, idempotently by task id. `fresh`: no executor of this task can
    /// exist yet (the assignment's first delivery, and the claim ledger names no other
    /// attempt), so a backend whose idempotence costs a lookup may skip it.
    fn start(
        &self,
        spec: &ExecutorSpec,
        sealed_assignment: &[u8],
        fresh: bool,
    ) -> impl Future<Output = Result<Created, StartError>> + Send;
    /// Whether the task's executor exists.
    fn exists(&self, task: i64) -> impl Future<Output = Result<bool, StartError>> + Send;
}

fn classify(e: kube::Error) -> StartError {
    match &e {
        kube::Error::Api(s) if s.code == 429 || s.code >= 500 => StartError::Unavailable(format!(
            "the tenant apiserver answered {}: {}",
            s.code, s.message
        )),
        kube::Error::Api(s) => StartError::Refused(format!(
            "the tenant apiserver refused it ({}): {}",
            s.code, s.message
        )),
        _ => StartError::Unavailable(format!("cannot reach the tenant apiserver: {e}")),
    }
}

impl Executors for ExecutorObjects {
    fn backend(&self) -> Backend {
        Backend::Pod
    }

    /// Idempotent by name (a create that finds its objects checks they are this
    /// assignment's), so `fresh` saves nothing here.
    async fn start(
        &self,
        spec: &ExecutorSpec,
        sealed: &[u8],
        _fresh: bool,
    ) -> Result<Created, StartError> {
        self.create(spec, sealed).await.map_err(|e| match e {
            CreateError::Foreign { .. } => StartError::Refused(e.to_string()),
            CreateError::Api(e) => classify(e),
        })
    }

    async fn exists(&self, task: i64) -> Result<bool, StartError> {
        self.any_exists(task).await.map_err(classify)
    }
}

/// What the claim ledger says of an assignment about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Its task is over, or a later attempt replaced it.
    Stale,
    /// It is the task's current attempt (or the ledger has no entry).
    Current,
    /// The ledger could not be read.
    Unknown,
}

/// What every executor of this dispatcher gets.
#[derive(Clone)]
pub struct ExecutorTemplate {
    pub namespace: String,
    pub facade_url: String,
    pub facade_ca_pem: String,
    pub runner_name: String,
    pub executor: crate::config::Executor,
    /// Executor identity on: the IDs are rendered from each task's sealed context.
    pub identity: Option<TemplateIdentity>,
}

/// What the worker needs to give an executor its task's SPIFFE ID.
#[derive(Clone)]
pub struct TemplateIdentity {
    pub settings: identity::Parsed,
    /// Opens the assignment for the task's repository and job (never kept).
    pub sealing_key: SealingKey,
}

impl ExecutorTemplate {
    /// The SPIFFE ID the executor of `a` must present (None: identity off). An error is a task
    /// that can have no ID (its context lacks the repository or job, or they make no ID).
    pub fn spiffe_id(&self, a: &Assignment) -> Result<Option<ExecutorIdentity>, String> {
        let Some(t) = &self.identity else {
            return Ok(None);
        };
        let id = identity::assignment_id(&t.settings, &t.sealing_key, a)?;
        Ok(Some(ExecutorIdentity {
            spiffe_id: id.to_string(),
            facade_id: t.settings.facade_id.to_string(),
        }))
    }

    /// The executor of one task attempt, with its capability (bound to its SPIFFE ID when
    /// identity is on).
    pub fn spec(
        &self,
        key: &CapabilityKey,
        task: i64,
        attempt: u32,
        labels: Vec<String>,
        identity: Option<ExecutorIdentity>,
    ) -> ExecutorSpec {
        let bound = identity.as_ref().map(|i| i.spiffe_id.as_str());
        ExecutorSpec {
            namespace: self.namespace.clone(),
            task_id: task,
            attempt,
            assignment_id: capability::assignment_id(task, attempt),
            capability: key.token_for(task, attempt, bound),
            identity,
            facade_url: self.facade_url.clone(),
            facade_ca_pem: self.facade_ca_pem.clone(),
            labels,
            runner_name: self.runner_name.clone(),
            executor: self.executor.clone(),
        }
    }
}

pub struct Worker<E: Executors> {
    pub executors: E,
    pub template: ExecutorTemplate,
    pub capability_key: CapabilityKey,
    pub gitea: RunnerClient,
    pub registry: Arc<Registry>,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
}

impl<E: Executors> Worker<E> {
    /// What the ledger says of this assignment: its task is over or a later attempt replaced
    /// it (it must not start), or it may start, knowing whether the ledger could be read. A
    /// ledger that cannot be read does not hold a start up.
    async fn standing(&self, task: i64, a: &Assignment) -> Standing {
        match self.ledger.get(task).await {
            Ok(Some(e)) if e.is_final() => {
                tracing::info!(
                    task,
                    "the claim ledger has the task as over; its assignment is dropped"
                );
                Standing::Stale
            }
            Ok(Some(e)) if e.attempt > a.attempt => {
                tracing::info!(
                    task,
                    attempt = a.attempt,
                    current = e.attempt,
                    "a later attempt replaced this assignment; it is dropped"
                );
                Standing::Stale
            }
            Ok(_) => Standing::Current,
            Err(e) => {
                tracing::warn!(task, error = %e, "cannot read the claim ledger; starting anyway");
                Standing::Unknown
            }
        }
    }

    /// The consumer's handler for one delivery.
    pub async fn handle(self: Arc<Self>, job: Job) -> Outcome {
        let a = &job.assignment;
        let backend = self.executors.backend();
        let Ok(task) = a.task_id.parse::<i64>() else {
            return Outcome::Poison(format!("`{}` is not a Gitea task id", a.task_id));
        };
        if self.registry.take_withdrawn(task) {
            tracing::info!(
                task,
                "the task was cancelled at Gitea while queued; no executor is started"
            );
            return Outcome::Started;
        }
        let standing = self.standing(task, a).await;
        if standing == Standing::Stale {
            return Outcome::Started;
        }
        let fresh = job.delivered == 1 && standing == Standing::Current;
        if job.delivered > 1 && !self.registry.is_running(task) {
            match self.already_over(task).await {
                Ok(Some(result)) => {
                    tracing::info!(
                        task,
                        "the task ended at Gitea already; its executor is not started again"
                    );
                    self.registry.finished(task);
                    self.ledger.note(report::final_step(task, result)).await;
                    return Outcome::Started;
                }
                Ok(None) => {}
                Err(why) => return Outcome::Retry(why),
            }
        }
        let identity = match self.template.spiffe_id(a) {
            Ok(i) => i,
            Err(why) => return self.refused(task, backend, why).await,
        };
        let spec = self.template.spec(
            &self.capability_key,
            task,
            a.attempt,
            a.labels.clone(),
            identity,
        );
        match self.executors.start(&spec, &a.to_json(), fresh).await {
            Ok(created) => {
                let step = Entry::step(task, a.attempt, backend, Phase::Started);
                self.ledger.note(step.with_assignment(a)).await;
                self.registry
                    .running(task, backend, || Some(job.hold_slot()));
                self.metrics
                    .in_use(backend, self.registry.running_count(backend));
                tracing::info!(task, attempt = a.attempt, %backend, ?created, "executor started");
                Outcome::Started
            }
            Err(StartError::Unavailable(why)) if !job.last_delivery => Outcome::Retry(why),
            // The queue will not deliver it again (a finite `max_deliver`): say so at Gitea
            // rather than leave the task claimed with nobody to start it.
            Err(StartError::Unavailable(why)) => {
                let line = format!(
                    "the {backend} backend stayed unavailable through {} deliveries of the assignment: {why}",
                    job.delivered
                );
                self.fail(task, backend, &line).await;
                Outcome::Poison(why)
            }
            Err(StartError::Refused(why)) => self.refused(task, backend, why).await,
        }
    }

    /// An executor that will never start: the task fails at Gitea with the reason.
    async fn refused(&self, task: i64, backend: Backend, why: String) -> Outcome {
        let line = format!("the executor could not be created: {why}");
        self.fail(task, backend, &line).await;
        Outcome::Poison(why)
    }

    /// Reports FAILURE with `line` for a task whose assignment leaves the queue unstarted.
    async fn fail(&self, task: i64, backend: Backend, line: &str) {
        match report::fail(&self.gitea, task, line).await {
            Ok(()) => self.ledger.note(report::failed_step(task)).await,
            Err(e) => tracing::warn!(task, error = %e, "cannot report the failure to Gitea"),
        }
        self.metrics.failed(backend);
        self.registry.finished(task);
    }

    /// A redelivery without an executor: is the task over at Gitea? Its result when it is.
    async fn already_over(&self, task: i64) -> Result<Option<TaskResult>, String> {
        if self
            .executors
            .exists(task)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(None);
        }
        report::keep_alive(&self.gitea, task)
            .await
            .map(|r| r.is_final().then_some(r))
            .map_err(|e| format!("cannot ask Gitea about task {task}: {e}"))
    }
}
