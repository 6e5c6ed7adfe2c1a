//! The third backend, `fake` (`backend::fake`, feature `fake-backend`, which the test build
//! turns on): a task on it runs through claim, queue, executor, facade and report as a task
//! on a Pod does, beside one. Its executor is a directory the test plays the runner from;
//! that the rest of the dispatcher needed no change for it is what this shows.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::harness::World;
use tenantci_dispatch::backend::fake;
use tenantci_testkit::executor::Executor;
use tenantci_testkit::wait::eventually;

/// The runner of the fake executor of `task` under `root`, once its directory is complete.
async fn fake_executor(root: &Path, task: i64) -> Executor {
    let dir = root.join(task.to_string());
    eventually("the fake executor's directory", || async {
        // `attempt` is written last: with it, every other file is there.
        dir.join("attempt").exists().then_some(())
    })
    .await;
    for file in [".runner", "ca.crt", "facade.url", "attempt"] {
        let mode = std::fs::metadata(dir.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file} is the owner's only");
    }
    let runner = std::fs::read(dir.join(".runner")).unwrap();
    let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let mut ex = Executor::from_files(&runner, &ca).unwrap();
    // No proxy beside it: the stand-in talks to the facade itself.
    ex.address = std::fs::read_to_string(dir.join("facade.url")).unwrap();
    ex
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_on_the_third_backend_runs_end_to_end_beside_a_pod_task() {
    let mut w = World::start(1).await;
    let root = w.dir.path().join("fake-executors");
    w.base_mut().capacity.set(fake::KIND, 1);
    w.base_mut().gitea.labels.push("fake".into());
    w.push_dispatcher_env(fake::DIR_VAR, root.to_str().unwrap());
    let d = w.dispatcher("d1").await;

    let on_fake = w
        .enqueue_on("fake-1", &["self-hosted", "fake"], "fake-secret")
        .await;
    let on_pod = w.enqueue("pod-1", "pod-secret").await;
    let (tf, tp) = (w.claimed(on_fake).await, w.claimed(on_pod).await);

    let ran = fake_executor(&root, tf).await.run(tf).await;
    assert_eq!(ran.id, tf);
    w.executor(tp).await.run(tp).await;
    w.assert_ran_once(&[on_fake, on_pod]).await;

    // Gitea accepted the final state: the reconciler deletes the fake executor as it does a Pod.
    let dir = root.join(tf.to_string());
    eventually("the fake executor deleted after its end", || async {
        (!dir.exists()).then_some(())
    })
    .await;
    w.all_cleaned_up().await;
    assert_eq!(w.watch.max_live(), 1, "the fake task had no Pod");
    drop(d);
}
