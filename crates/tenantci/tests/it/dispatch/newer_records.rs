//! Version skew (issue 55): records a newer release wrote, in the real stores (the claim
//! ledger in nats-server's KV bucket, an executor Secret in the simulator's apiserver), are
//! left as they are (bytes and revision unchanged after the dispatcher ran), reported once
//! each (the metric by kind, one log line per record saying what to do), and every other task
//! runs and finishes as before.

use std::collections::BTreeMap;

use async_nats::jetstream;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use tenantci_testkit::wait::eventually;

use super::harness::{NAMESPACE, World};
use crate::util::{assert_exit, run, tenantci};

/// Far above any task the Gitea double hands out.
const LEDGER_TASK: u64 = 990_001;
const SECRET_TASK: u64 = 990_002;

/// A ledger entry of a made-up format 2: fields this release does not know, a phase it has no
/// name for. Read with this release's meaning it would not even decode.
fn newer_entry() -> Vec<u8> {
    format!(
        r#"{{"version":2,"task":{LEDGER_TASK},"attempt":1,"backend":"pod","phase":"teleported","at":"2026-12-08T00:00:00Z","where":{{"region":"moon"}}}}"#
    )
    .into_bytes()
}

/// An executor Secret of format 2, labelled and named as this release's are (so its watch
/// and its reconciler see it).
fn newer_secret() -> Secret {
    let labels = BTreeMap::from([
        ("tenantci.io/task-id".to_string(), SECRET_TASK.to_string()),
        ("tenantci.io/attempt".to_string(), "1".to_string()),
        ("app.kubernetes.io/managed-by".into(), "tenantci".into()),
        (
            "app.kubernetes.io/component".into(),
            "gitea-executor".into(),
        ),
    ]);
    let annotations = BTreeMap::from([
        ("tenantci.io/format".to_string(), "2".to_string()),
        (
            "tenantci.io/assignment-id".to_string(),
            format!("task-{SECRET_TASK}-attempt-1"),
        ),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("gitea-task-{SECRET_TASK}")),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "assignment-v2".to_string(),
            ByteString(b"sealed by a later release".to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The metric's value for `kind`.
fn series(kind: &str) -> String {
    format!("tenantci_dispatch_records_from_newer_release_total{{kind=\"{kind}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_of_a_newer_release_are_left_reported_once_and_other_tasks_finish() {
    let w = World::start(2).await;
    // The queue as `queue init` makes it, before any dispatcher ran.
    let admin = w.nats.password_file("ci-admin");
    let o = run(tenantci()
        .args([
            "queue",
            "init",
            "--nats",
            &w.nats.url,
            "--user",
            "ci-admin",
            "--password-file",
        ])
        .arg(&admin));
    assert_exit(&o, 0);
    // As ci-worker: the one user whose grants write the bucket's entries.
    let js = jetstream::new(w.nats.client("ci-worker").await);
    let kv = js.get_key_value("CI_CLAIMS").await.unwrap();
    let key = format!("task.{LEDGER_TASK}");
    let revision = kv.put(&key, newer_entry().into()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.kube.clone(), NAMESPACE);
    let created = secrets
        .create(&PostParams::default(), &newer_secret())
        .await
        .unwrap();

    let d = w.dispatcher("d1").await;
    let mut jobs = Vec::new();
    for name in ["first", "second", "third"] {
        let job = w.enqueue(name, "s").await;
        let task = w.claimed(job).await;
        w.executor(task).await.run(task).await;
        jobs.push(job);
    }
    w.assert_ran_once(&jobs).await;

    for kind in ["claim_ledger", "executor_objects"] {
        eventually(&format!("the {kind} record to be reported"), || async {
            (d.metric(&series(kind)).await == Some(1.0)).then_some(())
        })
        .await;
    }
    // Reported once each, however many terms, watches and sweeps met them meanwhile.
    let log = d.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("written by a newer tenantci release"))
        .collect();
    assert_eq!(lines.len(), 2, "one line per record: {lines:#?}");
    for l in &lines {
        assert!(l.contains("upgrade this process"), "{l}");
    }
    for record in [key.as_str(), "Secret "] {
        assert!(
            lines.iter().any(|l| l.contains(record)),
            "{record}: {lines:#?}"
        );
    }

    let kept = kv.entry(&key).await.unwrap().expect("the entry is kept");
    assert_eq!(kept.revision, revision, "never written");
    assert_eq!(kept.value.to_vec(), newer_entry(), "bytes unchanged");
    let live = secrets
        .get(&format!("gitea-task-{SECRET_TASK}"))
        .await
        .unwrap();
    assert_eq!(
        live.metadata.resource_version, created.metadata.resource_version,
        "the Secret is never written"
    );
    assert_eq!(live.data, created.data);
    assert_eq!(
        d.metric(&series("claim_ledger")).await,
        Some(1.0),
        "still once"
    );

    // The test's own record goes; then nothing of the three tasks is left either.
    secrets
        .delete(
            &format!("gitea-task-{SECRET_TASK}"),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    w.all_cleaned_up().await;
}
