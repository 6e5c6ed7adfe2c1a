//! The JetStream job queue against a real nats-server running the config that
//! `tenantci queue nats-config` generates: permissions, capacity caps, redelivery, dedupe,
//! durability, and that task secrets never reach the store in clear.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use tenantci_dispatch::backend::{pod, vm};
use tenantci_dispatch::backend_kind::BackendKind;
use tenantci_dispatch::queue::STREAM;
use tenantci_dispatch::queue::assignment::{Assignment, SealingKey};
use tenantci_dispatch::queue::consumer::{CappedConsumer, ConsumerSettings, Job, Outcome};
use tenantci_dispatch::queue::ledger_bucket;
use tenantci_dispatch::queue::producer::{Producer, PublishError, Published};
use tenantci_dispatch::task::ledger::{Entry, Ledger, Phase};
use tenantci_dispatch::task::mirror::Mirror;
use tenantci_dispatch::task_id::TaskId;
use tokio::sync::{Semaphore, mpsc};

use tenantci_testkit::nats::NatsServer;
use tenantci_testkit::wait::{DEADLINE, eventually};

use super::util::{self, assert_exit, stderr, stdout};

/// Awaits an event, bounded by DEADLINE (a deadlock guard, never a timing assertion).
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Runs `tenantci queue <sub> --nats URL --user U --password-file F EXTRA...`.
fn queue_cmd(server: &NatsServer, sub: &str, user: &str, extra: &[&str]) -> std::process::Output {
    util::run(
        util::tenantci()
            .args(["queue", sub, "--nats", &server.url, "--user", user])
            .arg("--password-file")
            .arg(server.password_file(user))
            .args(extra),
    )
}

/// `tenantci queue init` as ci-admin with `extra` flags; asserts success.
fn init_topology(server: &NatsServer, extra: &[&str]) {
    assert_exit(&queue_cmd(server, "init", "ci-admin", extra), 0);
}

fn assignment(key: &SealingKey, id: &str, backend: BackendKind, payload: &[u8]) -> Assignment {
    Assignment::seal(key, id, 1, backend, vec!["ubuntu-latest".into()], payload).unwrap()
}

async fn admin_consumer(server: &NatsServer, backend: BackendKind) -> jetstream::consumer::Info {
    let js = jetstream::new(server.client("ci-admin").await);
    let mut c: jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream(backend.consumer(), STREAM)
        .await
        .unwrap();
    c.info().await.unwrap().clone()
}

async fn stream_messages(server: &NatsServer) -> u64 {
    let js = jetstream::new(server.client("ci-admin").await);
    let mut s = js.get_stream(STREAM).await.unwrap();
    s.info().await.unwrap().state.messages
}

/// Waits for a permissions violation naming `subject` on a client's event channel.
async fn violation(events: &mut mpsc::UnboundedReceiver<String>, subject: &str) {
    within(&format!("a permissions violation for {subject}"), async {
        loop {
            let e = events.recv().await.expect("event channel open");
            if e.to_lowercase().contains("permissions violation") && e.contains(subject) {
                return;
            }
        }
    })
    .await
}

fn fast_settings() -> ConsumerSettings {
    ConsumerSettings {
        pull_expires: Duration::from_secs(5),
        nak_base: Duration::from_millis(100),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_producer_cannot_pull_create_streams_or_read_the_worker_inbox() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let (producer, mut events) = server.client_with_events("ci-producer").await;

    // Allowed: publishing an assignment, with its PubAck on the producer's own inbox.
    let key = SealingKey::generate();
    let p = Producer::new(producer.clone());
    let a = assignment(&key, "1", pod::KIND, b"payload");
    assert!(matches!(p.publish(&a).await, Ok(Published::Stored { .. })));

    // Pull from a consumer.
    producer
        .publish_with_reply(
            "$JS.API.CONSUMER.MSG.NEXT.CI_RUNNER.pod",
            "_INBOX_ci-producer.x",
            "1".into(),
        )
        .await
        .unwrap();
    violation(&mut events, "$JS.API.CONSUMER.MSG.NEXT.CI_RUNNER.pod").await;

    // Create a stream (through the JetStream API, as a client library would).
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(500))
        .build(producer.clone());
    let created = js
        .create_stream(jetstream::stream::Config {
            name: "EVIL".into(),
            subjects: vec!["evil.>".into()],
            ..Default::default()
        })
        .await;
    assert!(created.is_err(), "the producer created a stream");
    violation(&mut events, "$JS.API.STREAM.CREATE.EVIL").await;

    // Read the worker's inbox (and the shared default inbox).
    let _sub = producer.subscribe("_INBOX_ci-worker.>").await.unwrap();
    violation(&mut events, "_INBOX_ci-worker.>").await;
    let _sub2 = producer.subscribe("_INBOX.>").await.unwrap();
    violation(&mut events, "_INBOX.>").await;

    // Nothing changed: one message, still the only stream, not pulled by the producer.
    let admin = jetstream::new(server.client("ci-admin").await);
    assert!(admin.get_stream("EVIL").await.is_err());
    assert_eq!(stream_messages(&server).await, 1);
    assert_eq!(admin_consumer(&server, pod::KIND).await.num_ack_pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_worker_cannot_publish_assignments_or_read_the_producer_inbox() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let (worker, mut events) = server.client_with_events("ci-worker").await;

    // Allowed: binding to (reading the info of) its consumers.
    CappedConsumer::bind(worker.clone(), pod::KIND, 1, fast_settings())
        .await
        .unwrap();
    CappedConsumer::bind(worker.clone(), vm::KIND, 1, fast_settings())
        .await
        .unwrap();

    for subject in ["ci.runner.pod", "ci.runner.vm"] {
        worker.publish(subject, "forged".into()).await.unwrap();
        violation(&mut events, subject).await;
    }
    let _sub = worker.subscribe("_INBOX_ci-producer.>").await.unwrap();
    violation(&mut events, "_INBOX_ci-producer.>").await;
    // Nor may it administer the stream.
    worker
        .publish_with_reply(
            "$JS.API.STREAM.DELETE.CI_RUNNER",
            "_INBOX_ci-worker.x",
            "".into(),
        )
        .await
        .unwrap();
    violation(&mut events, "$JS.API.STREAM.DELETE.CI_RUNNER").await;

    assert_eq!(stream_messages(&server).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_anonymous_and_wrong_password_connections_are_refused() {
    let server = NatsServer::start();
    let anonymous = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(server.url.as_str())
        .await;
    assert!(anonymous.is_err(), "an anonymous client connected");

    let bad = util::scratch();
    let pw = bad.path().join("wrong.password");
    std::fs::write(&pw, "not-the-password").unwrap();
    let out = util::run_args([
        "queue".as_ref(),
        "status".as_ref(),
        "--nats".as_ref(),
        server.url.as_ref(),
        "--user".as_ref(),
        "ci-worker".as_ref(),
        "--password-file".as_ref(),
        pw.as_os_str(),
    ]);
    assert_exit(&out, 3);
    assert!(
        stderr(&out).contains("refused the credentials"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_capacity_two_never_has_more_than_two_in_flight() {
    let server = NatsServer::start();
    init_topology(&server, &["--pod-capacity", "2"]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    for i in 0..10 {
        producer
            .publish(&assignment(&key, &format!("t{i}"), pod::KIND, b"x"))
            .await
            .unwrap();
    }

    let consumer = Arc::new(
        CappedConsumer::bind(
            server.client("ci-worker").await,
            pod::KIND,
            2,
            fast_settings(),
        )
        .await
        .unwrap(),
    );
    let active = Arc::new(AtomicUsize::new(0));
    let max_active = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let handler = {
        let (active, max_active, release) = (active.clone(), max_active.clone(), release.clone());
        move |job: Job| {
            let (active, max_active, release, started_tx) = (
                active.clone(),
                max_active.clone(),
                release.clone(),
                started_tx.clone(),
            );
            async move {
                let n = active.fetch_add(1, Ordering::SeqCst) + 1;
                max_active.fetch_max(n, Ordering::SeqCst);
                started_tx.send(job.assignment.task_id.clone()).unwrap();
                release.acquire().await.unwrap().forget();
                active.fetch_sub(1, Ordering::SeqCst);
                Outcome::Started
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            consumer
                .run(handler, async {
                    let _ = stop_rx.await;
                })
                .await
        })
    };

    let mut seen = Vec::new();
    let mut released = 0;
    for _ in 0..2 {
        seen.push(
            within("an assignment to start", started.recv())
                .await
                .unwrap(),
        );
    }
    loop {
        // Both slots busy: the server holds the rest; nothing was prefetched.
        let info = admin_consumer(&server, pod::KIND).await;
        assert_eq!(
            info.num_ack_pending,
            seen.len() - released,
            "in flight at the server"
        );
        assert_eq!(info.num_ack_pending, 2);
        assert_eq!(
            info.num_pending,
            (10 - seen.len()) as u64,
            "pending at the server"
        );
        assert_eq!(consumer.stats().in_flight, 2);
        if seen.len() == 10 {
            release.add_permits(2);
            break;
        }
        release.add_permits(1);
        released += 1;
        seen.push(
            within("an assignment to start", started.recv())
                .await
                .unwrap(),
        );
    }
    eventually("all acks", || async {
        (consumer.stats().acked == 10).then_some(())
    })
    .await;
    stop_tx.send(()).unwrap();
    within("the consumer to stop", runner).await.unwrap();

    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10, "every assignment handled once");
    let stats = consumer.stats();
    assert_eq!(max_active.load(Ordering::SeqCst), 2, "handler concurrency");
    assert_eq!(stats.max_in_flight, 2);
    assert_eq!(stats.max_pull_batch, 1, "never a prefetch batch");
    assert_eq!(
        stream_messages(&server).await,
        0,
        "acked assignments leave the work queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_a_worker_that_dies_without_acking_gets_its_assignment_redelivered() {
    let server = NatsServer::start();
    init_topology(&server, &["--ack-wait", "1s"]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    producer
        .publish(&assignment(&key, "42", pod::KIND, b"secret-payload"))
        .await
        .unwrap();

    // Worker A receives it and dies mid-work (its task and connection go away, no ack).
    {
        let client = server.client("ci-worker").await;
        let consumer = CappedConsumer::bind(client.clone(), pod::KIND, 1, fast_settings())
            .await
            .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            consumer
                .run(
                    move |job: Job| {
                        let tx = tx.clone();
                        async move {
                            tx.send(job.delivered).unwrap();
                            std::future::pending::<Outcome>().await
                        }
                    },
                    std::future::pending(),
                )
                .await
        });
        assert_eq!(within("the first delivery", rx.recv()).await, Some(1));
        task.abort();
        let _ = task.await;
        drop(client);
    }

    // Worker B gets it again after ack_wait.
    let consumer = CappedConsumer::bind(
        server.client("ci-worker").await,
        pod::KIND,
        1,
        fast_settings(),
    )
    .await
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let key2 = key.clone();
    let handler = move |job: Job| {
        let tx = tx.clone();
        let key = key2.clone();
        async move {
            tx.send((
                job.assignment.task_id.clone(),
                job.delivered,
                job.assignment.open(&key).unwrap(),
            ))
            .unwrap();
            Outcome::Started
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = consumer.run(handler, async {
        let _ = stop_rx.await;
    });
    let check = async {
        let (id, delivered, payload) = within("the redelivery", rx.recv()).await.unwrap();
        assert_eq!(id, "42");
        assert!(delivered >= 2, "delivered {delivered}");
        assert_eq!(payload, b"secret-payload");
        stop_tx.send(()).unwrap();
    };
    tokio::join!(run, check);
    assert_eq!(consumer.stats().acked, 1);
    assert_eq!(stream_messages(&server).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_transient_failure_naks_and_poison_is_terminated() {
    let server = NatsServer::start();
    init_topology(&server, &["--max-deliver", "3"]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    producer
        .publish(&assignment(&key, "flaky", pod::KIND, b"p"))
        .await
        .unwrap();
    producer
        .publish(&assignment(&key, "poison", pod::KIND, b"p"))
        .await
        .unwrap();
    let consumer = CappedConsumer::bind(
        server.client("ci-worker").await,
        pod::KIND,
        2,
        fast_settings(),
    )
    .await
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let tx = tx.clone();
        async move {
            let _ = tx.send((job.assignment.task_id.clone(), job.delivered));
            match job.assignment.task_id.as_str() {
                "poison" => Outcome::Poison("malformed job".into()),
                _ if job.delivered < 2 => Outcome::Retry("apiserver busy".into()),
                _ => Outcome::Started,
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = consumer.run(handler, async {
        let _ = stop_rx.await;
    });
    let check = async {
        let mut got = Vec::new();
        while got.len() < 3 {
            got.push(within("deliveries", rx.recv()).await.unwrap());
        }
        got.sort();
        assert_eq!(
            got,
            vec![
                ("flaky".into(), 1),
                ("flaky".into(), 2),
                ("poison".into(), 1)
            ]
        );
        eventually("ack and term", || async {
            let s = consumer.stats();
            (s.acked == 1 && s.termed == 1).then_some(())
        })
        .await;
        stop_tx.send(()).unwrap();
    };
    tokio::join!(run, check);
    let s = consumer.stats();
    assert_eq!(s.naked, 1);
    assert_eq!(
        stream_messages(&server).await,
        0,
        "poison is gone, not redelivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_republishing_the_same_task_attempt_is_deduplicated() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    let first = producer
        .publish(&assignment(&key, "7", pod::KIND, b"a"))
        .await
        .unwrap();
    // Sealed again (another nonce): a different body, the same task id + attempt.
    let again = producer
        .publish(&assignment(&key, "7", pod::KIND, b"a"))
        .await
        .unwrap();
    let Published::Stored { sequence } = first else {
        panic!("first publish: {first:?}")
    };
    assert_eq!(again, Published::Duplicate { sequence });
    // A new attempt of the same task is a new message.
    let retry = Assignment::seal(&key, "7", 2, pod::KIND, vec![], b"a").unwrap();
    assert!(matches!(
        producer.publish(&retry).await,
        Ok(Published::Stored { .. })
    ));
    assert_eq!(stream_messages(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_a_full_stream_is_an_error_the_producer_sees() {
    let server = NatsServer::start();
    init_topology(&server, &["--max-msgs", "2"]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    for i in 0..2 {
        producer
            .publish(&assignment(&key, &format!("f{i}"), pod::KIND, b"x"))
            .await
            .unwrap();
    }
    let err = producer
        .publish(&assignment(&key, "f2", pod::KIND, b"x"))
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::Full { .. }), "{err}");
    assert_eq!(stream_messages(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_a_server_restart_with_file_storage_loses_nothing() {
    let mut server = NatsServer::start();
    init_topology(&server, &[]);
    let key = SealingKey::generate();
    {
        let producer = Producer::new(server.client("ci-producer").await);
        for i in 0..3 {
            producer
                .publish(&assignment(
                    &key,
                    &format!("r{i}"),
                    pod::KIND,
                    format!("payload-{i}").as_bytes(),
                ))
                .await
                .unwrap();
        }
        producer
            .publish(&assignment(&key, "rv", vm::KIND, b"vm"))
            .await
            .unwrap();
    }
    server.restart();
    assert_eq!(stream_messages(&server).await, 4);
    assert_eq!(admin_consumer(&server, pod::KIND).await.num_pending, 3);
    assert_eq!(admin_consumer(&server, vm::KIND).await.num_pending, 1);

    let consumer = CappedConsumer::bind(
        server.client("ci-worker").await,
        pod::KIND,
        4,
        fast_settings(),
    )
    .await
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = move |job: Job| {
        let tx = tx.clone();
        let key = key.clone();
        async move {
            tx.send(String::from_utf8(job.assignment.open(&key).unwrap()).unwrap())
                .unwrap();
            Outcome::Started
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = consumer.run(handler, async {
        let _ = stop_rx.await;
    });
    let check = async {
        let mut got = Vec::new();
        while got.len() < 3 {
            got.push(within("the stored assignments", rx.recv()).await.unwrap());
        }
        got.sort();
        assert_eq!(got, vec!["payload-0", "payload-1", "payload-2"]);
        eventually("acks", || async {
            (consumer.stats().acked == 3).then_some(())
        })
        .await;
        stop_tx.send(()).unwrap();
    };
    tokio::join!(run, check);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_the_jetstream_store_holds_no_task_secret_in_clear() {
    let mut server = NatsServer::start();
    init_topology(&server, &[]);
    let key = SealingKey::generate();
    let secret = format!("TASK-SECRET-{:016x}", rand::random::<u64>());
    let task_id = format!("visible{:08x}", rand::random::<u32>());
    let producer = Producer::new(server.client("ci-producer").await);
    producer
        .publish(&assignment(
            &key,
            &task_id,
            pod::KIND,
            format!("{{\"token\":\"{secret}\"}}").as_bytes(),
        ))
        .await
        .unwrap();
    server.stop(); // flushes the store

    let mut files = 0;
    let mut saw_task_id = false;
    for (path, bytes) in util::snapshot(&server.store_dir()) {
        files += 1;
        assert!(
            !contains(&bytes, secret.as_bytes()),
            "the task secret is in clear in {}",
            path.display()
        );
        saw_task_id |= contains(&bytes, task_id.as_bytes());
    }
    assert!(files > 0, "no store files");
    // The grep works: the clear routing fields are there, the sealed payload is not.
    assert!(
        saw_task_id,
        "the assignment was not found in the store at all"
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn queue_nats_config_writes_0600_passwords_and_a_bcrypt_fragment_idempotently() {
    let dir = util::scratch();
    let secrets = dir.path().join("secrets");
    let out_file = dir.path().join("auth.conf");
    let args = |json: bool| {
        let mut v = vec![
            "queue".to_string(),
            "nats-config".into(),
            "--secrets-dir".into(),
            secrets.display().to_string(),
            "--out".into(),
            out_file.display().to_string(),
        ];
        if json {
            v.extend(["-o".into(), "json".into()]);
        }
        v
    };
    let first = util::run_args(args(true));
    assert_exit(&first, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(report["fragment_written"], true);
    assert_eq!(util::mode(&secrets), 0o700);
    let fragment = std::fs::read_to_string(&out_file).unwrap();
    for user in ["ci-admin", "ci-producer", "ci-worker"] {
        let pw_file = secrets.join(format!("{user}.password"));
        assert_eq!(util::mode(&pw_file), 0o600);
        let pw = std::fs::read_to_string(&pw_file).unwrap();
        assert!(
            !fragment.contains(pw.trim()),
            "clear-text password of {user}"
        );
        assert!(!stdout(&first).contains(pw.trim()) && !stderr(&first).contains(pw.trim()));
    }
    assert_eq!(fragment.matches("password: \"$2a$11$").count(), 3);
    let passwords = util::snapshot(&secrets);

    let second = util::run_args(args(true));
    assert_exit(&second, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout(&second)).unwrap();
    assert_eq!(report["fragment_written"], false);
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), fragment);
    assert_eq!(util::snapshot(&secrets), passwords, "passwords kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_init_is_idempotent_and_a_capacity_change_updates_max_ack_pending() {
    let server = NatsServer::start();
    let json = |extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["-o", "json"]);
        let out = queue_cmd(&server, "init", "ci-admin", &args);
        assert_exit(&out, 0);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap()
    };
    let created = json(&[]);
    assert_eq!(created["stream_change"]["action"], "created");
    assert_eq!(created["consumers"][0]["change"]["action"], "created");
    assert_eq!(created["ledger"], "CI_CLAIMS");
    assert_eq!(created["ledger_change"]["action"], "created");
    assert_eq!(created["history"], "CI_HISTORY");
    assert_eq!(created["history_change"]["action"], "created");
    let again = json(&[]);
    assert_eq!(again["stream_change"]["action"], "unchanged");
    assert_eq!(again["ledger_change"]["action"], "unchanged");
    assert_eq!(again["history_change"]["action"], "unchanged");
    let bounded = json(&["--history-max-tasks", "50"]);
    assert_eq!(bounded["history_change"]["action"], "updated", "{bounded}");
    assert_eq!(
        bounded["history_change"]["fields"][0], "max_msgs",
        "{bounded}"
    );
    let refused = queue_cmd(&server, "init", "ci-admin", &["--history-max-tasks", "0"]);
    assert_exit(&refused, 2);
    assert!(stderr(&refused).contains("history"), "{}", stderr(&refused));
    assert_eq!(again["consumers"][0]["change"]["action"], "unchanged");
    assert_eq!(again["consumers"][1]["change"]["action"], "unchanged");
    let resized = json(&["--pod-capacity", "8"]);
    assert_eq!(resized["stream_change"]["action"], "unchanged");
    assert_eq!(resized["consumers"][0]["change"]["action"], "updated");
    assert_eq!(
        resized["consumers"][0]["change"]["fields"],
        serde_json::json!(["max_ack_pending"])
    );
    assert_eq!(resized["consumers"][1]["change"]["action"], "unchanged");
    assert_eq!(
        admin_consumer(&server, pod::KIND)
            .await
            .config
            .max_ack_pending,
        8
    );

    assert_eq!(
        admin_consumer(&server, pod::KIND).await.config.max_deliver,
        -1,
        "unlimited deliveries by default"
    );
    // A consumer made with a finite max_deliver (as tenantci did before) is updated to -1.
    json(&["--pod-capacity", "8", "--max-deliver", "5"]);
    assert_eq!(
        admin_consumer(&server, pod::KIND).await.config.max_deliver,
        5
    );
    let upgraded = json(&["--pod-capacity", "8"]);
    assert_eq!(
        upgraded["consumers"][0]["change"]["fields"],
        serde_json::json!(["max_deliver"])
    );
    assert_eq!(
        admin_consumer(&server, vm::KIND).await.config.max_deliver,
        -1
    );

    let s = admin_stream_config(&server).await;
    assert_eq!(s.retention, jetstream::stream::RetentionPolicy::WorkQueue);
    assert_eq!(s.storage, jetstream::stream::StorageType::File);
    assert_eq!(s.discard, jetstream::stream::DiscardPolicy::New);
    assert!(s.duplicate_window >= Duration::from_secs(120));

    // The producer may not administer.
    let out = queue_cmd(&server, "init", "ci-producer", &[]);
    assert_exit(&out, 3);
}

/// The claim ledger as ci-worker uses it (open, write, compare-and-set, list, read), and
/// what neither ci-worker nor ci-producer may do with it, against the generated permissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_the_claim_ledger_is_the_workers_to_write_and_nobody_elses_to_administer() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let bucket = admin_stream_config_of(&server, &ledger_bucket::stream_name()).await;
    assert_eq!(
        bucket.max_age,
        ledger_bucket::RETENTION,
        "the documented retention"
    );
    assert_eq!(bucket.max_messages_per_subject, 1);
    assert_eq!(bucket.storage, jetstream::stream::StorageType::File);

    let (worker, mut events) = server.client_with_events("ci-worker").await;
    let l = Ledger::open(&jetstream::new(worker.clone())).await.unwrap();
    let key = SealingKey::generate();
    let a = assignment(&key, "41", pod::KIND, b"payload");
    let claimed = Entry::step(TaskId::new(41), 1, pod::KIND, Phase::Claimed).with_assignment(&a);
    // The scheduler's first write is a create; the same claim again merges, changing nothing.
    l.record_first(claimed.clone()).await.unwrap();
    let again = l.record_first(claimed).await.unwrap().unwrap();
    assert_eq!(
        (again.phase, again.assignment.is_some()),
        (Phase::Claimed, true)
    );
    l.record(Entry::step(TaskId::new(41), 1, pod::KIND, Phase::Reported))
        .await
        .unwrap();
    // A step behind the entry changes nothing.
    let kept = l
        .record(Entry::step(TaskId::new(41), 1, pod::KIND, Phase::Queued))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.phase, Phase::Reported);
    assert_eq!(kept.assignment, None, "dropped once reported");
    l.record(Entry::step(TaskId::new(42), 1, vm::KIND, Phase::Queued))
        .await
        .unwrap();
    l.record(
        Entry::step(TaskId::new(41), 1, pod::KIND, Phase::Final).with_result("RESULT_SUCCESS"),
    )
    .await
    .unwrap();
    let all = l.entries().await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        l.final_result(TaskId::new(41)).await.unwrap().as_deref(),
        Some("RESULT_SUCCESS")
    );
    assert_eq!(l.final_result(TaskId::new(42)).await.unwrap(), None);

    // ci-worker may not purge, delete or reconfigure the bucket.
    for api in [
        "$JS.API.STREAM.PURGE.KV_CI_CLAIMS",
        "$JS.API.STREAM.DELETE.KV_CI_CLAIMS",
        "$JS.API.STREAM.UPDATE.KV_CI_CLAIMS",
    ] {
        worker
            .publish_with_reply(api, "_INBOX_ci-worker.x", "{}".into())
            .await
            .unwrap();
        violation(&mut events, api).await;
    }
    // ci-producer may neither read nor write it.
    let (producer, mut events) = server.client_with_events("ci-producer").await;
    producer
        .publish("$KV.CI_CLAIMS.task.41", "{}".into())
        .await
        .unwrap();
    violation(&mut events, "$KV.CI_CLAIMS.task.41").await;
    assert!(
        Ledger::open(&jetstream::new(producer)).await.is_err(),
        "the producer opened the ledger"
    );
    violation(&mut events, "$JS.API.STREAM.INFO.KV_CI_CLAIMS").await;
    assert_eq!(l.entries().await.unwrap().len(), 2, "nothing changed");
}

/// The status API's mirror of the ledger, as ci-worker: the first read finds every live
/// entry, a later one only the writes since (an overwritten entry's new phase, a new task),
/// with no permission violation on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_the_status_mirror_reads_the_ledger_s_writes_as_ci_worker() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let (worker, mut events) = server.client_with_events("ci-worker").await;
    let l = Ledger::open(&jetstream::new(worker)).await.unwrap();
    let step = |task, backend, phase| Entry::step(TaskId::new(task), 1, backend, phase);
    l.record(step(41, pod::KIND, Phase::Started)).await.unwrap();
    l.record(step(42, vm::KIND, Phase::Queued)).await.unwrap();
    let mirror = Mirror::new(l.clone());
    let phases = |m: &std::collections::BTreeMap<TaskId, Entry>| {
        m.iter()
            .map(|(t, e)| (t.get(), e.phase))
            .collect::<Vec<_>>()
    };
    let seen = mirror.of([41, 42, 43].map(TaskId::new)).await;
    assert_eq!(phases(&seen), [(41, Phase::Started), (42, Phase::Queued)]);
    l.record(step(42, vm::KIND, Phase::Fetched)).await.unwrap();
    l.record(step(43, pod::KIND, Phase::Claimed)).await.unwrap();
    let seen = mirror.of([41, 42, 43].map(TaskId::new)).await;
    assert_eq!(
        phases(&seen),
        [
            (41, Phase::Started),
            (42, Phase::Fetched),
            (43, Phase::Claimed)
        ]
    );
    while let Ok(e) = events.try_recv() {
        assert!(!e.to_lowercase().contains("permissions violation"), "{e}");
    }
}

async fn admin_stream_config_of(server: &NatsServer, name: &str) -> jetstream::stream::Config {
    let js = jetstream::new(server.client("ci-admin").await);
    let mut s = js.get_stream(name).await.unwrap();
    s.info().await.unwrap().config.clone()
}

async fn admin_stream_config(server: &NatsServer) -> jetstream::stream::Config {
    admin_stream_config_of(server, STREAM).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_status_shows_pending_and_in_flight_per_consumer() {
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let key = SealingKey::generate();
    let producer = Producer::new(server.client("ci-producer").await);
    for i in 0..3 {
        producer
            .publish(&assignment(&key, &format!("s{i}"), pod::KIND, b"x"))
            .await
            .unwrap();
    }
    let out = queue_cmd(&server, "status", "ci-worker", &["-o", "json"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["consumers"][0]["consumer"], "pod");
    assert_eq!(v["consumers"][0]["pending"], 3);
    assert_eq!(v["consumers"][0]["in_flight"], 0);
    assert_eq!(v["consumers"][0]["capacity"], 4);
    assert_eq!(v["consumers"][1]["consumer"], "vm");
    assert_eq!(v["consumers"][1]["pending"], 0);
    assert_eq!(v["consumers"][1]["capacity"], 1);
    let text = queue_cmd(&server, "status", "ci-admin", &[]);
    assert_exit(&text, 0);
    assert!(stdout(&text).contains("pod"));
}

#[test]
fn queue_unreachable_nats_exits_3_naming_the_url_and_bad_input_exits_2() {
    let dir = util::scratch();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "x").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let base = |sub: &str, pwfile: &std::path::Path| {
        vec![
            "queue".to_string(),
            sub.to_string(),
            "--nats".into(),
            url.clone(),
            "--user".into(),
            "ci-admin".into(),
            "--password-file".into(),
            pwfile.display().to_string(),
        ]
    };
    let out = util::run_args(base("status", &pw));
    assert_exit(&out, 3);
    assert!(stderr(&out).contains(&url), "{}", stderr(&out));

    let mut zero = base("init", &pw);
    zero.extend(["--pod-capacity".into(), "0".into()]);
    assert_exit(&util::run_args(zero), 2);
    let mut bad_wait = base("init", &pw);
    bad_wait.extend(["--ack-wait".into(), "soon".into()]);
    assert_exit(&util::run_args(bad_wait), 2);
    assert_exit(
        &util::run_args(base("status", &dir.path().join("missing"))),
        2,
    );
}

/// The task history as the dispatcher writes it (issue 53): two writers as ci-worker (the
/// leader and a facade on another replica) mark the same tasks at once, each its own marks;
/// every record ends with every mark (a lost compare-and-set is read again and merged), and
/// the status's reader sees each task once. ci-producer may neither read nor write it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_the_task_history_keeps_every_mark_of_two_writers() {
    use tenantci_dispatch::task::history::store::{History, Seen};
    use tenantci_dispatch::task::history::{Decoded, Mark, Observation};
    let server = NatsServer::start();
    init_topology(&server, &[]);
    let open = || async {
        let (client, events) = server.client_with_events("ci-worker").await;
        (
            History::open(&jetstream::new(client), None).await.unwrap(),
            events,
        )
    };
    let ((leader, mut leader_events), (facade, mut facade_events)) = (open().await, open().await);
    let now = chrono::Utc::now();
    let marks = |of: &[Mark]| of.iter().map(|m| (*m, now)).collect::<Vec<_>>();
    let mine = marks(&[
        Mark::Claimed,
        Mark::Queued,
        Mark::ExecutorCreated,
        Mark::Gone,
    ]);
    let theirs = marks(&[Mark::Fetched, Mark::Reported]);
    let mut writes = Vec::new();
    for task in 1..=20 {
        let task = TaskId::new(task);
        for (writer, marks) in [(&leader, &mine), (&facade, &theirs)] {
            for &(mark, at) in marks.iter() {
                let writer = writer.clone();
                writes.push(tokio::spawn(async move {
                    writer.record(task, &Observation::mark(mark, at)).await
                }));
            }
        }
    }
    for w in writes {
        w.await.unwrap().unwrap();
    }
    let mut seen = Seen::default();
    seen.catch_up(&leader, 100).await;
    let records: Vec<&Decoded> = seen.records().collect();
    assert_eq!(records.len(), 20, "each task once");
    for d in records {
        let Decoded::Record(r) = d else {
            panic!("{d:?}")
        };
        assert_eq!(r.marks.len(), 6, "every mark of both writers: {r:?}");
        assert!(r.finished());
    }
    for events in [&mut leader_events, &mut facade_events] {
        while let Ok(e) = events.try_recv() {
            assert!(!e.to_lowercase().contains("permissions violation"), "{e}");
        }
    }
    // ci-producer may not touch it.
    let (producer, mut events) = server.client_with_events("ci-producer").await;
    producer
        .publish("$KV.CI_HISTORY.task.1", "{}".into())
        .await
        .unwrap();
    violation(&mut events, "$KV.CI_HISTORY.task.1").await;
    assert!(
        History::open(&jetstream::new(producer), None)
            .await
            .is_err(),
        "the producer opened the history"
    );
}
