//! A dispatcher upgraded and rolled back with tasks in flight, as a Deployment's rolling
//! update does it: the previous release leads with tasks in every state a test can hold
//! still, on both backends and with the cache on; this tree's dispatcher starts beside it
//! behind the same Service, the previous one is sent SIGTERM (it drains and hands the Lease
//! back) and this one takes over; later the previous release comes back the same way. Every
//! task finishes exactly once (the Gitea double's record), none is lost, each executor is
//! created once, the cache entry saved under the previous release is restored under both,
//! and each leader's status lists every task it holds.
//!
//! The shape: 20 jobs. A pod class of 6 (pod capacity 10) and a vm class of 2 (vm capacity 3)
//! hold 6 Pods and 2 sandboxes with 5 more claimed jobs queued behind them; the other 7 wait
//! at the forge (FetchTask asks for no more than the free slots). Of the executors, one is
//! starting (nothing fetched), some fetched their task, some reported part of their log. The
//! claimed state lasts milliseconds (the unit tests hold it). Across the rollback the previous
//! release recovers executors this release created and starts a task this release claimed and
//! queued.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use tenantci_core::forge::gitea::proto::{LogRow, UpdateLogRequest};
use tenantci_dispatch::sizing::class::ExecutorClass;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::wait::eventually;

use crate::dispatch::cache::{Job, post_job, with_cache};
use crate::dispatch::harness::{Dispatcher, World};
use crate::util::{assert_exit, bin, run, scratch, stdout, tenantci};

/// The Service every instance is behind (its fixed facade address).
const SERVICE: &str = "tenantci-dispatcher";
/// The cache key the previous release's job saves.
const KEY: &str = "deps-skew-1";
const SAVED: &str = "saved under the previous release";

/// The jobs of the test, by name ([`enqueue`] gives their order at the forge).
struct Jobs {
    /// name -> (job id, runs on a VM).
    by_name: BTreeMap<&'static str, (i64, bool)>,
}

impl Jobs {
    fn job(&self, name: &str) -> i64 {
        self.by_name[name].0
    }
    fn vm(&self, name: &str) -> bool {
        self.by_name[name].1
    }
}

/// The executors the test plays, by task.
#[derive(Default)]
struct Flight {
    /// Executors that hold their task (fetched it), not yet finished.
    fetched: BTreeMap<i64, Executor>,
    /// Tasks the test finished.
    done: BTreeSet<i64>,
    /// Cache jobs in flight, by task.
    caches: BTreeMap<i64, Job>,
}

impl Flight {
    /// `task`'s executor once its Pod or sandbox exists.
    async fn executor(w: &World, task: i64, vm: bool) -> Executor {
        if vm {
            w.vm_executor(task).await
        } else {
            w.executor(task).await
        }
    }

    /// The executor of `task` fetches it.
    async fn fetch(&mut self, w: &World, task: i64, vm: bool) {
        let ex = Self::executor(w, task, vm).await;
        assert_eq!(
            ex.fetch().await.id,
            task,
            "the facade hands out the executor's own task"
        );
        self.fetched.insert(task, ex);
    }

    /// `task`'s executor sends its log line, not yet the last.
    async fn report(&self, task: i64) {
        report(&self.fetched[&task], task).await;
    }

    /// Every executor that holds its task finishes it.
    async fn finish_every_fetched(&mut self) {
        for (task, ex) in std::mem::take(&mut self.fetched) {
            ex.finish(task, &[&format!("ran task {task}")]).await;
            self.done.insert(task);
        }
    }

    /// `task` runs to SUCCESS (fetched first if it was not): its whole log, then the state.
    async fn finish(&mut self, w: &World, task: i64, vm: bool) {
        if !self.fetched.contains_key(&task) {
            self.fetch(w, task, vm).await;
        }
        let ex = self.fetched.remove(&task).unwrap();
        ex.finish(task, &[&format!("ran task {task}")]).await;
        self.done.insert(task);
    }
}

/// The task ids `d`'s status lists (`dispatch status -o json`, this tree's CLI), and their
/// states.
fn shown(d: &Dispatcher) -> BTreeMap<i64, String> {
    let o = run(tenantci()
        .args(["dispatch", "status", "-o", "json", "--status-address"])
        .arg(d.status_address().to_string()));
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let id = t["task"].as_i64().unwrap();
            (id, t["state"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Until `d`'s status lists every claimed task not yet finished; their states.
async fn shows_every_task(
    w: &World,
    d: &Dispatcher,
    jobs: &Jobs,
    f: &Flight,
) -> BTreeMap<i64, String> {
    let mut held = BTreeSet::new();
    for (job, _) in jobs.by_name.values() {
        if let Some(task) = w.job(*job).await["task_id"].as_i64()
            && !f.done.contains(&task)
        {
            held.insert(task);
        }
    }
    eventually(
        &format!("{}'s status to list tasks {held:?}", d.name),
        || async {
            let shown = shown(d);
            held.iter().all(|t| shown.contains_key(t)).then_some(shown)
        },
    )
    .await
}

/// The 20 jobs: 13 claimed by the first leader in forge order (waited for one by one, so the
/// first six pod jobs and two vm jobs get executors and the rest queue), then 7 that wait at
/// the forge. `cache-*` are jobs of sim/demo whose steps use the cache.
async fn enqueue(w: &World) -> Jobs {
    const CLAIMED: [(&str, bool); 13] = [
        ("cache-save", false),
        ("starting", false),
        ("fetched-1", false),
        ("fetched-2", false),
        ("reported-1", false),
        ("reported-2", false),
        ("vm-starting", true),
        ("vm-reported", true),
        ("queued-1", false),
        ("queued-2", false),
        ("queued-3", false),
        ("queued-4", false),
        ("vm-queued", true),
    ];
    const AT_FORGE: [(&str, bool); 7] = [
        ("vm-forge-1", true),
        ("vm-forge-2", true),
        ("cache-after-upgrade", false),
        ("forge-1", false),
        ("forge-2", false),
        ("forge-3", false),
        ("cache-after-rollback", false),
    ];
    let mut by_name = BTreeMap::new();
    for (i, (name, vm)) in CLAIMED.iter().chain(AT_FORGE.iter()).enumerate() {
        let label = if *vm { "vm" } else { "pod" };
        let context = serde_json::json!({ "repository": "sim/demo" });
        let job = post_job(w, name, context, label).await;
        if i < CLAIMED.len() {
            w.claimed(job).await;
        }
        by_name.insert(*name, (job, *vm));
    }
    Jobs { by_name }
}

/// The world: pod capacity 10 with a class of 6, vm capacity 3 with a class of 2, the cache in
/// `cache_dir`.
async fn world(cache_dir: &Path) -> World {
    let mut w = crate::dispatch::vm::world(10, 3).await;
    let mut pods = ExecutorClass::pod("ci", "100m", "128Mi", 6);
    pods.label = "pod".into();
    let mut vms = ExecutorClass::pod("vm", "2", "4Gi", 2);
    vms.backend = Some(tenantci_dispatch::backend::vm::KIND);
    w.base_mut().executor.classes = vec![pods, vms];
    with_cache(&mut w, cache_dir, 1024, 512);
    w
}

/// Starts `name` running `tenantci` behind the Service, as a standby beside the leader.
async fn standby(w: &mut World, tenantci: &Path, name: &str) -> Dispatcher {
    w.bin = tenantci.to_path_buf();
    let d = w.dispatcher_behind(name, SERVICE).await;
    d.wait_up().await;
    d.wait_leader(false).await;
    d
}

/// The rolling update's last step: `old` drains and hands the Lease back (exit 0), `new`
/// leads.
async fn hand_over(mut old: Dispatcher, new: &Dispatcher) {
    assert_eq!(old.terminate(), Some(0), "a drained dispatcher exits 0");
    new.wait_leader(true).await;
}

/// `task`'s log line, not yet the last (`no_more: false`), sent by `ex`.
async fn report(ex: &Executor, task: i64) {
    let row = LogRow {
        time: None,
        content: format!("ran task {task}"),
    };
    let log = UpdateLogRequest {
        task_id: task,
        index: 0,
        rows: vec![row],
        no_more: false,
    };
    ex.own().update_log(&log).await.unwrap();
}

/// Tasks (name, task) whose executor exists and which the test has neither fetched nor
/// finished, in forge order; cache jobs and `keep` left out.
async fn started(w: &World, jobs: &Jobs, f: &Flight, keep: &[&str]) -> Vec<(&'static str, i64)> {
    let pods: BTreeSet<String> = w
        .secrets()
        .await
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let sandboxes: BTreeSet<String> = w
        .opensandbox()
        .sandboxes(w.http())
        .await
        .iter()
        .filter_map(|s| {
            s["metadata"]["tenantci.io/task-id"]
                .as_str()
                .map(String::from)
        })
        .collect();
    let mut out = Vec::new();
    for (name, (job, vm)) in &jobs.by_name {
        let Some(t) = w.job(*job).await["task_id"].as_i64() else {
            continue;
        };
        let mine = name.starts_with("cache") || keep.contains(name);
        let played = f.done.contains(&t) || f.fetched.contains_key(&t);
        let exists = if *vm {
            sandboxes.contains(&t.to_string())
        } else {
            pods.contains(&format!("gitea-task-{t}"))
        };
        if !mine && !played && exists {
            out.push((*name, t));
        }
    }
    out.sort_by_key(|(_, t)| *t);
    out
}

/// Whether `task`'s executor Pod is there (its Secret is created first, its Pod next).
async fn has_pod(w: &World, task: i64) -> bool {
    let name = format!("gitea-task-{task}");
    let pods = w.pods().await;
    pods.iter()
        .any(|p| p.metadata.name.as_deref() == Some(name.as_str()))
}

/// The pod job `name`'s task once its Pod is there.
async fn up(w: &World, jobs: &Jobs, name: &str) -> Option<i64> {
    let t = w.job(jobs.job(name)).await["task_id"].as_i64()?;
    has_pod(w, t).await.then_some(t)
}

/// The pod job `name`'s task once its Pod is there; meanwhile other started tasks (not
/// `keep`) run to the end, so slots free up whichever task the dispatcher starts first (a
/// task claimed later may start before one queued earlier: a queued task is retried after a
/// pause, a new claim takes a free slot at once).
async fn run_until_up(w: &World, jobs: &Jobs, f: &mut Flight, name: &str, keep: &[&str]) -> i64 {
    loop {
        if let Some(t) = up(w, jobs, name).await {
            return t;
        }
        match started(w, jobs, f, keep).await.first() {
            Some((n, t)) => f.finish(w, *t, jobs.vm(n)).await,
            None => {
                let f = &*f;
                eventually(&format!("{name} or another task to start"), || async {
                    let next = up(w, jobs, name).await.is_some()
                        || !started(w, jobs, f, keep).await.is_empty();
                    next.then_some(())
                })
                .await
            }
        }
    }
}

/// The cache job of `task` restores the entry saved under the previous release, through a
/// proxy run by `proxy`, and ends.
async fn restores(w: &World, f: &mut Flight, task: i64, proxy: std::process::Command, when: &str) {
    let job = Job::on_pod(w, task, proxy).await;
    assert_eq!(
        job.restore(&[KEY]).await,
        Some((KEY.into(), SAVED.into())),
        "the entry saved under the previous release is restored {when}"
    );
    job.finish(w).await;
    f.done.insert(task);
}

/// Under the previous release: every state held (see the module's header).
async fn hold_every_state(
    w: &World,
    jobs: &Jobs,
    f: &mut Flight,
    previous: &Path,
    leader: &Dispatcher,
) {
    let saver = w.claimed(jobs.job("cache-save")).await;
    let saver = Job::on_pod(w, saver, super::previous(previous)).await;
    saver.save(KEY, SAVED).await;
    report(&saver.ex, saver.task).await;
    let saver_task = saver.task;
    f.caches.insert(saver_task, saver);
    Flight::executor(w, w.claimed(jobs.job("starting")).await, false).await;
    Flight::executor(w, w.claimed(jobs.job("vm-starting")).await, true).await;
    for name in [
        "fetched-1",
        "fetched-2",
        "reported-1",
        "reported-2",
        "vm-reported",
    ] {
        let t = w.claimed(jobs.job(name)).await;
        f.fetch(w, t, jobs.vm(name)).await;
        if name.contains("reported") {
            f.report(t).await;
        }
    }
    let states: BTreeSet<String> = shows_every_task(w, leader, jobs, f)
        .await
        .into_values()
        .collect();
    let every: BTreeSet<String> = ["running", "fetched", "reported", "queued"]
        .map(String::from)
        .into();
    assert!(
        states.is_superset(&every),
        "the previous release holds a task in every state: {states:?}"
    );
    for (name, (job, _)) in &jobs.by_name {
        let claimed = w.job(*job).await["task_id"].as_i64().is_some();
        let at_forge = name.contains("forge") || name.contains("after");
        assert_eq!(
            claimed, !at_forge,
            "{name}: claimed or waiting at the forge"
        );
    }
}

/// Tasks the previous release started that stay in flight across both hand-overs.
const CARRIED: [&str; 4] = ["starting", "fetched-2", "reported-2", "vm-starting"];

/// The vm jobs this release claims (first at the forge) and the one queued before them.
const VM_BEHIND: [&str; 3] = ["vm-queued", "vm-forge-1", "vm-forge-2"];

/// Under this release: the cache job the previous release started ends through the previous
/// release's proxy, so do tasks it started; a cache job this release starts restores the
/// entry. Left in flight for the rollback: a vm task this release started (fetched), and
/// behind it, the vm class full, a vm job this release claimed, queued: the previous release
/// starts it from the assignment this release wrote.
async fn under_this_release(w: &World, jobs: &Jobs, f: &mut Flight, leader: &Dispatcher) {
    let saver = w.claimed(jobs.job("cache-save")).await;
    let job = f.caches.remove(&saver).unwrap();
    job.finish(w).await;
    f.done.insert(saver);
    drop(job);
    for name in ["fetched-1", "reported-1", "vm-reported"] {
        f.finish(w, w.claimed(jobs.job(name)).await, jobs.vm(name))
            .await;
    }
    let keep = [CARRIED.as_slice(), VM_BEHIND.as_slice()].concat();
    let restorer = run_until_up(w, jobs, f, "cache-after-upgrade", &keep).await;
    restores(w, f, restorer, tenantci(), "under this release").await;
    let f_now = &*f;
    let next = eventually("this release to start a vm task", || async {
        let next = started(w, jobs, f_now, &CARRIED).await;
        next.iter().any(|(n, _)| jobs.vm(n)).then_some(next)
    })
    .await;
    for (name, t) in next {
        f.fetch(w, t, jobs.vm(name)).await;
    }
    let mine = [
        w.claimed(jobs.job("vm-forge-1")).await,
        w.claimed(jobs.job("vm-forge-2")).await,
    ];
    shows_every_task(w, leader, jobs, f).await;
    // Claimed first, queued once its worker finds the class full.
    eventually(
        "a vm task this release claimed to queue behind the full vm class",
        || async {
            let states = shown(leader);
            let queued = |t: &i64| states.get(t).is_some_and(|s| s == "queued");
            mine.iter().any(queued).then_some(())
        },
    )
    .await;
}

/// After the rollback: everything in flight ends, the last cache job restores the entry
/// through the previous release's proxy, then every other task ends as it starts, the
/// leader's status listing every task held meanwhile.
async fn after_the_rollback(
    w: &World,
    jobs: &Jobs,
    f: &mut Flight,
    previous: &Path,
    leader: &Dispatcher,
) {
    f.finish_every_fetched().await;
    let restorer = run_until_up(w, jobs, f, "cache-after-rollback", &[]).await;
    restores(
        w,
        f,
        restorer,
        super::previous(previous),
        "after the rollback",
    )
    .await;
    while f.done.len() < jobs.by_name.len() {
        shows_every_task(w, leader, jobs, f).await;
        let f_now = &*f;
        let (name, t) = eventually("a task to start", || async {
            started(w, jobs, f_now, &[]).await.first().copied()
        })
        .await;
        f.finish(w, t, jobs.vm(name)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_and_a_rollback_with_tasks_in_flight_lose_and_repeat_nothing() {
    let Some(previous) = super::previous_release() else {
        return;
    };
    let store = scratch();
    let mut w = world(&store.path().join("cache")).await;
    let mut f = Flight::default();

    // The previous release leads; the tasks reach their states. The cache job's proxy is the
    // previous release's too (its Pod's image).
    w.bin = previous.clone();
    let old = w.dispatcher_behind("old-a", SERVICE).await;
    old.wait_leader(true).await;
    let jobs = enqueue(&w).await;
    hold_every_state(&w, &jobs, &mut f, &previous, &old).await;

    // The upgrade: this release beside it, then the previous one drains and hands over.
    let new = standby(&mut w, &bin(), "new-b").await;
    shows_every_task(&w, &old, &jobs, &f).await;
    hand_over(old, &new).await;
    shows_every_task(&w, &new, &jobs, &f).await;
    under_this_release(&w, &jobs, &mut f, &new).await;

    // The rollback, the same way.
    let back = standby(&mut w, &previous, "old-c").await;
    shows_every_task(&w, &new, &jobs, &f).await;
    hand_over(new, &back).await;
    shows_every_task(&w, &back, &jobs, &f).await;
    after_the_rollback(&w, &jobs, &mut f, &previous, &back).await;
    assert_each_ran_once(&w, &jobs, &f).await;
    drop(back);
}

/// Every job ran once: SUCCESS with its line once, one executor each, nothing left.
async fn assert_each_ran_once(w: &World, jobs: &Jobs, f: &Flight) {
    assert_eq!(f.done.len(), 20);
    for (job, _) in jobs.by_name.values() {
        let j = w.job(*job).await;
        assert_eq!(j["status"], "done", "{j}");
        w.assert_succeeded_once(j["task_id"].as_i64().unwrap())
            .await;
    }
    w.all_cleaned_up().await;
    w.no_sandboxes_left().await;
    let creations = w.watch.creations();
    assert_eq!(creations.len(), 15, "a Pod per pod task: {creations:?}");
    assert!(
        creations.values().all(|n| *n == 1),
        "no executor Pod created twice: {creations:?}"
    );
    assert_eq!(
        w.sandbox_stats().await["created"],
        5,
        "a sandbox per vm task, once"
    );
}
