//! The official runner's part of one task, for `scripts/demo.sh` (the demo has no act_runner
//! and the simulator no kubelet): reads the executor Secret's two files as the runner would
//! find them in its Pod, then Declare, FetchTask, UpdateLog and UpdateTask(SUCCESS) through the
//! dispatcher's facade with tenantci's RunnerClient, saying what it does on stdout. Prints
//! no token and no secret value.
//!
//! Usage: demo_executor RUNNER_FILE CA_FILE   (the Secret's `.runner` and `ca.crt`)

use std::time::Duration;

use serde_json::Value;
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient};
use tenantci_core::forge::gitea::proto::{
    DeclareRequest, LogRow, ProtoEnum, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};

fn fail(msg: String) -> ! {
    eprintln!("demo_executor: {msg}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, runner_file, ca_file] = args.as_slice() else {
        fail("usage: demo_executor RUNNER_FILE CA_FILE".into())
    };
    let read = |p: &str| {
        std::fs::read_to_string(p).unwrap_or_else(|e| fail(format!("cannot read {p}: {e}")))
    };
    let runner: Value = serde_json::from_str(&read(runner_file))
        .unwrap_or_else(|e| fail(format!("{runner_file} is not JSON: {e}")));
    let field = |k: &str| {
        runner[k]
            .as_str()
            .unwrap_or_else(|| fail(format!("{runner_file} has no `{k}`")))
            .to_string()
    };
    let (address, uuid) = (field("address"), field("uuid"));
    println!(
        "executor: .runner says facade {address}, runner uuid {uuid}, ephemeral {}",
        runner["ephemeral"]
    );
    let mut cfg = ClientConfig::new(&address);
    cfg.ca_pem = Some(read(ca_file));
    cfg.request_timeout = Duration::from_secs(10);
    let client = RunnerClient::new(cfg)
        .unwrap_or_else(|e| fail(e.to_string()))
        .with_credentials(Credentials {
            uuid,
            token: field("token"),
        });

    let declared = client
        .declare(&DeclareRequest {
            version: "demo-executor".into(),
            labels: vec!["self-hosted".into(), "pod".into()],
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| fail(format!("Declare: {e}")));
    println!(
        "executor: Declare accepted (runner {:?})",
        declared.map(|r| r.name).unwrap_or_default()
    );

    // The facade hands the task out exactly once; a few tries cover a facade still starting.
    let mut task = None;
    for _ in 0..20 {
        match client.fetch_task(0).await {
            Ok(r) if r.task.is_some() => {
                task = r.task;
                break;
            }
            Ok(_) => {}
            Err(e) => eprintln!("executor: FetchTask: {e}; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let task = task.unwrap_or_else(|| fail("the facade handed out no task".into()));
    let names: Vec<&str> = task.secrets.keys().map(String::as_str).collect();
    println!(
        "executor: FetchTask -> task {} ({} bytes of workflow, secrets: {})",
        task.id,
        task.workflow_payload.as_ref().map_or(0, Vec::len),
        if names.is_empty() {
            "none".into()
        } else {
            format!("{} (values not shown)", names.join(", "))
        }
    );
    let again = client
        .fetch_task(0)
        .await
        .unwrap_or_else(|e| fail(format!("FetchTask: {e}")));
    println!(
        "executor: FetchTask again -> {}",
        if again.task.is_some() {
            "a task (unexpected!)"
        } else {
            "no task (each capability gets its task once)"
        }
    );

    let lines = [
        format!("demo executor: running task {}", task.id),
        "$ make test".to_string(),
        "ok".to_string(),
    ];
    let ack = client
        .update_log(&UpdateLogRequest {
            task_id: task.id,
            index: 0,
            rows: lines
                .iter()
                .map(|l| LogRow {
                    time: None,
                    content: l.clone(),
                })
                .collect(),
            no_more: true,
        })
        .await
        .unwrap_or_else(|e| fail(format!("UpdateLog: {e}")));
    println!(
        "executor: UpdateLog {} rows -> ack_index {}",
        lines.len(),
        ack.ack_index
    );
    let done = client
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: task.id,
                result: TaskResult::Success as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| fail(format!("UpdateTask: {e}")));
    let result = done.state.map(|s| s.result).unwrap_or_default();
    println!(
        "executor: UpdateTask(SUCCESS) -> Gitea holds {}",
        TaskResult::proto_name(result).unwrap_or("RESULT_UNSPECIFIED")
    );
}
