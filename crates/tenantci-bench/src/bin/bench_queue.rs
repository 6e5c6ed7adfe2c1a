//! Queue benchmark: assignments/s and publish-to-delivery latency through the capped consumer
//! (sealed assignments, Producer with Msg-Id + PubAck, CappedConsumer with confirmed acks)
//! against raw async-nats JetStream (publish + PubAck, `messages()` pull with default batch,
//! plain ack), side by side in one run on one loopback nats-server with the generated config.
//!
//! Run: `cargo run --release -p tenantci-bench --bin bench_queue [-- N]` (scripts/bench-queue.sh);
//! prints a Markdown table. `BENCH_PLAIN_ACK=1` measures the consumer with plain (unconfirmed)
//! acks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt as _;
use tenantci_dispatch::backend::{pod, vm};
use tenantci_dispatch::queue::STREAM;
use tenantci_dispatch::queue::assignment::{Assignment, SealingKey};
use tenantci_dispatch::queue::consumer::{CappedConsumer, ConsumerSettings, Job, Outcome};
use tenantci_dispatch::queue::producer::Producer;
use tenantci_dispatch::queue::topology::{self, TopologySpec};
use tenantci_testkit::nats::NatsServer;

const PUBLISHERS: usize = 16;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

type Sent = Arc<Mutex<HashMap<String, Instant>>>;

struct Result_ {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// Capped path: `n` assignments published by PUBLISHERS tasks and consumed concurrently.
async fn capped(s: &NatsServer, capacity: usize, n: usize, key: &SealingKey) -> Result_ {
    let producer = Producer::new(s.client("ci-producer").await);
    let consumer = Arc::new(
        CappedConsumer::bind(
            s.client("ci-worker").await,
            pod::KIND,
            capacity,
            ConsumerSettings {
                confirm_acks: std::env::var_os("BENCH_PLAIN_ACK").is_none(),
                ..ConsumerSettings::default()
            },
        )
        .await
        .unwrap(),
    );
    let sent: Sent = Arc::default();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let handler = {
        let sent = sent.clone();
        move |job: Job| {
            let sent = sent.clone();
            let done_tx = done_tx.clone();
            async move {
                let t = sent.lock().unwrap().get(&job.assignment.task_id).copied();
                if let Some(t) = t {
                    let _ = done_tx.send(t.elapsed());
                }
                Outcome::Started
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = {
        let c = consumer.clone();
        tokio::spawn(async move {
            c.run(handler, async {
                let _ = stop_rx.await;
            })
            .await
        })
    };
    let mut lat = unloaded_latency(key, capacity, &sent, &producer, &mut done_rx).await;
    let elapsed = throughput(key, capacity, n, &sent, &producer, &mut done_rx).await;
    let _ = stop_tx.send(());
    runner.await.unwrap();
    lat.sort();
    Result_ {
        per_sec: n as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    }
}

/// Capped step 1: unloaded latency, 200 assignments published one at a time.
async fn unloaded_latency(
    key: &SealingKey,
    capacity: usize,
    sent: &Sent,
    producer: &Producer,
    done_rx: &mut tokio::sync::mpsc::UnboundedReceiver<Duration>,
) -> Vec<Duration> {
    // Latency, unloaded: one at a time.
    let mut lat = Vec::new();
    for i in 0..200 {
        let a = Assignment::seal(
            key,
            &format!("l{capacity}-{i}"),
            1,
            pod::KIND,
            vec![],
            b"{}",
        )
        .unwrap();
        sent.lock()
            .unwrap()
            .insert(a.task_id.clone(), Instant::now());
        producer.publish(&a).await.unwrap();
        lat.push(done_rx.recv().await.unwrap());
    }
    lat
}

/// Capped step 2: throughput, `n` assignments from PUBLISHERS tasks; the time to deliver them.
async fn throughput(
    key: &SealingKey,
    capacity: usize,
    n: usize,
    sent: &Sent,
    producer: &Producer,
    done_rx: &mut tokio::sync::mpsc::UnboundedReceiver<Duration>,
) -> Duration {
    // Throughput.
    let start = Instant::now();
    let mut pubs = Vec::new();
    for w in 0..PUBLISHERS {
        let producer = producer.clone();
        let sent = sent.clone();
        let key = key.clone();
        pubs.push(tokio::spawn(async move {
            for i in (w..n).step_by(PUBLISHERS) {
                let a = Assignment::seal(
                    &key,
                    &format!("t{capacity}-{i}"),
                    1,
                    pod::KIND,
                    vec![],
                    br#"{"token":"x"}"#,
                )
                .unwrap();
                sent.lock()
                    .unwrap()
                    .insert(a.task_id.clone(), Instant::now());
                producer.publish(&a).await.unwrap();
            }
        }));
    }
    for _ in 0..n {
        done_rx.recv().await.unwrap();
    }
    let elapsed = start.elapsed();
    for p in pubs {
        p.await.unwrap();
    }
    elapsed
}

/// Raw path (on subject `ci.runner.vm`, consumer `vm`, same cap): plain bodies, `js.publish().await.await`, `messages()` with its default batch, ack.
async fn raw(s: &NatsServer, n: usize) -> Result_ {
    let pjs = jetstream::new(s.client("ci-producer").await);
    let wjs = jetstream::new(s.client("ci-worker").await);
    let consumer: PullConsumer = wjs.get_consumer_from_stream("vm", STREAM).await.unwrap();
    let sent: Sent = Arc::default();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let reader = {
        let sent = sent.clone();
        tokio::spawn(async move {
            let mut messages = consumer.messages().await.unwrap();
            while let Some(Ok(m)) = messages.next().await {
                let id = String::from_utf8_lossy(&m.payload).into_owned();
                m.ack().await.unwrap();
                let t = sent.lock().unwrap().get(&id).copied();
                if let Some(t) = t
                    && done_tx.send(t.elapsed()).is_err()
                {
                    break;
                }
            }
        })
    };
    let mut lat = Vec::new();
    for i in 0..200 {
        let id = format!("rl-{i}");
        sent.lock().unwrap().insert(id.clone(), Instant::now());
        pjs.publish("ci.runner.vm", id.into())
            .await
            .unwrap()
            .await
            .unwrap();
        lat.push(done_rx.recv().await.unwrap());
    }
    let start = Instant::now();
    let mut pubs = Vec::new();
    for w in 0..PUBLISHERS {
        let pjs = pjs.clone();
        let sent = sent.clone();
        pubs.push(tokio::spawn(async move {
            for i in (w..n).step_by(PUBLISHERS) {
                let id = format!("rt-{i}");
                sent.lock().unwrap().insert(id.clone(), Instant::now());
                pjs.publish("ci.runner.vm", id.into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        }));
    }
    for _ in 0..n {
        done_rx.recv().await.unwrap();
    }
    let elapsed = start.elapsed();
    for p in pubs {
        p.await.unwrap();
    }
    drop(done_rx);
    reader.abort();
    lat.sort();
    Result_ {
        per_sec: n as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    tenantci_core::tls::ensure_crypto_provider();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let server = NatsServer::start();
    let key = SealingKey::generate();
    println!("| capacity | path | assignments/s | p50 ms | p99 ms | throughput ratio |");
    println!("|---:|---|---:|---:|---:|---:|");
    for capacity in [4usize, 64] {
        let admin = jetstream::new(server.client("ci-admin").await);
        let spec = TopologySpec {
            // The raw path runs on `vm`, so the two never share pull requests.
            capacities: vec![(pod::KIND, capacity as u32), (vm::KIND, capacity as u32)],
            ..TopologySpec::default()
        };
        topology::apply(&admin, &spec).await.unwrap();
        let r = raw(&server, n).await;
        let c = capped(&server, capacity, n, &key).await;
        println!(
            "| {capacity} | raw async-nats (publish+ack, messages(), ack) | {:.0} | {} | {} | 1.00 |",
            r.per_sec,
            ms(r.p50),
            ms(r.p99)
        );
        println!(
            "| {capacity} | tenantci capped consumer (sealed, Msg-Id, {} ack) | {:.0} | {} | {} | {:.2} |",
            if std::env::var_os("BENCH_PLAIN_ACK").is_some() {
                "plain"
            } else {
                "confirmed"
            },
            c.per_sec,
            ms(c.p50),
            ms(c.p99),
            c.per_sec / r.per_sec
        );
    }
}
