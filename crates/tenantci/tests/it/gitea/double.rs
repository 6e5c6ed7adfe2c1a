//! Client <-> Gitea double.

use std::net::SocketAddr;

use tenantci_core::forge::gitea::proto::{
    DeclareRequest, LogRow, RegisterRequest, Runner, StepState, Task, TaskResult, TaskState,
    UpdateLogRequest, UpdateTaskRequest,
};
use tenantci_core::forge::gitea::{Code, Codec, Credentials, RunnerClient, TasksVersion};
use tenantci_sim::gitea::{GiteaDouble, GiteaHandle, JobSpec, write_gitea_json};

use super::{client, with_creds};

async fn start() -> GiteaHandle {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    GiteaDouble::start(addr).await.expect("start the double")
}

async fn register(
    g: &GiteaHandle,
    name: &str,
    labels: &[&str],
    ephemeral: bool,
) -> (Runner, RunnerClient) {
    let c = client(&g.base_url, Codec::Proto);
    let runner = c
        .register(&RegisterRequest {
            name: name.into(),
            token: g.registration_token.clone(),
            version: "v0.2.11".into(),
            labels: labels.iter().map(|s| s.to_string()).collect(),
            ephemeral,
            ..Default::default()
        })
        .await
        .expect("register");
    let c = c.with_credentials(Credentials::from_runner(&runner));
    (runner, c)
}

fn job(runs_on: &[&str]) -> JobSpec {
    JobSpec {
        name: "build".into(),
        runs_on: runs_on.iter().map(|s| s.to_string()).collect(),
        workflow_payload: "on: push\njobs:\n  build:\n    runs-on: linux\n".into(),
        secrets: [("TOKEN".to_string(), "s3cret".to_string())].into(),
        ..Default::default()
    }
}

/// Polls until a task arrives (bounded).
async fn claim(c: &RunnerClient) -> Task {
    let mut v = TasksVersion::default();
    for _ in 0..5 {
        if let Some(t) = c.poll(&mut v).await.expect("fetch") {
            return t;
        }
    }
    panic!("no task after 5 polls");
}

fn rows(texts: &[&str]) -> Vec<LogRow> {
    texts
        .iter()
        .map(|t| LogRow {
            time: None,
            content: t.to_string(),
        })
        .collect()
}

fn log_req(task: i64, index: i64, texts: &[&str], no_more: bool) -> UpdateLogRequest {
    UpdateLogRequest {
        task_id: task,
        index,
        rows: rows(texts),
        no_more,
    }
}

fn state(task: i64, result: TaskResult) -> UpdateTaskRequest {
    UpdateTaskRequest {
        state: Some(TaskState {
            id: task,
            result: result as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn gitea_double_ping_register_declare() {
    let g = start().await;
    let anon = client(&g.base_url, Codec::Proto);
    assert_eq!(anon.ping("tenantci").await.unwrap(), "Hello, tenantci!");

    let bad = anon
        .register(&RegisterRequest {
            name: "r".into(),
            token: "wrong".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Some(Code::PermissionDenied), "{bad}");
    let nameless = anon
        .register(&RegisterRequest {
            token: g.registration_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(nameless.code(), Some(Code::InvalidArgument));

    let (runner, c) = register(&g, "r1", &["linux"], false).await;
    assert!(runner.id > 0);
    assert_eq!(runner.uuid.len(), 36);
    assert_eq!(runner.token.len(), 40);
    assert_eq!(runner.labels, ["linux"]);

    let declared = c
        .declare(&DeclareRequest {
            version: "v0.3.0".into(),
            labels: vec!["linux".into(), "docker".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .expect("the double implements Declare");
    assert_eq!(declared.uuid, runner.uuid);
    assert_eq!(declared.labels, ["linux", "docker"]);
    let views = g.double.runners();
    assert_eq!(views[0].version, "v0.3.0");
    assert_eq!(views[0].labels, ["linux", "docker"]);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_fetch_follows_tasks_version() {
    let g = start().await;
    let (_, c) = register(&g, "r1", &["linux"], false).await;
    let mut v = TasksVersion::default();

    // Version 0 is bumped to 1 on the first read; nothing is waiting.
    assert!(c.poll(&mut v).await.unwrap().is_none());
    assert_eq!(v.get(), 1);
    assert!(c.poll(&mut v).await.unwrap().is_none());
    assert_eq!(v.get(), 1);

    let job_id = g.double.enqueue(job(&["linux"]));
    let latest = g.double.tasks_version();
    assert_eq!(latest, 2);
    // A caller already at the latest version is not given a task, even with one waiting.
    let same = c.fetch_task(latest).await.unwrap();
    assert!(same.task.is_none());
    assert_eq!(same.tasks_version, latest);
    assert_eq!(g.double.job(job_id).unwrap().task_id, None);

    // A different version makes the server pick; receiving a task resets ours to 0.
    let task = c
        .poll(&mut v)
        .await
        .unwrap()
        .expect("a task after a version change");
    assert_eq!(v.get(), 0);
    assert_eq!(
        task.workflow_payload.as_deref(),
        Some(job(&[]).workflow_payload.as_bytes())
    );
    assert_eq!(task.secrets["TOKEN"], "s3cret");
    let ctx = task.context.as_ref().expect("context");
    assert!(ctx.fields.contains_key("token"));
    assert!(ctx.fields.contains_key("gitea_runtime_token"));
    assert_eq!(g.double.job(job_id).unwrap().task_id, Some(task.id));

    assert!(c.poll(&mut v).await.unwrap().is_none());
    assert_eq!(v.get(), latest);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_label_matching_and_one_claim_per_job() {
    let g = start().await;
    let (_, linux_only) = register(&g, "plain", &["linux"], false).await;
    let job_id = g.double.enqueue(job(&["linux", "gpu"]));
    assert!(linux_only.fetch_task(0).await.unwrap().task.is_none());

    let mut racers = Vec::new();
    for i in 0..6 {
        racers.push(
            register(&g, &format!("gpu{i}"), &["gpu", "linux", "x"], false)
                .await
                .1,
        );
    }
    let answers = futures::future::join_all(racers.iter().map(|c| c.fetch_task(0))).await;
    let claimed: Vec<_> = answers
        .into_iter()
        .filter_map(|a| a.unwrap().task)
        .collect();
    assert_eq!(claimed.len(), 1, "one job is handed to exactly one runner");
    assert_eq!(g.double.job(job_id).unwrap().task_id, Some(claimed[0].id));

    // A second job gets a new task id.
    g.double.enqueue(job(&["gpu"]));
    let second = claim(&racers[0]).await;
    assert!(second.id > claimed[0].id);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_log_ack_overlap_and_archive() {
    let g = start().await;
    let (_, c) = register(&g, "r1", &["linux"], false).await;
    g.double.enqueue(job(&["linux"]));
    let t = claim(&c).await.id;

    let ack = |r: tenantci_core::forge::gitea::proto::UpdateLogResponse| r.ack_index;
    assert_eq!(
        ack(c
            .update_log(&log_req(t, 0, &["a", "b", "c"], false))
            .await
            .unwrap()),
        3
    );
    // Overlapping: rows 1..2 are already stored, 3..4 are new.
    assert_eq!(
        ack(c
            .update_log(&log_req(t, 1, &["b", "c", "d", "e"], false))
            .await
            .unwrap()),
        5
    );
    // A gap (index beyond ack) writes nothing.
    assert_eq!(
        ack(c.update_log(&log_req(t, 7, &["x"], false)).await.unwrap()),
        5
    );
    // Rows all older than ack write nothing.
    assert_eq!(
        ack(c
            .update_log(&log_req(t, 0, &["a", "b"], false))
            .await
            .unwrap()),
        5
    );
    assert_eq!(g.double.task(t).unwrap().logs, ["a", "b", "c", "d", "e"]);

    assert_eq!(
        ack(c.update_log(&log_req(t, 5, &["f"], true)).await.unwrap()),
        6
    );
    let view = g.double.task(t).unwrap();
    assert!(view.log_archived);
    assert_eq!(view.logs.len(), 6);
    // The same final write again only re-acks; new rows after archiving are refused.
    assert_eq!(
        ack(c.update_log(&log_req(t, 5, &["f"], true)).await.unwrap()),
        6
    );
    let err = c
        .update_log(&log_req(t, 6, &["g"], false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::AlreadyExists), "{err}");
    assert_eq!(g.double.task(t).unwrap().logs.len(), 6);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_update_task_heartbeat_outputs_and_finalisation() {
    let g = start().await;
    let (_, c) = register(&g, "r1", &["linux"], false).await;
    let job_id = g.double.enqueue(job(&["linux"]));
    let t = claim(&c).await.id;

    let mut beat = state(t, TaskResult::Unspecified);
    beat.outputs = [("artifact".to_string(), "a.tgz".to_string())].into();
    beat.state.as_mut().unwrap().steps = vec![StepState {
        id: 0,
        log_index: 0,
        log_length: 2,
        ..Default::default()
    }];
    let resp = c.update_task(&beat).await.unwrap();
    assert_eq!(resp.sent_outputs, ["artifact"]);
    assert_eq!(resp.state.unwrap().result, TaskResult::Unspecified as i32);
    let view = g.double.task(t).unwrap();
    assert_eq!(view.state, "running");
    assert_eq!(view.steps, 1);
    assert_eq!(view.outputs["artifact"], "a.tgz");

    // An output already set keeps its first value.
    let mut again = state(t, TaskResult::Unspecified);
    again.outputs = [("artifact".to_string(), "other".to_string())].into();
    c.update_task(&again).await.unwrap();
    assert_eq!(g.double.task(t).unwrap().outputs["artifact"], "a.tgz");

    let done = c.update_task(&state(t, TaskResult::Success)).await.unwrap();
    assert_eq!(done.state.unwrap().result, TaskResult::Success as i32);
    let view = g.double.task(t).unwrap();
    assert_eq!((view.state, view.result), ("done", "RESULT_SUCCESS"));
    assert!(view.stopped_at.is_some());
    assert_eq!(
        serde_json::to_value(g.double.job(job_id).unwrap().status).unwrap(),
        "done"
    );

    // A finished task ignores later updates (so a retried final update is harmless).
    let late = c.update_task(&state(t, TaskResult::Failure)).await.unwrap();
    assert_eq!(late.state.unwrap().result, TaskResult::Success as i32);
    assert_eq!(g.double.task(t).unwrap().result, "RESULT_SUCCESS");
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_runner_cannot_update_another_runners_task() {
    let g = start().await;
    let (_, owner) = register(&g, "owner", &["linux"], false).await;
    let (_, other) = register(&g, "other", &["linux"], false).await;
    g.double.enqueue(job(&["linux"]));
    let t = claim(&owner).await.id;

    let err = other
        .update_task(&state(t, TaskResult::Failure))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied), "{err}");
    let err = other
        .update_log(&log_req(t, 0, &["evil"], true))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied), "{err}");
    let view = g.double.task(t).unwrap();
    assert_eq!(view.state, "running");
    assert!(view.logs.is_empty());
    let missing = owner
        .update_task(&state(9999, TaskResult::Success))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Some(Code::NotFound));
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_rejects_unknown_credentials() {
    let g = start().await;
    let (runner, _) = register(&g, "r1", &["linux"], false).await;
    let wrong = with_creds(client(&g.base_url, Codec::Proto), &runner.uuid, "0000");
    let err = wrong.fetch_task(0).await.unwrap_err();
    assert!(err.is_unauthenticated(), "{err}");
    assert!(!err.claim_may_be_lost());
    let nobody = with_creds(
        client(&g.base_url, Codec::Json),
        "no-such-uuid",
        &runner.token,
    );
    assert!(nobody.fetch_task(0).await.unwrap_err().is_unauthenticated());
    let anon = client(&g.base_url, Codec::Proto);
    assert!(
        anon.fetch_task(0).await.is_err(),
        "no credentials configured"
    );

    let raw = reqwest::Client::new()
        .post(format!(
            "{}/api/actions/runner.v1.RunnerService/FetchTask",
            g.base_url
        ))
        .header("content-type", "application/proto")
        .body(Vec::new())
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    let body: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(body["code"], "unauthenticated");
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_cancel_answers_cancelled() {
    let g = start().await;
    let (_, c) = register(&g, "r1", &["linux"], false).await;
    g.double.enqueue(job(&["linux"]));
    let t = claim(&c).await.id;
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("{}/admin/tasks/{t}/cancel", g.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let answer = c
        .update_task(&state(t, TaskResult::Unspecified))
        .await
        .unwrap();
    assert_eq!(answer.state.unwrap().result, TaskResult::Cancelled as i32);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_admin_api_and_json_codec() {
    let g = start().await;
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{}/admin/jobs", g.base_url))
        .json(&serde_json::json!({
            "name": "lint",
            "runs_on": ["linux"],
            "workflow_payload": "jobs: {}",
            "secrets": {"K": "v"},
            "context": {"repository": "org/repo"}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_i64().expect("job_id");
    let job: serde_json::Value = http
        .get(format!("{}/admin/jobs/{job_id}", g.base_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["status"], "waiting");

    // The runner side in JSON this time.
    let c = client(&g.base_url, Codec::Json);
    let runner = c
        .register(&RegisterRequest {
            name: "json".into(),
            token: g.registration_token.clone(),
            labels: vec!["linux".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let c = c.with_credentials(Credentials::from_runner(&runner));
    let task = claim(&c).await;
    let ctx = task.context.unwrap();
    assert!(ctx.fields.contains_key("repository"));
    c.update_log(&log_req(task.id, 0, &["hello"], true))
        .await
        .unwrap();
    c.update_task(&state(task.id, TaskResult::Failure))
        .await
        .unwrap();

    let view: serde_json::Value = http
        .get(format!("{}/admin/tasks/{}", g.base_url, task.id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["result"], "RESULT_FAILURE");
    assert_eq!(view["logs"], serde_json::json!(["hello"]));
    assert_eq!(view["runner_name"], "json");
    assert!(
        view.get("secrets").is_none(),
        "secrets never leave through the admin API"
    );
    let missing = http
        .get(format!("{}/admin/tasks/999", g.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_ephemeral_runner_takes_one_task_and_is_deleted() {
    let g = start().await;
    let (_, c) = register(&g, "eph", &["linux"], true).await;
    g.double.enqueue(job(&["linux"]));
    g.double.enqueue(job(&["linux"]));
    let t = claim(&c).await.id;
    assert!(
        c.fetch_task(0).await.unwrap().task.is_none(),
        "one task per ephemeral runner"
    );
    c.update_task(&state(t, TaskResult::Success)).await.unwrap();
    assert!(g.double.runners().is_empty());
    assert!(c.fetch_task(0).await.unwrap_err().is_unauthenticated());
    g.shutdown().await;
}

#[tokio::test]
async fn gitea_double_writes_gitea_json() {
    let g = start().await;
    let dir = crate::util::scratch();
    let path = write_gitea_json(dir.path(), &g).unwrap();
    assert_eq!(path, dir.path().join("gitea.json"));
    assert_eq!(crate::util::mode(&path), 0o600);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(doc["url"], g.base_url.as_str());
    assert_eq!(doc["registrationToken"], g.registration_token.as_str());
    assert_eq!(doc["address"], g.addr.to_string());
    g.shutdown().await;
}

/// The stall switch: a FetchTask sent during a stall is served when it ends, and claims its
/// task even though its client gave up waiting (what a Gitea frozen by SIGSTOP does).
#[tokio::test]
async fn gitea_double_stall_serves_a_held_fetch_even_after_its_client_gave_up() {
    let g = start().await;
    let (_, c) = register(&g, "r1", &["linux"], false).await;
    let job_id = g.double.enqueue(job(&["linux"]));
    g.double.stall_for(std::time::Duration::from_millis(1500));
    let mut cfg = tenantci_core::forge::gitea::ClientConfig::new(&g.base_url);
    cfg.fetch_timeout = std::time::Duration::from_millis(200);
    let impatient = RunnerClient::new(cfg)
        .unwrap()
        .with_credentials(c.credentials().unwrap().clone());
    let err = impatient.fetch_task(0).await.unwrap_err();
    assert!(err.claim_may_be_lost(), "{err}");
    // The claim happens at the thaw, with nobody left to hear of it.
    let task_id = tenantci_testkit::wait::eventually("the held FetchTask to claim", || async {
        g.double.job(job_id).unwrap().task_id
    })
    .await;
    assert!(g.double.task(task_id).is_some());
    // A patient client is answered once the stall is over.
    assert!(c.fetch_task(0).await.unwrap().task.is_none());
    g.shutdown().await;
}

/// `/admin/stats`'s `connections`: what the scale benchmark reads to tell a client that keeps
/// its connections to Gitea alive from one that opens one per call.
#[tokio::test]
async fn gitea_double_counts_the_connections_it_accepts() {
    let g = start().await;
    let version = format!("{}/api/v1/version", g.base_url);
    let calls = |c: reqwest::Client| {
        let version = version.clone();
        async move {
            for _ in 0..3 {
                let resp = c.get(&version).send().await.unwrap();
                assert!(resp.status().is_success());
                resp.bytes().await.unwrap();
            }
        }
    };
    calls(reqwest::Client::new()).await;
    assert_eq!(
        g.double.stats().connections,
        1,
        "three calls over one kept-alive connection"
    );
    let unpooled = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    calls(unpooled).await;
    assert_eq!(
        g.double.stats().connections,
        4,
        "a client that keeps nothing alive: one connection per call"
    );
}
