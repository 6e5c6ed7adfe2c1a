//! `tenantci dispatch run`: the must-shows. Each test plays the executor through the
//! facade with only the executor Secret's files.

use tenantci::forge::gitea::connect::Code;
use tenantci::forge::gitea::proto::{TaskResult, TaskState, UpdateTaskRequest};

use super::harness::{World, eventually};

fn secret_value(i: usize) -> String {
    format!("s3cr3t-{i}-{}", "x".repeat(24))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_tasks_with_capacity_two_all_succeed_never_more_than_two_pods() {
    let w = World::start(2).await;
    let d = w.dispatcher("d1");
    d.wait_leader(true).await;
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(w.enqueue(&format!("job-{i}"), &secret_value(i)).await);
    }
    let mut done = 0;
    let mut seen_objects = Vec::new();
    while done < 5 {
        // Whichever executors exist now: run each to completion.
        let secrets = eventually("an executor Secret", || async {
            let s = w.secrets().await;
            (!s.is_empty()).then_some(s)
        })
        .await;
        assert!(
            secrets.len() <= 2,
            "at most capacity executors: {}",
            secrets.len()
        );
        for s in secrets {
            let task: i64 = s.metadata.labels.as_ref().unwrap()["tenantci.io/task-id"]
                .parse()
                .unwrap();
            let pod = w.pods().await;
            seen_objects.push(serde_json::to_string(&s).unwrap());
            seen_objects.push(serde_json::to_string(&pod).unwrap());
            let ex = super::harness::Executor::from_secret(&s);
            let t = ex.run(task).await;
            assert!(
                t.secrets
                    .get("DEPLOY_KEY")
                    .is_some_and(|v| v.starts_with("s3cr3t-")),
                "the task's secrets reach the executor"
            );
            done += 1;
            // Wait for this executor to be cleaned up before looking at the next batch.
            let name = format!("gitea-task-{task}");
            eventually("the finished executor to be deleted", || async {
                (!w.secrets()
                    .await
                    .iter()
                    .any(|s| s.metadata.name.as_deref() == Some(&name)))
                .then_some(())
            })
            .await;
        }
    }
    for job in &jobs {
        let task = w.claimed(*job).await;
        let view = w.task(task).await;
        assert_eq!(view["result"], "RESULT_SUCCESS", "{view}");
        assert!(
            view["logs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str() == Some(&format!("ran task {task}"))),
            "{view}"
        );
    }
    w.all_cleaned_up().await;
    assert!(
        w.watch.max_live() <= 2,
        "never more than 2 executor Pods at once (saw {})",
        w.watch.max_live()
    );
    assert!(
        w.watch.creations().values().all(|n| *n == 1),
        "one Pod per task: {:?}",
        w.watch.creations()
    );
    // No task secret in clear: not in the JetStream store, the objects, or the log.
    let store = w.jetstream_store();
    let log = d.log_text();
    for i in 0..5 {
        let v = secret_value(i);
        assert!(
            !store.windows(v.len()).any(|win| win == v.as_bytes()),
            "secret {i} in the JetStream store"
        );
        assert!(!log.contains(&v), "secret {i} in the dispatcher log");
        assert!(
            seen_objects.iter().all(|o| !o.contains(&v)),
            "secret {i} in a Pod or Secret"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_and_borrowed_capabilities_are_refused() {
    let w = World::start(2).await;
    let _d = w.dispatcher("d1");
    let a = w.claimed(w.enqueue("a", "sa").await).await;
    let b = w.claimed(w.enqueue("b", "sb").await).await;
    let ea = w.executor(a).await;
    let eb = w.executor(b).await;
    // A forged token for task a.
    let forged = ea.client(&ea.uuid, &"0".repeat(64));
    let err = forged.fetch_task(0).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated), "{err}");
    // Task a's capability presented for task b.
    let borrowed = ea.client(&eb.uuid, &ea.token);
    let err = borrowed.fetch_task(0).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::Unauthenticated), "{err}");
    // Task a's own credentials, reporting task b.
    let err = ea
        .own()
        .update_task(&UpdateTaskRequest {
            state: Some(TaskState {
                id: b,
                result: TaskResult::Failure as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::PermissionDenied), "{err}");
    // Neither refusal changed anything: both tasks still run to success.
    ea.run(a).await;
    eb.run(b).await;
    for t in [a, b] {
        assert_eq!(w.task(t).await["result"], "RESULT_SUCCESS");
    }
    // Handed out once: a second FetchTask gets no task.
    assert!(
        ea.own()
            .fetch_task(0)
            .await
            .map(|r| r.task.is_none())
            .unwrap_or(true)
    );
    w.all_cleaned_up().await;
}
