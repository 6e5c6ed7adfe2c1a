//! The facade after a task's end (issue 19): the capability stays valid, but nothing it sends
//! reaches Gitea any more. A final UpdateTask repeated as the runner repeats it after a lost
//! answer gets the recorded state; anything else gets `failed_precondition`, also from a
//! restarted dispatcher that never saw the task end.

use tenantci_core::forge::gitea::connect::Code;
use tenantci_core::forge::gitea::proto::{
    LogRow, TaskResult, TaskState, UpdateLogRequest, UpdateTaskRequest,
};
use tenantci_testkit::executor::Executor;

use super::harness::World;

fn final_update(task: i64, result: TaskResult, output: Option<(&str, &str)>) -> UpdateTaskRequest {
    UpdateTaskRequest {
        state: Some(TaskState {
            id: task,
            result: result as i32,
            ..Default::default()
        }),
        outputs: output
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into_iter()
            .collect(),
    }
}

/// Every report that would change the task at Gitea: refused with `failed_precondition`.
async fn assert_refused(ex: &Executor, task: i64) {
    let c = ex.own();
    for (what, req) in [
        (
            "another final state",
            final_update(task, TaskResult::Failure, Some(("replayed", "1"))),
        ),
        (
            "a heartbeat",
            final_update(task, TaskResult::Unspecified, None),
        ),
    ] {
        let err = c.update_task(&req).await.unwrap_err();
        assert_eq!(err.code(), Some(Code::FailedPrecondition), "{what}: {err}");
        assert!(err.to_string().contains("is over"), "{what}: {err}");
    }
    let err = c
        .update_log(&UpdateLogRequest {
            task_id: task,
            index: 1,
            rows: vec![LogRow {
                time: None,
                content: "replayed line".into(),
            }],
            no_more: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replayed_final_update_task_is_refused_and_gitea_is_unchanged() {
    let w = World::start(1).await;
    let mut d = w.dispatcher("d1").await;
    let t = w.claimed(w.enqueue("replayed", "s").await).await;
    let ex = w.executor(t).await;
    ex.run(t).await;
    let at_the_end = w.task(t).await;
    assert_eq!(at_the_end["result"], "RESULT_SUCCESS", "{at_the_end}");

    // The runner's retry of its final UpdateTask (the answer was lost): the recorded state.
    let again = ex
        .own()
        .update_task(&final_update(t, TaskResult::Success, None))
        .await
        .unwrap();
    assert_eq!(again.state.unwrap().result, TaskResult::Success as i32);
    assert_refused(&ex, t).await;
    assert_eq!(w.task(t).await, at_the_end, "Gitea's task is unchanged");

    // A dispatcher that never saw the end (restarted), once the executor objects are gone.
    w.all_cleaned_up().await;
    assert_eq!(d.terminate(), Some(0));
    let _d = w.dispatcher("d1").await;
    assert_refused(&ex, t).await;
    assert_eq!(w.task(t).await, at_the_end, "Gitea's task is unchanged");
}
