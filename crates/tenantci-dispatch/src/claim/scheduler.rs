//! The scheduler (leader only): claims tasks from Gitea with the one registration, bounded by
//! free capacity, seals each into an assignment and queues it on its backend's subject.
//!
//! Capacity (the seed's rule, one registration for every backend): a FetchTask is sent only
//! while running executors plus assignments queued or being started (each consumer's pending
//! and ack-pending, read from JetStream, so assignments a previous leader queued count too),
//! over every backend, stay below the total capacity (the sum of theirs). A claimed task goes
//! to its backend's subject by its runs-on labels; when that backend is full it waits there,
//! and the total keeps counting it, so no more is claimed than the slots of all can take soon.
//! Each worker admits only into its own backend's slots. Against Forgejo one FetchTask asks for all
//! the free slots and a lost answer is repeated with its request key (`claim::fetch`).
//!
//! When to poll ([`Polling`]): without a webhook, every `fetch_interval` while a slot is free,
//! slowing to `fetch_interval_idle` after [`IDLE_AFTER`] without a task. With the webhook, a
//! `workflow_job` delivery wakes the scheduler at once (tasks version 0, so Gitea picks even
//! if the version cursor has not moved for us) and the poll is only the safety net, every
//! `webhook.fetch_interval`. Nudges are coalesced: the receiver's `Notify` keeps one permit
//! however many deliveries arrive while a FetchTask is in flight, and a nudged FetchTask after
//! an empty one waits for the nudge budget (`claim::nudge`: a burst, then one per
//! `webhook.nudge_spacing`), so a flood of deliveries costs Gitea a bounded rate.
//!
//! With resource classes (`sizing::class`), a task's labels pick its class and the class its
//! backend; the class's own capacity is held by the worker, so a task of a full class waits
//! in its backend's queue and counts there.
//!
//! A claimed task is never dropped silently: if it cannot be queued (or needs a backend this
//! dispatcher does not run, or its labels pick no class or two), it is reported to Gitea as
//! FAILURE with a log line saying why. Every claim is written to the claim ledger
//! (`task::ledger`) with its sealed assignment as it is queued (both at once), so recovery can
//! start it again when the dispatcher dies before the queue took it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use prost::Message as _;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::backend::catalog;
use crate::backend_kind::BackendKind;
use crate::claim::fetch::Fetcher;
use crate::claim::nudge::{NudgeBudget, Pacer};
use crate::claim::routing;
use crate::claim::settings::{Gitea, Webhook};
use crate::metrics::Metrics;
use crate::queue::assignment::context_str;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::queue::producer::Producer;
use crate::sizing::class::{self, ExecutorClass};
use crate::task::history::Observation;
use crate::task::ledger::{Entry, Ledger, Phase};
use crate::task::registry::{Description, Registry};
use crate::task::report;
use crate::task_id::TaskId;
use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::client::RunnerClient;
use tenantci_core::forge::gitea::proto::Task;

/// How long without a task before polling slows to `fetch_interval_idle` (no webhook).
pub const IDLE_AFTER: Duration = Duration::from_secs(300);
/// How often a full dispatcher looks at its slots again (freed slots also wake it at once).
const FULL_RECHECK: Duration = Duration::from_millis(200);
/// Backoff after a failed FetchTask.
const ERROR_BACKOFF: Duration = Duration::from_secs(2);
/// How long a claimed task may wait for the queue to store it. A three-node cluster that lost
/// a server answers nothing for the stream until its raft group has a new leader (seconds);
/// a full stream drains as backends work. Meanwhile keep-alive holds the task open at Gitea
/// and the scheduler claims nothing more; after this long the queue is down, not electing.
const QUEUE_PATIENCE: Duration = Duration::from_secs(300);
/// The longest pause between two tries to queue a claimed task.
const QUEUE_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long the scheduler waits for a FetchTask answer. Gitea claims the task before it
/// answers, so an answer given up on is a task claimed and lost: wait through ordinary stalls
/// (a database lock, a garbage-collection pause, a proxy holding the connection while Gitea
/// restarts). Nothing else waits on the scheduler; a drain waits at most this long for the
/// FetchTask in flight (the Deployment's 60 s grace period covers it). act_runner uses 5 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The leader's claim loop: FetchTask while a slot is free, each task sealed and queued.
pub struct Scheduler {
    /// Gitea, as the scheduler's registration: FetchTask, and FAILURE for a task it refuses.
    pub gitea: RunnerClient,
    /// Gitea or Forgejo: what one FetchTask may ask for (`claim::fetch`).
    pub forge: Forge,
    /// Publishes each sealed assignment on its backend's subject.
    pub producer: Producer,
    /// One per backend this dispatcher runs.
    pub pools: Vec<Pool>,
    /// Seals each assignment, so only the dispatcher can open it.
    pub sealing_key: SealingKey,
    /// The term's registry: running executors, and each queued task with its description.
    pub registry: Arc<Registry>,
    /// The claim ledger: each claim with its sealed assignment, before or as it is queued.
    pub ledger: Ledger,
    /// Claims, failures, FetchTask latency, queue depth and slots in use.
    pub metrics: Arc<Metrics>,
    /// When to ask again after Gitea had nothing.
    pub polling: Polling,
    /// Fired by the webhook receiver (leader only): FetchTask now.
    pub nudge: Arc<Notify>,
    /// The resource classes; a task's labels pick one, which picks its backend.
    pub classes: Vec<ExecutorClass>,
    /// The classes' demand: each claim is told to their warm pools.
    pub warm: Arc<crate::sizing::demand::WarmDemand>,
}

/// One backend's pool of executors, as the scheduler counts it.
pub struct Pool {
    /// Which backend.
    pub backend: BackendKind,
    /// Its consumer, for its pending counts (read as ci-worker).
    pub consumer: PullConsumer,
    /// Its concurrent executors (`[capacity]`, or the backend's default).
    pub capacity: u32,
    /// Whether the backend has recovered its slots; until then none of them is free.
    pub ready: Arc<AtomicBool>,
}

impl Pool {
    /// (capacity, running, queued), its gauges updated; None when its consumer cannot be
    /// read (then nothing is claimed: the queue's depth is unknown). A backend that has not
    /// recovered yet has no free slot, though what waits for it counts.
    async fn load(&mut self, registry: &Registry, metrics: &Metrics) -> Option<(u32, usize, u64)> {
        let backend = self.backend;
        let queued = match self.consumer.info().await {
            Ok(info) => crate::queue::depth::depth(info),
            Err(e) => {
                tracing::warn!(error = %e, %backend, "cannot read the {backend} consumer's depth from NATS; not claiming for it until the next pass");
                return None;
            }
        };
        let running = registry.running_count(backend);
        metrics.queue_depth(backend, queued);
        metrics.in_use(backend, running);
        let capacity = if self.ready.load(Ordering::SeqCst) {
            self.capacity
        } else {
            0
        };
        Some((capacity, running, queued))
    }
}

/// When the scheduler polls after Gitea had nothing (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// Polling alone: `interval` while tasks came recently, `idle` after `idle_after`.
    Timer {
        /// `gitea.fetch_interval`.
        interval: Duration,
        /// `gitea.fetch_interval_idle`.
        idle: Duration,
        /// How long without a task is an idle spell ([`IDLE_AFTER`]).
        idle_after: Duration,
    },
    /// Webhook nudges within `nudges`, and a poll every `interval` as the safety net.
    Webhook {
        /// `webhook.fetch_interval`.
        interval: Duration,
        /// How often nudges may cause a FetchTask.
        nudges: NudgeBudget,
    },
}

impl Polling {
    /// The dispatcher's polling from its config: webhook nudges when `[webhook]` is set.
    pub fn of(gitea: &Gitea, webhook: Option<&Webhook>) -> Polling {
        match webhook {
            Some(w) => Polling::Webhook {
                interval: w.fetch_interval.get(),
                nudges: w.nudge_budget(),
            },
            None => Polling::Timer {
                interval: gitea.fetch_interval.get(),
                idle: gitea.fetch_interval_idle.get(),
                idle_after: IDLE_AFTER,
            },
        }
    }

    /// The wait after an empty FetchTask, `since_task` after the last task claimed.
    pub fn after_empty(&self, since_task: Duration) -> Duration {
        match *self {
            Polling::Timer {
                interval,
                idle,
                idle_after,
            } => {
                if since_task > idle_after {
                    idle
                } else {
                    interval
                }
            }
            Polling::Webhook { interval, .. } => interval,
        }
    }

    /// FetchTask calls per second Gitea sees from an idle dispatcher with a free slot:
    /// (right after a task, after the idle spell).
    pub fn rates(&self) -> (f64, f64) {
        let per_s = |d: Duration| 1.0 / d.as_secs_f64();
        match *self {
            Polling::Timer { interval, idle, .. } => (per_s(interval), per_s(idle)),
            Polling::Webhook { interval, .. } => (per_s(interval), per_s(interval)),
        }
    }

    /// The start-up log line: what this dispatcher will cost Gitea.
    pub fn describe(&self) -> String {
        let (busy, idle) = self.rates();
        match *self {
            Polling::Timer {
                interval,
                idle: idle_interval,
                idle_after,
            } => format!(
                "polling only: FetchTask every {interval:?} ({busy:.2}/s) while a slot is free, every {idle_interval:?} ({idle:.2}/s) after {}s without a task; a webhook (`dispatch init --webhook-listen`) picks up faster for less",
                idle_after.as_secs()
            ),
            Polling::Webhook { interval, nudges } => format!(
                "webhook nudges (at most {} at once, then one per {:?}), and a safety-net FetchTask every {interval:?} ({busy:.2}/s) while a slot is free",
                nudges.burst, nudges.spacing
            ),
        }
    }
}

/// Free slots: capacity minus running minus queued (pure).
pub fn free_slots(capacity: u32, running: usize, queued: u64) -> u64 {
    (capacity as u64).saturating_sub(running as u64 + queued)
}

impl Scheduler {
    /// Free slots over every backend together.
    async fn free(&mut self) -> u64 {
        let (mut capacity, mut running, mut queued) = (0, 0, 0);
        for pool in &mut self.pools {
            let Some((c, r, q)) = pool.load(&self.registry, &self.metrics).await else {
                return 0;
            };
            (capacity, running, queued) = (capacity + c, running + r, queued + q);
        }
        free_slots(capacity, running, queued)
    }

    /// The pacer of nudged FetchTasks (polling alone has no nudges; its budget is moot).
    fn pacer(&self) -> Pacer {
        Pacer::new(match self.polling {
            Polling::Webhook { nudges, .. } => nudges,
            Polling::Timer { interval, .. } => NudgeBudget {
                spacing: interval,
                burst: 1,
            },
        })
    }

    /// Runs until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut fetcher = Fetcher::new(self.forge);
        let mut last_task = Instant::now();
        let mut pacer = self.pacer();
        while !*stop.borrow() {
            let free = self.free().await;
            let wait = if free == 0 && !fetcher.recovering() {
                // Not a FetchTask: only the consumer's depth is read again.
                Some(FULL_RECHECK)
            } else {
                let started = Instant::now();
                let polled = fetcher.fetch(&self.gitea, free).await;
                self.metrics.fetched(started.elapsed());
                if polled.is_ok() {
                    self.metrics.forge_answered();
                }
                match polled {
                    Ok(tasks) if !tasks.is_empty() => {
                        last_task = Instant::now();
                        for task in tasks {
                            self.enqueue(task, stop.clone()).await;
                        }
                        None
                    }
                    Ok(_) => Some(self.polling.after_empty(last_task.elapsed())),
                    Err(e) => {
                        self.fetch_failed(&e, fetcher.recovering());
                        Some(ERROR_BACKOFF)
                    }
                }
            };
            if let Some(wait) = wait {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.registry.changed() => {}
                    _ = self.nudge.notified() => {
                        // The job may not have moved our version cursor: make Gitea pick.
                        fetcher.forget_version();
                        // Nudges meanwhile leave one permit: they are this FetchTask's.
                        let paced = pacer.next_wait();
                        if !paced.is_zero() {
                            self.metrics.nudge_paced();
                            tokio::select! {
                                _ = tokio::time::sleep(paced) => {}
                                _ = stop.changed() => {}
                            }
                        }
                    }
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// Logs a failed FetchTask. `keyed`: the next call repeats it with its request key, so a
    /// lost answer's tasks come back (Forgejo); without a key they are lost to the sweep.
    fn fetch_failed(&self, e: &tenantci_core::forge::gitea::ClientError, keyed: bool) {
        self.metrics.fetch_failed(&e.to_string());
        let forge = &self.gitea.config().base_url;
        let again = ERROR_BACKOFF.as_secs();
        if e.is_unauthenticated() {
            tracing::error!(
                %forge,
                "{} at {forge} does not know the scheduler's registration any more; nothing is claimed until it is re-registered with `tenantci dispatch init` (delete scheduler.json first); FetchTask is tried again every {again}s",
                self.forge.display_name()
            );
        } else if e.request_key_locked() {
            tracing::info!(
                "{} is still working on the FetchTask with this request key (it answered `locked`); repeating it with the same key in {}s, which gets whatever that call assigned",
                self.forge.display_name(),
                ERROR_BACKOFF.as_secs()
            );
        } else if e.claim_may_be_lost() && keyed {
            tracing::warn!(%forge, error = %e, "FetchTask at {forge} failed after it was sent; repeating it in {again}s with the same request key, so the forge hands out again whatever it had assigned");
        } else if e.claim_may_be_lost() {
            self.metrics.answer_lost();
            tracing::warn!(%forge, error = %e, "FetchTask at {forge} failed after it was sent; a task may have been claimed and lost (Gitea fails it after 10 minutes; counted in tenantci_dispatch_fetch_task_answers_lost_total); asking again in {again}s");
        } else {
            tracing::warn!(%forge, error = %e, "FetchTask at {forge} failed; nothing was claimed, asking again in {again}s (tasks wait at the forge meanwhile)");
        }
    }

    async fn enqueue(&self, task: Task, stop: watch::Receiver<bool>) {
        let id = TaskId::new(task.id);
        let labels = routing::runs_on(task.workflow_payload.as_deref().unwrap_or_default());
        let (backend, class) = match class::pick(&self.classes, &labels) {
            Ok(Some(c)) => {
                self.warm.claimed(&c.name);
                (catalog::of_class(c), Some(c.name.clone()))
            }
            Ok(None) => (routing::route(&labels), None),
            Err(why) => return self.refuse(id, routing::route(&labels), &why).await,
        };
        if !self.pools.iter().any(|p| p.backend == backend) {
            let why = format!(
                "this job asks for the {backend} backend, which this dispatcher does not run ({}); use `runs-on: pod` or turn the {backend} backend on",
                catalog::turned_on_by(backend)
            );
            return self.refuse(id, backend, &why).await;
        }
        // The class travels with the assignment: whoever starts the executor takes it, and
        // does not pick again.
        let class_name = class.clone();
        let sealed = Assignment::seal_in_class(
            &self.sealing_key,
            &id.to_string(),
            1,
            backend,
            labels,
            class,
            &task.encode_to_vec(),
        );
        let assignment = match sealed {
            Ok(a) => a,
            Err(e) => {
                let why = format!("the task could not be sealed: {e}");
                return self.refuse(id, backend, &why).await;
            }
        };
        // Registered before the publish: the worker may start the executor before the PubAck
        // is back, and its `running` must find (and clear) this entry.
        self.registry.queued(id, backend);
        let job = description(&task, &assignment.labels, class_name);
        if let Some(history) = self.ledger.history() {
            history.note(id, described(&job, backend));
        }
        self.registry.describe(id, job);
        // The ledger's `claimed` entry and the publish go out together, one round trip of
        // claim latency instead of two, with the same guarantee as one after the other: a
        // crash leaves the task in the queue, in the ledger (recovery queues it again), in
        // both, or in neither (the gap between FetchTask's answer and the first write, which
        // no order closes). A publish that keeps failing is retried while the ledger holds
        // the claim. `queued` is noted only after both, so it never lands before `claimed`.
        let claimed = Entry::step(id, 1, backend, Phase::Claimed).with_assignment(&assignment);
        let (_, queueing) = tokio::join!(
            self.ledger.note_first(claimed),
            self.queue_patiently(&assignment, stop)
        );
        match queueing {
            Queueing::Queued(published) => {
                self.ledger
                    .note(Entry::step(id, 1, backend, Phase::Queued))
                    .await;
                self.metrics.claimed(backend);
                tracing::info!(task = id.get(), %backend, ?published, "claimed and queued");
            }
            Queueing::Stopped => tracing::warn!(
                task = id.get(),
                "stopping before the queue took the task; the claim ledger holds its assignment and the next leader queues it"
            ),
            Queueing::Failed(e) => {
                self.registry.finished(id);
                self.give_up(id, backend, &format!("the task could not be queued: {e}"))
                    .await
            }
        }
    }

    /// Publishes `assignment`, trying again after a transient failure with a growing pause
    /// until [`QUEUE_PATIENCE`] runs out or the dispatcher stops. The Msg-Id makes a repeat
    /// that the stream had in fact stored a duplicate, never a second copy.
    async fn queue_patiently(
        &self,
        assignment: &Assignment,
        mut stop: watch::Receiver<bool>,
    ) -> Queueing {
        let deadline = Instant::now() + QUEUE_PATIENCE;
        let mut pause = Duration::from_millis(100);
        loop {
            let e = match self.producer.publish(assignment).await {
                Ok(published) => return Queueing::Queued(published),
                Err(e) if !e.is_transient() || Instant::now() + pause > deadline => {
                    return Queueing::Failed(e);
                }
                Err(e) => e,
            };
            tracing::warn!(task = %assignment.task_id, error = %e, retry_in = ?pause, "the NATS queue did not take the task yet; trying again (the task stays open at Gitea)");
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|stopping| *stopping) => return Queueing::Stopped,
            }
            pause = (pause * 2).min(QUEUE_RETRY_MAX);
        }
    }

    /// Gives up on a claimed task before it was queued: its claim goes to the ledger first
    /// (every claim is written there), then the task is reported as failed ([`Self::give_up`]).
    async fn refuse(&self, task: TaskId, backend: BackendKind, why: &str) {
        self.ledger
            .note(Entry::step(task, 1, backend, Phase::Claimed))
            .await;
        self.give_up(task, backend, why).await;
    }

    async fn give_up(&self, task: TaskId, backend: BackendKind, why: &str) {
        tracing::error!(task = task.get(), "{why}; reporting FAILURE to Gitea");
        self.metrics.failed(backend);
        match report::fail(&self.gitea, task, why).await {
            Ok(()) => self.ledger.note(report::failed_step(task, backend)).await,
            Err(e) => {
                tracing::error!(task = task.get(), forge = %self.gitea.config().base_url, error = %e, "cannot report the failure to the forge; not retried (the forge fails the task after 10 minutes)")
            }
        }
    }
}

/// What the status API shows of `task`'s job: its names from Gitea's context (strings there,
/// `run_number` and `run_id` too), never its tokens.
fn description(task: &Task, runs_on: &[String], class: Option<String>) -> Description {
    let text = |key| context_str(task, key).unwrap_or_default().to_string();
    let number = |key| context_str(task, key).and_then(|n| n.parse().ok());
    Description {
        repository: text("repository"),
        workflow: text("workflow"),
        job: text("job"),
        run: number("run_number").or_else(|| number("run_id")),
        runs_on: runs_on.to_vec(),
        class,
    }
}

/// What the task history keeps of a claimed job: who it is, never its secrets.
fn described(job: &Description, backend: BackendKind) -> Observation {
    Observation {
        repository: Some(job.repository.clone()).filter(|r| !r.is_empty()),
        run: job.run,
        backend: Some(backend),
        class: job.class.clone(),
        ..Observation::default()
    }
}

/// How queueing a claimed task ended.
enum Queueing {
    Queued(crate::queue::producer::Published),
    /// The dispatcher is stopping; the ledger entry (phase claimed) is left for recovery.
    Stopped,
    Failed(crate::queue::producer::PublishError),
}

#[cfg(test)]
mod tests {
    use super::Polling;
    use std::time::Duration;

    #[test]
    fn polling_slows_after_the_idle_spell_only_without_a_webhook() {
        let s = Duration::from_secs;
        let timer = Polling::Timer {
            interval: Duration::from_millis(200),
            idle: s(2),
            idle_after: s(300),
        };
        assert_eq!(timer.after_empty(s(10)), Duration::from_millis(200));
        assert_eq!(timer.after_empty(s(301)), s(2));
        assert_eq!(timer.rates(), (5.0, 0.5));
        let hook = Polling::Webhook {
            interval: s(5),
            nudges: super::NudgeBudget {
                spacing: Duration::from_millis(200),
                burst: 5,
            },
        };
        assert_eq!(hook.after_empty(s(0)), s(5));
        assert_eq!(hook.rates(), (0.2, 0.2));
        assert!(hook.describe().contains("0.20/s"), "{}", hook.describe());
        assert!(
            hook.describe()
                .contains("at most 5 at once, then one per 200ms"),
            "{}",
            hook.describe()
        );
        assert!(timer.describe().contains("5.00/s"), "{}", timer.describe());
    }

    #[test]
    fn free_slots_never_go_negative() {
        assert_eq!(super::free_slots(2, 0, 0), 2);
        assert_eq!(super::free_slots(2, 1, 1), 0);
        assert_eq!(super::free_slots(2, 3, 4), 0);
    }
}
