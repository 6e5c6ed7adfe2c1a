//! `tenantci dispatch status` and `tenantci dispatch explain` against a running dispatcher,
//! the simulator and its Gitea and OpenSandbox doubles (issue 43): tasks in the states a test
//! can hold still (queued, running, fetched, reported, withdrawn; claimed and starting last
//! milliseconds and are the unit tests' `status::tests`), in text and JSON; each reason
//! `explain` names; bad input. The executors are played through the facade from their Secrets.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use tenantci_core::forge::gitea::proto::{LogRow, UpdateLogRequest};
use tenantci_dispatch::sizing::class::ExecutorClass;
use tenantci_testkit::wait::eventually;

use super::harness::{Dispatcher, NAMESPACE, World};
use crate::util::{assert_exit, run, stderr, stdout, tenantci};

/// `tenantci dispatch ARGS --status-address D`'s output.
fn dispatch(d: &Dispatcher, args: &[&str]) -> std::process::Output {
    let address = d.status_address().to_string();
    run(tenantci()
        .arg("dispatch")
        .args(args)
        .args(["--status-address", &address]))
}

/// The `/v1/status` document as `dispatch status -o json` prints it.
fn status_json(d: &Dispatcher) -> Value {
    let o = dispatch(d, &["status", "-o", "json"]);
    assert_exit(&o, 0);
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn states(doc: &Value) -> BTreeSet<String> {
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

fn task(doc: &Value, id: i64) -> &Value {
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == id)
        .unwrap_or_else(|| panic!("task {id} in {doc:#}"))
}

/// Until the status document satisfies `ok`.
async fn status_until(d: &Dispatcher, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(what, || async {
        let doc = status_json(d);
        ok(&doc).then_some(doc)
    })
    .await
}

/// The tasks [`hold_every_state`] made, by what happened to them.
struct Held {
    alone: i64,
    fetched: i64,
    reported: i64,
    waiting: i64,
    waiting_job: i64,
    second: i64,
}

/// Five jobs on a class of three (`ci`, label `pod`) inside a pod capacity of five: three
/// executors (one left alone, one that fetched, one that reports its log) and two claimed
/// jobs queued behind them.
async fn hold_every_state(w: &World) -> Held {
    let mut tasks = Vec::new();
    for name in ["alone", "fetched", "reported"] {
        let job = w.enqueue(name, "s").await;
        tasks.push(w.claimed(job).await);
    }
    let (alone, fetched, reported) = (tasks[0], tasks[1], tasks[2]);
    w.executor(fetched).await.fetch().await;
    let ex = w.executor(reported).await;
    ex.fetch().await;
    let row = LogRow {
        time: None,
        content: "step 1".into(),
    };
    let log = UpdateLogRequest {
        task_id: reported,
        index: 0,
        rows: vec![row],
        no_more: false,
    };
    ex.own().update_log(&log).await.unwrap();
    let waiting_job = w.enqueue("waiting", "s").await;
    let second_job = w.enqueue("second", "s").await;
    Held {
        alone,
        fetched,
        reported,
        waiting: w.claimed(waiting_job).await,
        waiting_job,
        second: w.claimed(second_job).await,
    }
}

/// The JSON document: each task's state and names, the slots, the forge, no secret.
fn assert_document(doc: &Value, h: &Held) {
    for (id, state) in [
        (h.alone, "running"),
        (h.fetched, "fetched"),
        (h.reported, "reported"),
        (h.waiting, "queued"),
        (h.second, "queued"),
    ] {
        let t = task(doc, id);
        assert_eq!(t["state"], state, "{t}");
        assert_eq!(t["repository"], "sim/demo", "{t}");
        let labels = serde_json::json!(["self-hosted", "pod"]);
        assert_eq!((&t["runsOn"], &t["class"]), (&labels, &"ci".into()), "{t}");
    }
    let alone = task(doc, h.alone);
    assert_eq!(alone["job"], "alone");
    assert_eq!(alone["executor"], format!("gitea-task-{}", h.alone));
    assert!(alone["node"].as_str().is_some(), "{doc:#}");
    let slots = |v: &Value| (v["used"].as_u64(), v["free"].as_u64());
    let summary = &doc["summary"];
    assert_eq!(
        slots(&summary["backends"][0]),
        (Some(3), Some(2)),
        "{summary}"
    );
    assert_eq!(
        slots(&summary["classes"][0]),
        (Some(3), Some(0)),
        "{summary}"
    );
    assert!(
        summary["claimsPerMinute"].as_u64().unwrap() >= 5,
        "{summary}"
    );
    assert_eq!(summary["forge"]["reachable"], true);
    let text = doc.to_string();
    let secret = text.contains("gitea_runtime_token") || text.contains("\"token\"");
    assert!(!secret, "no secret: {text}");
}

/// Three executors of a class of three on a pod capacity of five, so two more jobs are
/// claimed and queue behind them: every state a task can hold still, in `-o json`, the table
/// and `-o wide`; `explain` of a queued job by its URL gives the capacity, what runs and its
/// place in the queue. Gitea cancels the second: withdrawn, it is no longer held (the
/// withdrawn state lasts until the worker's next pull, milliseconds here: the unit tests show
/// it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_shows_tasks_in_every_state_and_explain_gives_the_queue_position() {
    let mut w = World::start(5).await;
    let mut class = ExecutorClass::pod("ci", "100m", "128Mi", 3);
    class.label = "pod".into();
    w.base_mut().executor.classes = vec![class];
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let h = hold_every_state(&w).await;
    let want: BTreeSet<String> = ["running", "fetched", "reported", "queued"]
        .map(String::from)
        .into();
    let doc = status_until(&d, "every state held", |doc| states(doc) == want).await;
    assert_document(&doc, &h);

    let table = stdout(&dispatch(&d, &["status"]));
    let head = "BACKEND  USED  FREE  QUEUED  API\npod      3/5";
    assert!(
        table.starts_with(head) && table.contains("TASK  REPOSITORY  JOB"),
        "{table}"
    );
    for state in ["Running", "Fetched", "Reported", "Queued"] {
        assert!(table.contains(state), "{state} in\n{table}");
    }
    let wide = stdout(&dispatch(&d, &["status", "-o", "wide"]));
    let pod = format!("gitea-task-{}", h.alone);
    assert!(wide.contains("EXECUTOR") && wide.contains(&pod), "{wide}");

    // Gitea's web URL of the waiting job: the double's run id is the job's id.
    let forge = doc["summary"]["forge"]["url"].as_str().unwrap();
    let url = format!("{forge}/sim/demo/actions/runs/{}/jobs/0", h.waiting_job);
    let o = dispatch(&d, &["explain", &url]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    let full = "waits (capacity): capacity full: 3 of 3 executors of the class ci run";
    assert!(
        out.contains(full) && out.contains("number 1 in its queue"),
        "{out}"
    );
    let runs = format!("{} (sim/demo alone)", h.alone);
    assert!(out.contains(&runs), "what runs: {out}");
    let second = stdout(&dispatch(&d, &["explain", "--task", &h.second.to_string()]));
    assert!(second.contains("number 2 in its queue"), "{second}");
    let o = dispatch(&d, &["explain", "--task", &h.alone.to_string()]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("will run"), "{}", stdout(&o));

    w.cancel(h.second).await;
    let gone = |doc: &Value| {
        doc["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["task"] != h.second)
    };
    status_until(&d, "the cancelled task no longer held", gone).await;
}

/// A job whose labels this dispatcher does not have: the closest is named, exit 1; the
/// bad inputs are one sentence each, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_names_the_closest_label_and_refuses_what_it_cannot_answer() {
    let w = World::start(1).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let o = dispatch(&d, &["explain", "--runs-on", "self-hosted,podd"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("no label of this dispatcher matches `podd`"),
        "{out}"
    );
    assert!(out.contains("the closest is `pod`"), "{out}");
    let o = dispatch(
        &d,
        &["explain", "--runs-on", "self-hosted,pod", "-o", "json"],
    );
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc[0]["willRun"], true, "{doc}");

    let forge = status_json(&d)["summary"]["forge"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    let refusals = [
        (
            vec!["explain", "--task", "999999"],
            "holds no task for task 999999",
        ),
        (
            vec![
                "explain",
                "https://codeberg.org/sim/demo/actions/runs/1/jobs/0",
            ],
            "the job is on https://codeberg.org, but this dispatcher runs jobs of",
        ),
        (
            vec!["explain", "https://x.example/sim/demo/issues/1"],
            "has no /OWNER/REPO/actions/runs/RUN",
        ),
        (vec!["explain"], "name the job"),
    ];
    for (args, says) in refusals {
        let o = dispatch(&d, &args);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = dispatch(
        &d,
        &[
            "explain",
            &format!("{forge}/sim/demo/actions/runs/424242/jobs/0"),
        ],
    );
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("holds no task for run 424242 of sim/demo"),
        "{}",
        stderr(&o)
    );
}

/// Nothing listens at the address: one sentence naming it, exit 2.
#[test]
fn status_and_explain_name_a_dispatcher_that_does_not_answer() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = free.local_addr().unwrap().to_string();
    drop(free);
    for args in [vec!["status"], vec!["explain", "--runs-on", "pod"]] {
        let o = run(tenantci()
            .arg("dispatch")
            .args(&args)
            .args(["--status-address", &address]));
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains(&format!(
                "no dispatcher answers at http://{address}/v1/status"
            )),
            "{err}"
        );
    }
}

/// A Pod on a rented node that boots for a minute: explain says its executor has no node,
/// and with an operator's kubeconfig shows the Pod's Events (the scheduler's and
/// cluster-autoscaler's, as the simulator records them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_names_an_executor_pod_waiting_for_a_booting_node() {
    let w = World::start_with_sim_flags(1, &["--node-boot", "60s"]).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let task = w.claimed(w.enqueue("slow-node", "s").await).await;
    w.objects(task).await;
    let id = task.to_string();
    let o = dispatch(&d, &["explain", "--task", &id]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("waits (executor): its executor Pod has no node yet"),
        "{out}"
    );
    assert!(out.contains("a rented node may be booting"), "{out}");
    let kubeconfig = w.tenant_admin.display().to_string();
    let with_events = [
        "explain",
        "--task",
        &id,
        "--kubeconfig",
        &kubeconfig,
        "--executor-namespace",
        NAMESPACE,
    ];
    let out = eventually("the Pod's events", || async {
        let out = stdout(&dispatch(&d, &with_events));
        out.contains("TriggeredScaleUp").then_some(out)
    })
    .await;
    let failed =
        "event: Warning FailedScheduling (default-scheduler): no nodes available to schedule pods";
    assert!(out.contains(failed), "{out}");
    let scale = "event: Normal TriggeredScaleUp (cluster-autoscaler): pod triggered scale-up: [{rented 0->1 (max: 10)}]";
    assert!(out.contains(scale), "{out}");
}

/// OpenSandbox answering 503: a vm job's explain names the API away, exit 1; a pod job's
/// does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_names_an_opensandbox_outage() {
    let w = super::vm::world(1, 1).await;
    let d = w.dispatcher("d1").await;
    super::vm::vm_backend_recovered(&d).await;
    w.opensandbox
        .outage(w.http(), 503, Duration::from_secs(300))
        .await;
    let o = dispatch(&d, &["explain", "--runs-on", "self-hosted,vm"]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(
        out.contains("waits (backend-api): the vm backend's API does not answer"),
        "{out}"
    );
    let doc = status_json(&d);
    assert_eq!(doc["summary"]["backends"][1]["reachable"], false, "{doc:#}");
    assert_exit(
        &dispatch(&d, &["explain", "--runs-on", "self-hosted,pod"]),
        0,
    );
    w.opensandbox.end_outage(w.http()).await;
}

/// The Gitea double frozen: FetchTask times out, so the forge sees this runner offline, and
/// explain says so with the forge's URL, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_names_a_runner_the_forge_sees_offline() {
    let w = World::start(1).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    w.gitea.stall(w.http(), Duration::from_secs(90)).await;
    let out = eventually("explain to name the forge", || async {
        let o = dispatch(&d, &["explain", "--runs-on", "self-hosted,pod"]);
        (o.status.code() == Some(1)).then(|| stdout(&o))
    })
    .await;
    assert!(
        out.contains("waits (forge): the forge does not see this runner online"),
        "{out}"
    );
    assert!(out.contains("check that http"), "{out}");
}

/// `dispatch status --watch -o json` prints one document per interval (JSON Lines) until
/// stopped: a job enqueued while it watches shows up in a later line, and the process ends
/// when it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_watch_prints_a_document_per_interval_until_stopped() {
    use std::io::BufRead;
    let w = World::start(2).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let address = d.status_address().to_string();
    let mut child = tenantci()
        .args([
            "dispatch",
            "status",
            "--watch",
            "--interval",
            "1",
            "-o",
            "json",
        ])
        .args(["--status-address", &address])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, documents) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let doc = serde_json::from_str(&line.unwrap()).expect("one document per line");
            if lines.send(doc).is_err() {
                return;
            }
        }
    });
    // A guard, not a timing: a watch that stops printing fails here instead of hanging.
    let next = || {
        documents
            .recv_timeout(Duration::from_secs(60))
            .expect("the watch prints again")
    };
    let first = next();
    assert!(first["tasks"].as_array().unwrap().is_empty(), "{first:#}");
    let id = w.claimed(w.enqueue("watched", "s").await).await;
    let held = |doc: &Value| {
        doc["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["task"] == id)
    };
    let seen = loop {
        let doc = next();
        if held(&doc) {
            break doc;
        }
    };
    assert_eq!(task(&seen, id)["job"], "watched");
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
}

/// QUEUED is the queue's depth when the status is asked, not the scheduler's last reading of
/// it. A vm job whose sandbox cannot be created yet (OpenSandbox refusing creates) is queued,
/// being started; once creates work it starts, its assignment is acked, and QUEUED drops to 0,
/// though the scheduler, polling once an hour, has not read the queue since it published the
/// assignment: its gauge still says 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_is_the_queue_now_not_the_schedulers_last_reading() {
    let mut w = super::vm::world(1, 1).await;
    w.with_fetch_interval(Duration::from_secs(3600));
    w.opensandbox
        .outage_of(w.http(), &["POST"], 503, Duration::from_secs(300))
        .await;
    // Waiting at the forge before the dispatcher starts: its first FetchTask claims it.
    let job = w.enqueue_vm("vm-queued", "s").await;
    let d = w.dispatcher("d1").await;
    let t = w.claimed(job).await;
    let vm = |doc: &Value| doc["summary"]["backends"][1].clone();
    status_until(&d, "the vm task queued while creates fail", |doc| {
        vm(doc)["queued"] == 1
    })
    .await;
    w.opensandbox.end_outage(w.http()).await;
    let doc = status_until(&d, "the vm task running, nothing queued", |doc| {
        task(doc, t)["state"] == "running" && vm(doc)["queued"] == 0
    })
    .await;
    assert_eq!(vm(&doc)["used"], 1, "{doc:#}");
    assert_eq!(
        d.metric("tenantci_dispatch_queue_depth").await,
        Some(1.0),
        "the scheduler has not read the queue again: the 0 above is the status API's own reading"
    );
}
