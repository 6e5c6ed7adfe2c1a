//! Where a finished job's time went (issue 53): the task history, against the simulator (its
//! rented nodes booting), its Gitea double and a real nats-server. A task that waited for a
//! booting node has `scheduling` as its slowest phase in `dispatch status --history` and
//! `explain` says so; the history survives a kill -9 and a leader change; a record holds no
//! secret; the bucket keeps the configured number of tasks. The executors are played through
//! the facade from their Secrets.

use async_nats::jetstream;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::Value;
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

/// `dispatch status --history -o json`'s tasks.
fn history(d: &Dispatcher) -> Vec<Value> {
    let o = dispatch(d, &["status", "--history", "--limit", "50", "-o", "json"]);
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["api_version"], "v1", "{doc}");
    doc["tasks"].as_array().unwrap().clone()
}

/// Until `task` is in `d`'s history, finished and its executor gone (its record complete).
async fn finished_in(d: &Dispatcher, task: i64) -> Value {
    eventually(
        &format!("task {task} finished in {}'s history", d.name),
        || async {
            history(d).into_iter().find(|t| {
                t["task"] == task && t["finished"] == true && t["marks"]["gone"].is_string()
            })
        },
    )
    .await
}

/// Until `task`'s executor Pod is on a node.
async fn scheduled(w: &World, task: i64) {
    let pods: Api<Pod> = Api::namespaced(w.kube.clone(), NAMESPACE);
    let name = format!("gitea-task-{task}");
    eventually("the executor Pod to be scheduled", || async {
        let pod = pods.get_opt(&name).await.unwrap()?;
        pod.spec?.node_name.filter(|n| !n.is_empty()).map(|_| ())
    })
    .await;
}

/// A job run to success: claimed, its executor on a node, played through the facade.
async fn run_job(w: &World, name: &str, secret: &str) -> i64 {
    let task = w.claimed(w.enqueue(name, secret).await).await;
    scheduled(w, task).await;
    w.executor(task).await.run(task).await;
    task
}

/// The record of `task` as stored in the bucket, read as ci-admin.
async fn stored(w: &World, task: i64) -> String {
    let js = jetstream::new(w.nats.client("ci-admin").await);
    let kv = js.get_key_value("CI_HISTORY").await.unwrap();
    let value = kv.get(format!("task.{task}")).await.unwrap().unwrap();
    String::from_utf8(value.to_vec()).unwrap()
}

/// `record` holds only the record's own fields: never the job's `secret`, a token, the
/// capability or the sealed assignment.
fn assert_holds_no_secret(record: &str, secret: &str) {
    assert!(!record.contains(secret), "{record}");
    for word in ["token", "capability", "secret", "assignment", "password"] {
        assert!(!record.to_lowercase().contains(word), "{word} in {record}");
    }
    let fields = serde_json::from_str::<serde_json::Map<String, Value>>(record).unwrap();
    for k in fields.keys() {
        assert!(
            [
                "version",
                "task",
                "repository",
                "run",
                "backend",
                "class",
                "result",
                "marks",
                "waited_for_node"
            ]
            .contains(&k.as_str()),
            "{k} in {record}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_that_waited_for_a_booting_node_has_scheduling_as_its_slowest_phase() {
    let w = World::start_with_sim_flags(1, &["--node-boot", "6s"]).await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let secret = "history-secret-7c1e9b";
    let task = run_job(&w, "slow-node", secret).await;
    let t = finished_in(&d, task).await;
    assert_eq!(t["slowest"]["phase"], "scheduling", "{t:#}");
    assert_eq!(t["result"], "RESULT_SUCCESS", "{t:#}");
    // Seen unschedulable until the rented node joined: the node was rented for it, not warm.
    assert!(t["waited_for_node"].is_string(), "{t:#}");
    let phases: Vec<&str> = t["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    for p in [
        "claim",
        "queue",
        "scheduling",
        "starting",
        "runner_start",
        "run",
        "teardown",
    ] {
        assert!(phases.contains(&p), "{p} in {phases:?}");
    }

    // The text table and explain, as an operator reads them.
    let o = dispatch(&d, &["status", "--history"]);
    assert_exit(&o, 0);
    let line = stdout(&o);
    assert!(
        line.contains("SCHEDULING") && line.contains("scheduling"),
        "{line}"
    );
    let o = dispatch(&d, &["explain", "--task", &task.to_string()]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains(&format!("task {task}")), "{out}");
    assert!(out.contains("slowest: scheduling"), "{out}");
    assert!(
        out.contains("waiting for a node: a rented node booting")
            && out.contains("the executor was unschedulable until it joined"),
        "{out}"
    );
    // By the job's URL, as an operator copies it from the forge: the same answer.
    let forge = {
        let o = dispatch(&d, &["status", "-o", "json"]);
        let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
        doc["summary"]["forge"]["url"].as_str().unwrap().to_string()
    };
    let url = format!(
        "{forge}/{}/actions/runs/{}/jobs/0",
        t["repository"].as_str().unwrap(),
        t["run"]
    );
    let o = dispatch(&d, &["explain", &url]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("slowest: scheduling"), "{}", stdout(&o));

    // explain -o json: the same history.
    let o = dispatch(&d, &["explain", "--task", &task.to_string(), "-o", "json"]);
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc[0]["slowest"]["phase"], "scheduling", "{doc:#}");

    // The page's timeline of the last hour: a bar for the task, its scheduling coloured.
    let page = reqwest::get(format!("http://{}/", d.status_address()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("<h2 id=\"timeline\">The last hour</h2>"),
        "{page}"
    );
    assert!(page.contains("<g class=\"task\">"), "{page}");
    let bar = format!("<title>task {task} scheduling: ");
    assert!(
        page.contains("class=\"phase scheduling\"") && page.contains(&bar),
        "{page}"
    );
    assert!(!page.contains("<script"), "no script");

    // Observed once, in the dispatcher's per-phase histogram.
    let count = "tenantci_dispatch_task_phase_seconds_count";
    let scheduled = eventually("the phase histogram", || async {
        let text = d.metrics().await?;
        text.lines()
            .find(|l| l.starts_with(count) && l.contains("phase=\"scheduling\""))
            .map(str::to_string)
    })
    .await;
    assert!(scheduled.ends_with(" 1"), "{scheduled}");

    // No secret in the record: only ids, names, times and the result.
    let record = stored(&w, task).await;
    assert_holds_no_secret(&record, secret);

    // Its cost: each observer writes its mark once (not at every reconcile pass), into one
    // record of a few hundred bytes.
    let js = jetstream::new(w.nats.client("ci-admin").await);
    let info = js
        .get_stream("KV_CI_HISTORY")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    let writes = info.state.last_sequence;
    eprintln!(
        "history cost for one task: {writes} writes, {} bytes stored ({} bytes of record)",
        info.state.bytes,
        record.len()
    );
    assert!(writes <= 12, "{writes} writes for one task");
    assert!(record.len() < 1024, "{record}");

    // A job this dispatcher never saw: one sentence, exit 2.
    let o = dispatch(&d, &["explain", "--task", "987654"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("this dispatcher holds no task for task 987654 and never saw it"),
        "{}",
        stderr(&o)
    );
}

/// Kept across a kill -9 of the leader and the change of leader that follows: the standby
/// that takes over shows the first leader's tasks, adds its own, and the killed one, started
/// again, shows both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_history_survives_a_kill_9_and_a_leader_change() {
    let w = World::start(2).await;
    let mut d1 = w.dispatcher("d1").await;
    d1.wait_leader(true).await;
    let d2 = w.dispatcher("d2").await;
    d2.wait_up().await;
    let first = run_job(&w, "before", "s").await;
    let before = finished_in(&d1, first).await;
    // The standby reads the same history.
    assert_eq!(finished_in(&d2, first).await["marks"], before["marks"]);

    d1.kill9();
    d2.wait_leader(true).await;
    let second = run_job(&w, "after", "s").await;
    finished_in(&d2, second).await;
    assert_eq!(
        finished_in(&d2, first).await["marks"],
        before["marks"],
        "the first leader's record is kept as it was"
    );

    let d1 = w.dispatcher("d1").await;
    d1.wait_up().await;
    let after = history(&d1);
    for task in [first, second] {
        assert!(
            after.iter().any(|t| t["task"] == task),
            "{task} in {after:#?}"
        );
    }
    // Each task once, each mark once: two writers, nothing double-counted.
    assert_eq!(after.iter().filter(|t| t["task"] == first).count(), 1);
}

/// `[history] max_tasks` bounds the bucket: of three finished tasks the newest two are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bucket_keeps_the_configured_number_of_tasks() {
    let mut w = World::start(1).await;
    w.base_mut().history.max_tasks = Some(2);
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let mut tasks = Vec::new();
    for name in ["one", "two", "three"] {
        let task = run_job(&w, name, "s").await;
        finished_in(&d, task).await;
        tasks.push(task);
    }
    let js = jetstream::new(w.nats.client("ci-admin").await);
    let mut stream = js.get_stream("KV_CI_HISTORY").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.max_messages, 2, "the config's bound");
    assert_eq!(info.state.messages, 2, "{:?}", info.state);
    let kept: Vec<i64> = history(&d)
        .iter()
        .map(|t| t["task"].as_i64().unwrap())
        .collect();
    assert_eq!(
        kept,
        vec![tasks[2], tasks[1]],
        "the newest two, the most recent first"
    );
}

/// With the forge's view (Gitea 1.25's jobs API and a token), `explain` on a finished job adds
/// the forge's own queue: from the job's creation at the forge to its claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_adds_the_forges_own_queue_from_its_jobs_api() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::start(1).await;
    w.gitea
        .admin_post(
            w.http(),
            "version",
            serde_json::json!({"version": "1.25.0"}),
        )
        .await;
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    let task = run_job(&w, "forge-side", "s").await;
    let t = finished_in(&d, task).await;
    let forge = {
        let o = dispatch(&d, &["status", "-o", "json"]);
        let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
        doc["summary"]["forge"]["url"].as_str().unwrap().to_string()
    };
    let url = format!(
        "{forge}/{}/actions/runs/{}/jobs/0",
        t["repository"].as_str().unwrap(),
        t["run"]
    );
    let dir = crate::util::scratch();
    let token = dir.path().join("forge.token");
    std::fs::write(&token, format!("{}\n", w.gitea.api_token)).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = token.to_str().unwrap();
    let o = dispatch(&d, &["explain", &url, "--forge-token-file", token]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("forge: "), "{out}");
    assert!(
        out.contains("forge_queue") && out.contains("created -> claimed"),
        "{out}"
    );
    let o = dispatch(
        &d,
        &["explain", &url, "--forge-token-file", token, "-o", "json"],
    );
    assert_exit(&o, 0);
    let doc: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc[0]["phases"][0]["phase"], "forge_queue", "{doc:#}");
    assert!(doc[0]["marks"]["created"].is_string(), "{doc:#}");
}
