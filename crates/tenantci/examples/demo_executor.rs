//! The official runner's part of one task, for `scripts/demo.sh` (the demo has no act_runner
//! and the simulator no kubelet): reads the executor Secret's `.runner` as the runner would
//! find it in its Pod, then Declare, FetchTask, UpdateLog and UpdateTask(SUCCESS) through the
//! Pod's `tenantci executor-proxy` (which the demo runs with the sidecar's flags, on a free
//! port instead of the Pod's fixed one) to the dispatcher's facade
//! (tenantci_testkit::executor), saying what it does on stdout. Prints no token and no
//! secret value.
//!
//! Usage: demo_executor RUNNER_FILE PROXY_URL   (the Secret's `.runner`; http://127.0.0.1:PORT)

use tenantci_core::forge::gitea::proto::{ProtoEnum, TaskResult};
use tenantci_testkit::executor::Executor;

fn fail(msg: String) -> ! {
    eprintln!("demo_executor: {msg}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, runner_file, proxy_url] = args.as_slice() else {
        fail("usage: demo_executor RUNNER_FILE PROXY_URL".into())
    };
    let read = |p: &str| {
        std::fs::read_to_string(p).unwrap_or_else(|e| fail(format!("cannot read {p}: {e}")))
    };
    let mut ex = Executor::from_files(read(runner_file).as_bytes(), "")
        .unwrap_or_else(|e| fail(format!("{runner_file}: {e}")));
    println!(
        "executor: .runner says proxy {} (here {proxy_url}), runner uuid {}, labels {:?}, ephemeral {}",
        ex.address, ex.uuid, ex.labels, ex.ephemeral
    );
    ex.address = proxy_url.clone();

    let task = ex.fetch().await;
    let names: Vec<&str> = task.secrets.keys().map(String::as_str).collect();
    println!(
        "executor: Declare, FetchTask -> task {} ({} bytes of workflow, secrets: {})",
        task.id,
        task.workflow_payload.as_ref().map_or(0, Vec::len),
        if names.is_empty() {
            "none".into()
        } else {
            format!("{} (values not shown)", names.join(", "))
        }
    );
    let again = ex
        .own()
        .fetch_task(0)
        .await
        .unwrap_or_else(|e| fail(format!("FetchTask: {e}")));
    let same = again.task.as_ref().map(|t| t.id) == Some(task.id);
    println!(
        "executor: FetchTask again, before any report -> {}",
        if same {
            "the same task (an answer may have been lost: handed again until the first report)"
        } else {
            "something else (unexpected!)"
        }
    );

    let first = format!("demo executor: running task {}", task.id);
    let lines = [first.as_str(), "$ make test", "ok"];
    let done = ex.finish(task.id, &lines).await;
    println!(
        "executor: UpdateLog {} rows -> ack_index {}",
        lines.len(),
        done.ack_index
    );
    println!(
        "executor: UpdateTask(SUCCESS) -> Gitea holds {}",
        TaskResult::proto_name(done.result).unwrap_or("RESULT_UNSPECIFIED")
    );
    let after = ex.own().fetch_task(0).await;
    println!(
        "executor: FetchTask after reporting -> {}",
        match after {
            Ok(r) if r.task.is_none() =>
                "no task (consumed once the executor reported)".to_string(),
            Ok(_) => "a task (unexpected!)".to_string(),
            Err(e) => format!("refused ({e})"),
        }
    );
}
