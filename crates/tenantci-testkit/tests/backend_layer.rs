//! The backend layer's decisions (worker, reconciler, recovery, keep-alive) against in-memory
//! doubles: which executor starts, which is deleted, what Gitea is told. No NATS, apiserver or
//! forge; every step is one call (`handle`, `pass`, `recover`, `round`), so no test waits on a
//! clock.

use std::sync::Arc;
use std::time::Duration;
use tenantci_dispatch::task_id::TaskId;

use tokio::sync::Semaphore;

use tenantci_core::forge::gitea::proto::TaskResult;
use tenantci_dispatch::backend::keep_alive::KeepAlive;
use tenantci_dispatch::backend::reconciler::{Reconciler, Restarts};
use tenantci_dispatch::backend::worker::Worker;
use tenantci_dispatch::backend::{Backend, Observed, StartError, pod, vm};
use tenantci_dispatch::backend_kind::BackendKind;
use tenantci_dispatch::capability::CapabilityKey;
use tenantci_dispatch::queue::assignment::{Assignment, SealingKey};
use tenantci_dispatch::queue::consumer::{Job, Outcome, Slot};
use tenantci_dispatch::sizing::ExecutorSettings;
use tenantci_dispatch::task::Claim;
use tenantci_dispatch::task::Progress;
use tenantci_dispatch::task::ledger::{Entry, Phase};
use tenantci_dispatch::task::report;
use tenantci_dispatch::task::spec::{ExecutorTemplate, GiteaForExecutors};
use tenantci_testkit::fake_executors::{FakeExecutors, FakeSlots, Fakes, Start, unfetched};

const DEADLINE: Duration = Duration::from_secs(180);
const PAST: Duration = Duration::from_secs(181);

/// One backend (pod) with its doubles and the sealing key its assignments are sealed with.
struct World {
    fakes: Fakes,
    pod: Arc<FakeExecutors>,
    key: SealingKey,
}

impl World {
    fn new() -> Self {
        World {
            fakes: Fakes::new(),
            pod: FakeExecutors::new(pod::KIND),
            key: SealingKey::generate(),
        }
    }

    /// `task`'s assignment for `attempt`, as stored beside its executor and in the ledger.
    fn assignment(&self, task: TaskId, attempt: u32) -> Assignment {
        let labels = vec!["self-hosted".to_string()];
        // A runner.v1 `Task` holding only its id (field 1, a varint): the tests' ids are small.
        let gitea_task = [0x08, u8::try_from(task.get()).expect("a small task id")];
        Assignment::seal(
            &self.key,
            &task.to_string(),
            attempt,
            pod::KIND,
            labels,
            &gitea_task,
        )
        .expect("seals")
    }

    /// An executor of `task`'s `attempt` that the reconciler knows (registered as running).
    fn running(&self, o: Observed) {
        let sealed = self.assignment(o.task, o.attempt).to_json();
        self.fakes.registry.running(o.task, pod::KIND, || None);
        self.pod.put(o, Some(sealed));
    }

    fn template(&self) -> ExecutorTemplate {
        ExecutorTemplate {
            namespace: "dynamic-runner".into(),
            facade_url: "https://10.0.0.5:8443".into(),
            facade_ca_pem: String::new(),
            gitea: GiteaForExecutors::default(),
            runner_name: "tenantci".into(),
            executor: ExecutorSettings::with_images(
                format!("gitea/act_runner@sha256:{}", "a".repeat(64)),
                format!("tenantci@sha256:{}", "b".repeat(64)),
            ),
            capability_key: CapabilityKey::generate(),
            sealing_key: self.key.clone(),
            identity: None,
            cache_grant_lifetime: None,
        }
    }

    fn reconciler(&self, slots: Arc<FakeSlots>) -> Reconciler {
        let restarts = Restarts {
            claim: Claim {
                start_deadline: DEADLINE.into(),
                max_attempts: 3,
            },
            template: self.template(),
        };
        Reconciler::new(self.pod.clone(), self.fakes.ctx(), restarts, slots)
    }

    fn worker(&self) -> Arc<Worker> {
        Arc::new(Worker {
            executors: self.pod.clone(),
            template: self.template(),
            ctx: self.fakes.ctx(),
        })
    }

    /// The `delivered`th delivery of `task`'s attempt 1, holding a slot of its own.
    fn delivery(&self, task: TaskId, delivered: i64, last_delivery: bool) -> Job {
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let a = self.assignment(task, 1);
        Job::outside_a_consumer(a, delivered, last_delivery, Slot::of_permit(permit))
    }

    fn keep_alive(&self, backends: Vec<Arc<dyn Backend>>) -> KeepAlive {
        KeepAlive {
            ctx: self.fakes.ctx(),
            backends,
            interval: Duration::from_secs(60),
        }
    }
}

fn start(task: TaskId, attempt: u32) -> Start {
    Start {
        task,
        attempt,
        fresh: false,
    }
}

/// Created, then the start deadline passes with no FetchTask (image pull stuck): the pass
/// deletes the executor and starts attempt 2 in its place. Guards against a stuck executor
/// left alone until Gitea's zombie limit, and against the new attempt started before the old
/// one is deleted (the delete would then remove the new one: nothing would be listed).
#[tokio::test]
async fn an_executor_that_never_fetched_is_replaced_by_the_next_attempt() {
    let w = World::new();
    w.running(unfetched(TaskId::new(1), 1, PAST));
    let mut r = w.reconciler(FakeSlots::new(4));
    r.pass().await.unwrap();
    assert_eq!(w.pod.deletes(), vec![TaskId::new(1)]);
    assert_eq!(w.pod.starts(), vec![start(TaskId::new(1), 2)]);
    assert_eq!(w.pod.observed(TaskId::new(1)).map(|o| o.attempt), Some(2));
    let entry = w
        .fakes
        .ledger
        .entry(TaskId::new(1))
        .expect("the replacement is recorded");
    assert_eq!((entry.attempt, entry.phase), (2, Phase::Started));
    assert!(w.fakes.gitea.failures().is_empty());
    assert!(
        w.fakes.registry.is_running(TaskId::new(1)),
        "the replacement keeps the slot"
    );
}

/// Created, fetched its task (the backend cannot tell; the claim ledger has it as fetched),
/// then the start deadline passes while the job runs: the executor is kept. Guards against
/// a running job killed and run a second time by a replacement.
#[tokio::test]
async fn an_executor_that_fetched_is_kept_past_the_deadline() {
    let w = World::new();
    w.running(Observed {
        progress: None,
        ..unfetched(TaskId::new(2), 1, PAST)
    });
    w.fakes
        .ledger
        .put(Entry::step(TaskId::new(2), 1, pod::KIND, Phase::Fetched));
    let mut r = w.reconciler(FakeSlots::new(4));
    r.pass().await.unwrap();
    assert!(w.pod.deletes().is_empty());
    assert!(w.pod.starts().is_empty());
    assert!(w.fakes.gitea.failures().is_empty());
}

/// Attempt `max_attempts` created, then its deadline passes unfetched too: FAILURE with a
/// line saying why, and the executor deleted. Guards against replacing forever (a broken
/// image never starts) and against a task left claimed with no one to report it.
#[tokio::test]
async fn the_last_attempt_past_its_deadline_is_reported_failure() {
    let w = World::new();
    w.running(unfetched(TaskId::new(3), 3, PAST));
    let mut r = w.reconciler(FakeSlots::new(4));
    r.pass().await.unwrap();
    assert!(w.pod.starts().is_empty(), "no fourth attempt");
    let failures = w.fakes.gitea.failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0, TaskId::new(3));
    assert!(
        failures[0].1.contains("did not fetch its task"),
        "{failures:?}"
    );
    assert_eq!(w.pod.deletes(), vec![TaskId::new(3)]);
    assert!(!w.fakes.registry.is_running(TaskId::new(3)));
    assert!(
        w.fakes
            .ledger
            .entry(TaskId::new(3))
            .is_some_and(|e| e.is_final())
    );
}

/// Deadline passed, old executor deleted, then the backend's API is away for the new one's
/// create (two passes), then back: the third pass creates attempt 2. Guards against the
/// replacement lost with the outage, and against the deleted executor taken for a vanished
/// one (FAILURE) while its replacement waits.
#[tokio::test]
async fn a_replacement_the_backend_did_not_take_is_tried_again_next_pass() {
    let w = World::new();
    w.running(unfetched(TaskId::new(1), 1, PAST));
    for _ in 0..2 {
        w.pod
            .fail_next_start(StartError::Unavailable("apiserver away".into()));
    }
    let mut r = w.reconciler(FakeSlots::new(4));
    for tries in 1..=2 {
        r.pass().await.unwrap();
        assert_eq!(w.pod.start_tries(), tries);
        assert!(w.pod.starts().is_empty());
        assert!(w.fakes.gitea.failures().is_empty(), "pass {tries}");
        assert!(
            w.fakes.registry.is_running(TaskId::new(1)),
            "the slot stays with the task"
        );
    }
    r.pass().await.unwrap();
    assert_eq!(w.pod.starts(), vec![start(TaskId::new(1), 2)]);
    assert_eq!(w.pod.deletes(), vec![TaskId::new(1)], "deleted once");
    assert!(w.fakes.gitea.failures().is_empty());
}

/// Deadline passed, old executor deleted, backend away for the new one, then the user
/// cancels the job at Gitea: the next pass starts no replacement, reports nothing, and frees
/// the slot. Guards against an executor started for a task Gitea ended (a job run after its
/// cancel) and against FAILURE reported over CANCELLED.
#[tokio::test]
async fn a_waiting_replacement_of_a_task_gitea_ended_is_dropped() {
    let w = World::new();
    w.running(unfetched(TaskId::new(1), 1, PAST));
    w.pod
        .fail_next_start(StartError::Unavailable("apiserver away".into()));
    let mut r = w.reconciler(FakeSlots::new(4));
    r.pass().await.unwrap();
    assert_eq!(w.pod.deletes(), vec![TaskId::new(1)]);
    w.fakes
        .gitea
        .set_result(TaskId::new(1), TaskResult::Cancelled);
    r.pass().await.unwrap();
    r.pass().await.unwrap();
    assert!(w.pod.starts().is_empty());
    assert_eq!(w.pod.start_tries(), 1);
    assert!(w.fakes.gitea.failures().is_empty());
    assert!(
        !w.fakes.registry.is_running(TaskId::new(1)),
        "its slot is free"
    );
    let cancelled = report::final_step(
        TaskId::new(1),
        BackendKind::new("pod"),
        TaskResult::Cancelled,
    )
    .result;
    assert_eq!(
        w.fakes.ledger.entry(TaskId::new(1)).and_then(|e| e.result),
        cancelled
    );
}

/// A crash with three executors started (the ledger has them, with their assignments), all
/// lost with the old term; the new term has two slots: recovery takes the slots, the pass
/// starts two executors, the third waits (kept alive as queued) until an executor leaves,
/// then starts. Guards against recovery running past capacity (three executors on two
/// slots) and against the third lost task dropped.
#[tokio::test]
async fn recovery_starts_no_more_lost_executors_than_free_slots() {
    let w = World::new();
    for task in 1..=3 {
        let step = Entry::step(TaskId::new(task), 1, pod::KIND, Phase::Started);
        w.fakes
            .ledger
            .put(step.with_assignment(&w.assignment(TaskId::new(task), 1)));
    }
    let slots = FakeSlots::new(2);
    let mut r = w.reconciler(slots.clone());
    r.recover().await.unwrap();
    r.pass().await.unwrap();
    assert_eq!(
        w.pod.starts(),
        vec![start(TaskId::new(1), 2), start(TaskId::new(2), 2)]
    );
    assert_eq!(
        w.fakes.registry.queued_tasks(),
        vec![TaskId::new(3)],
        "kept alive while it waits"
    );
    assert!(!w.fakes.registry.is_running(TaskId::new(3)));
    r.pass().await.unwrap();
    assert_eq!(w.pod.starts().len(), 2, "still no slot");

    // An executor leaves (the reconciler deleted it): its slot is the one recovery awaits.
    w.fakes.registry.finished(TaskId::new(1));
    for _ in 0..100 {
        if slots.available() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    r.pass().await.unwrap();
    assert_eq!(
        w.pod.starts(),
        vec![
            start(TaskId::new(1), 2),
            start(TaskId::new(2), 2),
            start(TaskId::new(3), 2)
        ]
    );
    assert!(w.fakes.registry.queued_tasks().is_empty());
}

/// Claimed and queued (no executor yet), or created and not fetched, then the user cancels
/// at Gitea, then keep-alive's UpdateTask learns CANCELLED: the queued assignment is
/// withdrawn (the worker drops it), the executor deleted and its slot freed, and the next
/// reconciler pass reports nothing. Guards against a cancelled job started or run anyway,
/// and against FAILURE reported over CANCELLED for the executor deleted on purpose.
#[tokio::test]
async fn keep_alive_withdraws_a_task_gitea_cancelled_and_reports_nothing_over_it() {
    let w = World::new();
    w.fakes.registry.queued(TaskId::new(5), pod::KIND);
    w.running(unfetched(TaskId::new(6), 1, Duration::from_secs(10)));
    for task in [5, 6] {
        w.fakes
            .gitea
            .set_result(TaskId::new(task), TaskResult::Cancelled);
    }
    w.keep_alive(vec![w.pod.clone()]).round().await;
    assert!(w.fakes.registry.queued_tasks().is_empty());
    assert!(
        w.fakes.registry.take_withdrawn(TaskId::new(5)),
        "the worker drops its assignment"
    );
    let deletes = w.pod.deletes();
    assert!(
        deletes.contains(&TaskId::new(5)) && deletes.contains(&TaskId::new(6)),
        "{deletes:?}"
    );
    assert!(w.pod.observed(TaskId::new(6)).is_none());
    assert!(
        !w.fakes.registry.is_running(TaskId::new(6)),
        "its slot is free"
    );
    let cancelled = report::final_step(
        TaskId::new(5),
        BackendKind::new("pod"),
        TaskResult::Cancelled,
    )
    .result;
    for task in [5, 6] {
        assert_eq!(
            w.fakes
                .ledger
                .entry(TaskId::new(task))
                .and_then(|e| e.result),
            cancelled
        );
    }
    w.reconciler(FakeSlots::new(4)).pass().await.unwrap();
    assert!(
        w.fakes.gitea.failures().is_empty(),
        "nothing over CANCELLED"
    );
}

/// Tasks at every point before their first report, on two backends (queued; created and not
/// fetched; fetched and silent; the backend cannot tell and the ledger says), beside tasks
/// that reported: one round sends exactly one UpdateTask to each task not reported yet, none
/// to the others. Guards against Gitea failing a waiting task after ten minutes unheard, and
/// against heartbeats over a runner's own reports.
#[tokio::test]
async fn keep_alive_updates_every_unreported_task_on_every_backend_once() {
    let w = World::new();
    let vm = FakeExecutors::new(vm::KIND);
    let age = Duration::from_secs(10);
    let with = |task, progress| Observed {
        progress,
        ..unfetched(task, 1, age)
    };
    w.fakes.registry.queued(TaskId::new(1), pod::KIND);
    // Queued and listed already (created, not registered yet): still one UpdateTask.
    w.fakes.registry.queued(TaskId::new(2), pod::KIND);
    w.pod
        .put(with(TaskId::new(2), Some(Progress::Unfetched)), None);
    w.pod
        .put(with(TaskId::new(3), Some(Progress::Fetched)), None);
    w.pod
        .put(with(TaskId::new(4), Some(Progress::Reported)), None);
    w.pod.put(with(TaskId::new(5), None), None);
    w.fakes
        .ledger
        .put(Entry::step(TaskId::new(5), 1, pod::KIND, Phase::Started));
    w.pod.put(
        Observed {
            terminal: true,
            ..with(TaskId::new(6), Some(Progress::Unfetched))
        },
        None,
    );
    vm.put(with(TaskId::new(7), Some(Progress::Unfetched)), None);
    vm.put(with(TaskId::new(8), None), None);
    w.fakes
        .ledger
        .put(Entry::step(TaskId::new(8), 1, vm::KIND, Phase::Reported));
    w.keep_alive(vec![w.pod.clone(), vm.clone()]).round().await;
    assert_eq!(
        w.fakes.gitea.keep_alives(),
        [1, 2, 3, 5, 7].map(TaskId::new)
    );
    assert!(w.pod.deletes().is_empty() && vm.deletes().is_empty());
}

/// A first delivery: the executor is started fresh (no lookup), the start recorded in the
/// ledger with its sealed assignment (what recovery restarts a lost executor from) and the
/// task registered as running. Guards against an executor the next term would not know.
#[tokio::test]
async fn a_first_delivery_starts_its_executor_and_records_it() {
    let w = World::new();
    let outcome = w
        .worker()
        .handle(w.delivery(TaskId::new(7), 1, false))
        .await;
    assert!(matches!(outcome, Outcome::Started), "{outcome:?}");
    let fresh = Start {
        fresh: true,
        ..start(TaskId::new(7), 1)
    };
    assert_eq!(w.pod.starts(), vec![fresh]);
    let entry = w
        .fakes
        .ledger
        .entry(TaskId::new(7))
        .expect("the start is recorded");
    assert_eq!(entry.phase, Phase::Started);
    assert!(entry.assignment.is_some(), "kept for recovery");
    assert!(w.fakes.registry.is_running(TaskId::new(7)));
}

/// Created and started, then the dispatcher died before the ack; the job ran to its end and
/// its executor was deleted; then the assignment is delivered again. Gitea has the task as
/// over: nothing starts, the ledger learns the end. Guards against a job run twice.
#[tokio::test]
async fn a_redelivery_of_a_task_gitea_ended_is_not_started_again() {
    let w = World::new();
    w.fakes
        .gitea
        .set_result(TaskId::new(7), TaskResult::Success);
    let outcome = w
        .worker()
        .handle(w.delivery(TaskId::new(7), 2, false))
        .await;
    assert!(matches!(outcome, Outcome::Started), "acked: {outcome:?}");
    assert!(w.pod.starts().is_empty());
    let entry = w
        .fakes
        .ledger
        .entry(TaskId::new(7))
        .expect("the end is recorded");
    assert_eq!(entry.phase, Phase::Final);
}

/// Attempt 1 replaced by attempt 2 (the ledger says so), then attempt 1's assignment is
/// delivered again: it is dropped. Guards against two executors of one task.
#[tokio::test]
async fn an_assignment_a_later_attempt_replaced_is_dropped() {
    let w = World::new();
    w.fakes
        .ledger
        .put(Entry::step(TaskId::new(7), 2, pod::KIND, Phase::Started));
    let outcome = w
        .worker()
        .handle(w.delivery(TaskId::new(7), 1, false))
        .await;
    assert!(matches!(outcome, Outcome::Started), "acked: {outcome:?}");
    assert!(w.pod.starts().is_empty());
}

/// Claimed and queued, cancelled at Gitea, keep-alive withdrew it, then the worker gets its
/// assignment: nothing starts. Guards against a cancelled job run anyway.
#[tokio::test]
async fn a_task_withdrawn_while_queued_is_not_started() {
    let w = World::new();
    w.fakes.registry.queued(TaskId::new(7), pod::KIND);
    assert!(w.fakes.registry.withdraw(TaskId::new(7)));
    let outcome = w
        .worker()
        .handle(w.delivery(TaskId::new(7), 1, false))
        .await;
    assert!(matches!(outcome, Outcome::Started), "acked: {outcome:?}");
    assert!(w.pod.starts().is_empty());
}

/// The backend's API is away: the delivery goes back to the queue while more deliveries
/// follow, and on the last one the task is reported FAILURE saying why. Guards against a
/// task left claimed with nobody to start it, and against FAILURE for a passing outage.
#[tokio::test]
async fn a_backend_away_is_retried_and_reported_on_the_last_delivery() {
    let w = World::new();
    let away = || StartError::Unavailable("connection refused".into());
    w.pod.fail_next_start(away());
    let outcome = w
        .worker()
        .handle(w.delivery(TaskId::new(7), 1, false))
        .await;
    assert!(matches!(outcome, Outcome::Retry(_)), "{outcome:?}");
    assert!(w.fakes.gitea.failures().is_empty());
    w.pod.fail_next_start(away());
    let outcome = w.worker().handle(w.delivery(TaskId::new(7), 5, true)).await;
    assert!(matches!(outcome, Outcome::Poison(_)), "{outcome:?}");
    let failures = w.fakes.gitea.failures();
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0]
            .1
            .contains("stayed unavailable through 5 deliveries"),
        "{failures:?}"
    );
    assert!(!w.fakes.registry.is_running(TaskId::new(7)));
}

/// The third backend, `fake` (`backend::fake`, its executors directories): the worker starts
/// one from a delivery, the hand-out gives its runner the sealed assignment once and consumes
/// it, and after the terminal marker the reconciler's pass deletes it and frees its slot, the
/// same code as for a Pod or a sandbox. Guards against a layer above `backend/` that only
/// works for the backends it was written with.
#[tokio::test]
async fn a_task_runs_end_to_end_on_the_third_backend() {
    use std::os::unix::fs::PermissionsExt as _;
    use tenantci_dispatch::backend::fake::{self, FakeDirs};
    use tenantci_dispatch::backend::{AssignmentHandout as _, ExecutorLifecycle as _, Presence};

    let w = World::new();
    let root = tempfile::tempdir().unwrap();
    let dirs = Arc::new(FakeDirs::new(root.path().to_path_buf()));
    let worker = Worker {
        executors: dirs.clone(),
        template: w.template(),
        ctx: w.fakes.ctx(),
    };
    let a = Assignment::seal(&w.key, "7", 1, fake::KIND, vec!["fake".into()], &[0x08, 7])
        .expect("seals");
    let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    let job = Job::outside_a_consumer(a.clone(), 1, false, Slot::of_permit(permit));
    let outcome = Arc::new(worker).handle(job).await;
    assert!(matches!(outcome, Outcome::Started), "{outcome:?}");
    let runner = root.path().join("7/.runner");
    assert_eq!(
        std::fs::metadata(&runner).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(w.fakes.registry.is_running(TaskId::new(7)));
    assert_eq!(
        w.fakes.ledger.entry(TaskId::new(7)).unwrap().backend,
        fake::KIND
    );

    assert_eq!(
        dirs.fetch(TaskId::new(7), 2).await.unwrap(),
        None,
        "another attempt's"
    );
    assert_eq!(
        dirs.fetch(TaskId::new(7), 1).await.unwrap(),
        Some(a.to_json())
    );
    assert!(matches!(
        dirs.consume(TaskId::new(7), 1).await.unwrap(),
        Presence::Present
    ));
    assert_eq!(
        dirs.fetch(TaskId::new(7), 1).await.unwrap(),
        None,
        "handed out once"
    );

    let slots = FakeSlots::new(0);
    let restarts = Restarts {
        claim: Claim {
            start_deadline: DEADLINE.into(),
            max_attempts: 3,
        },
        template: w.template(),
    };
    let mut reconciler = Reconciler::new(dirs.clone(), w.fakes.ctx(), restarts, slots);
    reconciler.pass().await.unwrap();
    assert!(
        root.path().join("7").exists(),
        "kept until Gitea has its end"
    );
    dirs.mark_terminal(TaskId::new(7)).await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(!root.path().join("7").exists(), "deleted after its end");
    assert!(
        !w.fakes.registry.is_running(TaskId::new(7)),
        "its slot freed"
    );
}
