//! A backend's worker: pulls assignments from its backend's consumer only while an admission
//! slot is free (`queue::consumer::CappedConsumer`), starts one executor per assignment
//! through [`Backend`], and acks once the executor exists. The slot stays taken until the
//! reconciler removes the executor, so slots = live executors. One worker per backend, the
//! same code.
//!
//! No task runs twice: a redelivered assignment whose executor is gone is started again only
//! if Gitea still has the task open (a redelivery can follow a crash between creating the
//! executor and the ack, and the executor may have finished meanwhile), and an assignment the
//! claim ledger has as final, or superseded by a later attempt, is dropped. Each start is
//! recorded in the ledger with its sealed assignment.
//!
//! A backend whose API is away is waited out inside the delivery for its
//! [`ExecutorLifecycle::patience`](crate::backend::ExecutorLifecycle::patience) (the
//! consumer's progress acks keep the assignment ours), then the assignment goes back to the
//! queue; deliveries are unlimited by default, so an outage costs latency only.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Context;
use crate::backend::{Backend, Created, StartError};
use crate::queue::assignment::Assignment;
use crate::queue::consumer::{Job, Outcome};
use crate::task::ledger::{Entry, Phase};
use crate::task::report;
use crate::task::spec::{ExecutorSpec, ExecutorTemplate};
use crate::task_id::TaskId;
use tenantci_core::forge::gitea::proto::TaskResult;

/// The longest pause between two tries within a delivery.
const RETRY_MAX: Duration = Duration::from_secs(5);

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

/// One backend's worker: the handler of its consumer's deliveries.
pub struct Worker {
    /// The backend it starts executors on.
    pub executors: Arc<dyn Backend>,
    /// Opens an assignment into its executor's spec (images, resources, keys from the config).
    pub template: ExecutorTemplate,
    /// Where starts and failures are recorded and reported.
    pub ctx: Context,
}

/// Starts `spec`'s executor, waiting out an outage of the backend's API for its patience.
/// Only the first try may skip the lookup (`fresh`): a create that timed out may have
/// happened.
pub async fn start_patiently(
    executors: &dyn Backend,
    spec: &ExecutorSpec,
    sealed: &[u8],
    fresh: bool,
) -> Result<Created, StartError> {
    let deadline = Instant::now() + executors.patience();
    let mut pause = Duration::from_millis(250);
    let mut fresh = fresh;
    loop {
        let tried = executors.start(spec, sealed, fresh).await;
        fresh = false;
        match tried {
            Err(StartError::Unavailable(why)) if Instant::now() + pause < deadline => {
                tracing::warn!(task = spec.task_id.get(), error = %why, retry_in = ?pause, "the {} is not created yet; trying again (the task stays queued)", executors.nouns().executor);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
            done => return done,
        }
    }
}

impl Worker {
    /// What the ledger says of this assignment: its task is over or a later attempt replaced
    /// it (it must not start), or it may start, knowing whether the ledger could be read. A
    /// ledger that cannot be read does not hold a start up.
    async fn standing(&self, task: TaskId, a: &Assignment) -> Standing {
        match self.ctx.ledger.get(task).await {
            Ok(Some(e)) if e.is_final() => {
                tracing::info!(
                    task = task.get(),
                    "the claim ledger has the task as over; its assignment is dropped"
                );
                Standing::Stale
            }
            Ok(Some(e)) if e.attempt > a.attempt => {
                tracing::info!(
                    task = task.get(),
                    attempt = a.attempt,
                    current = e.attempt,
                    "a later attempt replaced this assignment; it is dropped"
                );
                Standing::Stale
            }
            Ok(_) => Standing::Current,
            Err(e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot read the claim ledger; starting anyway");
                Standing::Unknown
            }
        }
    }

    /// The consumer's handler for one delivery: admitted (not withdrawn, not stale, not over
    /// at Gitea), opened into its executor's spec, its class slot held, then started.
    pub async fn handle(self: Arc<Self>, job: Job) -> Outcome {
        let a = &job.assignment;
        let task = match a.task() {
            Ok(task) => task,
            Err(e) => return Outcome::Poison(e.to_string()),
        };
        let fresh = match self.admit(task, &job).await {
            Ok(fresh) => fresh,
            Err(done) => return done,
        };
        let spec = match self.template.open(a).and_then(|o| self.template.spec(&o)) {
            Ok(spec) => spec,
            Err(why) => return self.refused(task, why).await,
        };
        if let Some(waits) = self.hold_class(task, &spec, &job).await {
            return waits;
        }
        self.start(task, &spec, &job, fresh).await
    }

    /// Whether this delivery may start an executor, and whether it is `fresh` (see
    /// [`ExecutorLifecycle::start`](crate::backend::ExecutorLifecycle::start)); the outcome
    /// when it may not: the task was withdrawn while queued, the ledger has it as over or
    /// superseded, or (a redelivery without an executor) Gitea ended it already.
    async fn admit(&self, task: TaskId, job: &Job) -> Result<bool, Outcome> {
        if self.ctx.registry.take_withdrawn(task) {
            tracing::info!(
                task = task.get(),
                "the task was cancelled at Gitea while queued; no executor is started"
            );
            return Err(Outcome::Started);
        }
        let standing = self.standing(task, &job.assignment).await;
        if standing == Standing::Stale {
            return Err(Outcome::Started);
        }
        if job.delivered > 1 && !self.ctx.registry.is_running(task) {
            match self.already_over(task).await {
                Ok(Some(result)) => {
                    tracing::info!(
                        task = task.get(),
                        "the task ended at Gitea already; its executor is not started again"
                    );
                    self.ctx.registry.finished(task);
                    self.ctx
                        .ledger
                        .note(report::final_step(task, self.executors.backend(), result))
                        .await;
                    return Err(Outcome::Started);
                }
                Ok(None) => {}
                Err(why) => return Err(Outcome::Retry(why)),
            }
        }
        Ok(job.delivered == 1 && standing == Standing::Current)
    }

    /// Takes a slot of the task's class; the outcome when all are taken: wait for one, or on
    /// the last delivery, FAILURE.
    async fn hold_class(&self, task: TaskId, spec: &ExecutorSpec, job: &Job) -> Option<Outcome> {
        let c = spec.class.as_ref()?;
        if self.ctx.registry.reserve_class(task, &c.name, c.capacity) {
            return None;
        }
        let why = format!("its class `{}` has all {} slots taken", c.name, c.capacity);
        if !job.last_delivery {
            return Some(Outcome::Wait(why));
        }
        let line = format!(
            "{why} through {} deliveries of the assignment",
            job.delivered
        );
        self.fail(task, &line).await;
        Some(Outcome::Poison(why))
    }

    /// Starts the executor (waiting out an outage for the backend's patience) and records it:
    /// the ledger's `started` with the sealed assignment, the registry's slot, the metrics.
    async fn start(&self, task: TaskId, spec: &ExecutorSpec, job: &Job, fresh: bool) -> Outcome {
        let (a, backend) = (&job.assignment, self.executors.backend());
        let warm_slot = spec
            .class
            .as_ref()
            .and_then(|c| Some((c.name.as_str(), self.ctx.warm.has_warm_slot(&c.name)?)));
        let started = start_patiently(&*self.executors, spec, &a.to_json(), fresh).await;
        if let (Some((class, hit)), Ok(Created::New)) = (warm_slot, &started) {
            self.ctx.metrics.warm_start(class, hit);
        }
        let created = match started {
            Ok(created) => created,
            Err(e) => {
                self.ctx.registry.release_class(task);
                return self.not_started(task, job, e).await;
            }
        };
        let step = Entry::step(task, a.attempt, backend, Phase::Started);
        self.ctx.ledger.note(step.with_assignment(a)).await;
        self.ctx
            .registry
            .running(task, backend, || Some(job.hold_slot()));
        self.ctx
            .metrics
            .in_use(backend, self.ctx.registry.running_count(backend));
        tracing::info!(task = task.get(), attempt = a.attempt, %backend, ?created, "executor started");
        Outcome::Started
    }

    /// A start the backend did not take: tried again on the next delivery, or, when the queue
    /// will not deliver it again (a finite `max_deliver`), FAILURE at Gitea rather than a task
    /// left claimed with nobody to start it.
    async fn not_started(&self, task: TaskId, job: &Job, e: StartError) -> Outcome {
        match e {
            StartError::Unavailable(why) if !job.last_delivery => Outcome::Retry(why.to_string()),
            StartError::Unavailable(why) => {
                let line = format!(
                    "the {} backend stayed unavailable through {} deliveries of the assignment: {why}",
                    self.executors.backend(),
                    job.delivered
                );
                self.fail(task, &line).await;
                Outcome::Poison(why.to_string())
            }
            StartError::Refused(why) => self.refused(task, why.to_string()).await,
        }
    }

    /// An executor that will never start: the task fails at Gitea with the reason.
    async fn refused(&self, task: TaskId, why: String) -> Outcome {
        let line = format!("the executor could not be created: {why}");
        self.fail(task, &line).await;
        Outcome::Poison(why)
    }

    /// Reports FAILURE with `line` for a task whose assignment leaves the queue unstarted.
    async fn fail(&self, task: TaskId, line: &str) {
        match self.ctx.gitea.fail(task, line).await {
            Ok(()) => {
                self.ctx
                    .ledger
                    .note(report::failed_step(task, self.executors.backend()))
                    .await
            }
            Err(e) => {
                tracing::warn!(task = task.get(), error = %e, "cannot report the failure to the forge; not retried (the forge fails the task after 10 minutes)")
            }
        }
        self.ctx.metrics.failed(self.executors.backend());
        self.ctx.registry.finished(task);
    }

    /// A redelivery without an executor: is the task over at Gitea? Its result when it is.
    async fn already_over(&self, task: TaskId) -> Result<Option<TaskResult>, String> {
        if self
            .executors
            .exists(task)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(None);
        }
        self.ctx
            .gitea
            .keep_alive(task)
            .await
            .map(|r| r.is_final().then_some(r))
            .map_err(|e| format!("cannot ask Gitea about task {task}: {e}"))
    }
}
