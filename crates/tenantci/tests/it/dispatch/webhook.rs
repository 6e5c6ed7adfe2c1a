//! The `workflow_job` webhook as the scheduler's nudge (issue 16): deliveries from the Gitea
//! double (signed as Gitea signs them) to `dispatch run`'s receiver, a real nats-server, and
//! the executor played through the facade.

use std::time::Duration;

use serde_json::{Value, json};
use tenantci_dispatch::claim::webhook::WebhookSecret;
use tenantci_testkit::wait::eventually;

use super::harness::{Dispatcher, WEBHOOK_SECRET, World};

const NUDGES: &str = "tenantci_dispatch_webhook_deliveries_total{outcome=\"nudge\"}";

fn outcome(name: &str) -> String {
    format!("tenantci_dispatch_webhook_deliveries_total{{outcome=\"{name}\"}}")
}

fn micros(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_micros()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_nudges_claim_twenty_jobs_and_an_idle_dispatcher_polls_rarely() {
    let mut w = World::start(2).await;
    // The default safety-net interval: what an operator gets from `dispatch init`.
    w.with_webhook(Duration::from_secs(5));
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    w.register_hook(&d).await;
    let mut pickups_ms = Vec::new();
    for i in 0..20u64 {
        // Idle pauses of 0.2-0.5 s between jobs (spread evenly, no randomness in a test): the
        // dispatcher idles between them, as it does between pushes. Each job is claimed
        // before the next is created, so every claim must come from its own nudge (the
        // safety-net poll is 5 s away); longer pauses only made the suite wait (they were
        // 1-4 s, 50 s of its 73).
        tokio::time::sleep(Duration::from_millis(200 + (i * 157) % 300)).await;
        let job = w.enqueue(&format!("job-{i}"), "s").await;
        let task = w.claimed(job).await;
        let (j, t) = (w.job(job).await, w.task(task).await);
        pickups_ms.push((micros(&t["started_at"]) - micros(&j["created_at"])) as f64 / 1000.0);
        w.executor(task).await.run(task).await;
    }
    let mut sorted = pickups_ms.clone();
    sorted.sort_by(f64::total_cmp);
    eprintln!(
        "job created -> claimed (ms), webhook path: p50 {:.1}, max {:.1}; all: {pickups_ms:?}",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    // Every job was announced by a signed delivery the receiver accepted and acted on
    // (queued), and its claim by one it accepted and ignored (in_progress).
    let deliveries = eventually("40 deliveries", || async {
        let all = w.deliveries().await;
        (all.len() == 40).then_some(all)
    })
    .await;
    let queued = deliveries
        .iter()
        .filter(|d| d["action"] == "queued")
        .count();
    assert_eq!(queued, 20, "{deliveries:?}");
    assert!(
        deliveries.iter().all(|d| d["status"] == 204),
        "{deliveries:?}"
    );
    assert_eq!(d.metric(NUDGES).await, Some(20.0));
    assert_eq!(d.metric(&outcome("ignored")).await, Some(20.0));
    w.all_cleaned_up().await;
    // Idle: at most 0.5 FetchTask/s (the window is the measurement, not a synchronisation).
    let before = w.fetch_calls().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_calls = w.fetch_calls().await - before;
    eprintln!("FetchTask calls in 10 idle seconds with the webhook: {idle_calls}");
    assert!(idle_calls <= 5, "{idle_calls} FetchTask calls in 10 idle s");
}

/// Dispatcher d1 leading, once its term's first FetchTask is done; the FetchTask calls then.
async fn leader_after_its_first_fetch(w: &World) -> (Dispatcher, u64) {
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    eventually("the term's first FetchTask", || async {
        (w.fetch_calls().await >= 1).then_some(())
    })
    .await;
    (d, w.fetch_calls().await)
}

/// A `workflow_job` / `queued` delivery's body for a pod job.
fn queued_pod_job() -> Vec<u8> {
    json!({"action": "queued", "workflow_job": {"id": 1, "labels": ["pod"]}})
        .to_string()
        .into_bytes()
}

/// Posts a delivery to `d`'s receiver; returns the status.
async fn post(d: &Dispatcher, body: &[u8], signature: Option<&str>, event: &str) -> u16 {
    let mut req = reqwest::Client::new()
        .post(format!("http://{}/webhooks/gitea", d.webhook.unwrap()))
        .header("x-gitea-event", event)
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(s) = signature {
        req = req.header("x-gitea-signature", s);
    }
    req.send().await.unwrap().status().as_u16()
}

/// Posts a delivery with its `X-Gitea-Delivery` id, signed right, on `client`; the status.
async fn post_as(client: &reqwest::Client, d: &Dispatcher, body: &[u8], id: &str) -> u16 {
    client
        .post(format!("http://{}/webhooks/gitea", d.webhook.unwrap()))
        .header("x-gitea-event", "workflow_job")
        .header("x-gitea-delivery", id)
        .header(
            "x-gitea-signature",
            WebhookSecret::new(WEBHOOK_SECRET).sign(body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Like [`post`], for a body the receiver refuses from its Content-Length: it answers 413 and
/// closes the connection without reading the body, so the client may see the close (a broken
/// pipe while it still writes) before the answer. Either way the delivery was refused.
async fn post_oversized(d: &Dispatcher, body: &[u8], signature: &str) -> Option<u16> {
    reqwest::Client::new()
        .post(format!("http://{}/webhooks/gitea", d.webhook.unwrap()))
        .header("x-gitea-event", "workflow_job")
        .header("x-gitea-signature", signature)
        .body(body.to_vec())
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_deliveries_are_refused_counted_and_trigger_no_fetch_task() {
    let mut w = World::start(1).await;
    // A safety-net poll that never comes during the test: every FetchTask after the first
    // is a delivery's doing.
    w.with_webhook(Duration::from_secs(3600));
    let (d, calls) = leader_after_its_first_fetch(&w).await;
    let secret = WebhookSecret::new(WEBHOOK_SECRET);
    let queued = queued_pod_job();
    let wrong = WebhookSecret::new("not-the-secret").sign(&queued);
    assert_eq!(post(&d, &queued, Some(&wrong), "workflow_job").await, 401);
    assert_eq!(post(&d, &queued, None, "workflow_job").await, 401);
    let big = vec![b' '; 2 << 20];
    let answer = post_oversized(&d, &big, &secret.sign(&big)).await;
    assert!(matches!(answer, None | Some(413)), "{answer:?}");
    let junk = b"{\"action\": \"queued\", \"workflow_job\": ";
    assert_eq!(
        post(&d, junk, Some(&secret.sign(junk)), "workflow_job").await,
        400
    );
    // Signed and well-formed, but not for us: accepted, ignored.
    let gpu = json!({"action": "queued", "workflow_job": {"id": 2, "labels": ["gpu"]}})
        .to_string()
        .into_bytes();
    assert_eq!(
        post(&d, &gpu, Some(&secret.sign(&gpu)), "workflow_job").await,
        204
    );
    assert_eq!(
        post(&d, b"{}", Some(&secret.sign(b"{}")), "push").await,
        204
    );
    for (name, n) in [
        ("bad_signature", 1.0),
        ("unsigned", 1.0),
        ("too_large", 1.0),
        ("malformed", 1.0),
        ("ignored", 2.0),
    ] {
        assert_eq!(d.metric(&outcome(name)).await, Some(n), "{name}");
    }
    assert_eq!(d.metric(NUDGES).await, None, "no nudge yet");
    assert_eq!(w.fetch_calls().await, calls, "no FetchTask from them");
    // Positive control: the same body, signed right, makes the leader FetchTask.
    assert_eq!(
        post(&d, &queued, Some(&secret.sign(&queued)), "workflow_job").await,
        204
    );
    eventually("a nudged FetchTask", || async {
        (w.fetch_calls().await > calls).then_some(())
    })
    .await;
    assert_eq!(d.metric(NUDGES).await, Some(1.0));
    let log = d.log_text();
    assert!(log.contains("webhook nudges"), "the start-up rate line");
    assert!(!log.contains(WEBHOOK_SECRET), "the secret is never logged");
}

/// Issue 45: 100 clients that each send half a delivery's headers and then nothing. A signed
/// delivery is still served meanwhile, and every stalled connection is closed by the receiver
/// (the client reads EOF or a reset) once `webhook.header_read_timeout` has passed; before,
/// the receiver held all of them open for as long as the clients liked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_sent_headers_are_closed_by_the_receiver_and_deliveries_are_still_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut w = World::start(1).await;
    w.with_webhook(Duration::from_secs(3600));
    // Short, so the test need not wait the default 20 s.
    w.base_mut().webhook.as_mut().unwrap().header_read_timeout = Duration::from_secs(1).into();
    let (d, _) = leader_after_its_first_fetch(&w).await;
    let addr = d.webhook.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..100 {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(
            b"POST /webhooks/gitea HTTP/1.1\r\nhost: gitea\r\nx-gitea-event: workflow_job\r\n",
        )
        .await
        .unwrap();
        stalled.push(tcp);
    }
    let queued = queued_pod_job();
    let signature = WebhookSecret::new(WEBHOOK_SECRET).sign(&queued);
    assert_eq!(
        post(&d, &queued, Some(&signature), "workflow_job").await,
        204
    );
    assert_eq!(d.metric(NUDGES).await, Some(1.0));
    for (i, mut tcp) in stalled.into_iter().enumerate() {
        let mut rest = Vec::new();
        // A deadlock guard, not a measurement: without the timeout this never ends.
        let read = tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut rest));
        assert!(
            read.await.is_ok(),
            "stalled connection {i} is still open at the receiver"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_receiver_unreachable_the_idle_poll_still_claims_the_job() {
    let mut w = World::start(1).await;
    w.with_webhook(Duration::from_secs(1));
    let d = w.dispatcher("d1").await;
    d.wait_leader(true).await;
    // Gitea's deliveries go to an address where nothing listens (a receiver down, a
    // firewall): every one is lost.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    w.gitea
        .add_hook(
            &reqwest::Client::new(),
            &format!("http://{closed}/webhooks/gitea"),
            WEBHOOK_SECRET,
        )
        .await;
    let job = w.enqueue("lost-delivery", "s").await;
    let task = w.claimed(job).await;
    let lost = eventually("the delivery attempt to be recorded", || async {
        let d = w.deliveries().await;
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert!(
        lost[0]["status"].is_null() && lost[0]["error"].is_string(),
        "{lost:?}"
    );
    assert_eq!(d.metric(NUDGES).await, None, "claimed by the poll alone");
    w.executor(task).await.run(task).await;
    assert_eq!(w.task(task).await["result"], "RESULT_SUCCESS");
    w.all_cleaned_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_accepts_deliveries_but_only_the_leader_acts() {
    let mut w = World::start(1).await;
    w.with_webhook(Duration::from_secs(3600));
    let leader = w.dispatcher("d1").await;
    leader.wait_leader(true).await;
    let standby = w.dispatcher("d2").await;
    standby.wait_up().await;
    standby.wait_leader(false).await;
    eventually("the leader's first FetchTask", || async {
        (w.fetch_calls().await >= 1).then_some(())
    })
    .await;
    let calls = w.fetch_calls().await;
    let secret = WebhookSecret::new(WEBHOOK_SECRET);
    let queued = json!({"action": "queued", "workflow_job": {"id": 1, "labels": ["pod"]}})
        .to_string()
        .into_bytes();
    let sig = secret.sign(&queued);
    assert_eq!(
        post(&standby, &queued, Some(&sig), "workflow_job").await,
        204
    );
    assert_eq!(standby.metric(&outcome("standby")).await, Some(1.0));
    assert_eq!(w.fetch_calls().await, calls, "the standby forwards nothing");
    // Positive control: the same delivery at the leader makes it FetchTask.
    assert_eq!(
        post(&leader, &queued, Some(&sig), "workflow_job").await,
        204
    );
    eventually("the leader's nudged FetchTask", || async {
        (w.fetch_calls().await > calls).then_some(())
    })
    .await;
}

/// Issue 35: 2000 signed deliveries, each with its own id, as fast as the receiver takes them
/// (16 at a time). The FetchTasks they cause, counted at the Gitea double, stay within the
/// nudge budget over the flood's own duration (burst + duration / spacing, and one for a
/// FetchTask under way when it began), far below one per delivery; the budget was used.
/// Then a delivery sent again with the same id is refused (409) and counted as replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_deliveries_is_coalesced_into_the_nudge_budget_and_a_replay_is_refused() {
    use futures::StreamExt as _;
    use tenantci_dispatch::claim::nudge::NudgeBudget;
    let mut w = World::start(1).await;
    // No safety-net poll during the test: every FetchTask after the first is a nudge's.
    w.with_webhook(Duration::from_secs(3600));
    let budget = NudgeBudget {
        spacing: Duration::from_millis(500),
        burst: 3,
    };
    let hook = w.base_mut().webhook.as_mut().unwrap();
    hook.nudge_spacing = budget.spacing.into();
    hook.nudge_burst = budget.burst;
    let (d, before) = leader_after_its_first_fetch(&w).await;
    let queued = queued_pod_job();
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = futures::stream::iter(0..2000)
        .map(|i| {
            let (client, d, body) = (&client, &d, &queued);
            async move { post_as(client, d, body, &format!("flood-{i}")).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let flood = started.elapsed();
    let during = w.fetch_calls().await - before;
    assert!(
        statuses.iter().all(|s| *s == 204),
        "every delivery accepted"
    );
    let bound = budget.most_in(flood) + 1;
    eprintln!(
        "2000 deliveries in {flood:?}: {during} FetchTask calls (bound from the budget: {bound})"
    );
    assert!(during >= 1, "the deliveries nudged");
    assert!(
        during <= bound,
        "{during} FetchTask calls for 2000 deliveries in {flood:?}; the budget allows {bound}"
    );
    assert_eq!(d.metric(NUDGES).await, Some(2000.0));
    assert!(
        d.metric("tenantci_dispatch_webhook_nudges_paced_total")
            .await
            .is_some_and(|n| n >= 1.0),
        "the flood waited for the budget"
    );

    assert_eq!(post_as(&client, &d, &queued, "once").await, 204);
    assert_eq!(
        post_as(&client, &d, &queued, "once").await,
        409,
        "the same delivery id again"
    );
    assert_eq!(post_as(&client, &d, &queued, "flood-7").await, 409);
    assert_eq!(d.metric(&outcome("replayed")).await, Some(2.0));
    assert_eq!(
        d.metric(NUDGES).await,
        Some(2001.0),
        "a replay nudges nothing"
    );
}
