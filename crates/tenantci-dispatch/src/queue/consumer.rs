//! The capped consumer (as `ci-worker`): pulls an assignment only when a backend admission slot
//! is free, so the worker never holds more assignments than it can start.
//!
//! Each free slot becomes one pull request for exactly one message (never a prefetch batch:
//! async-nats' `messages()` would hoard 200), sent by one of at most [`MAX_LANES`] lanes. An
//! assignment's slot stays taken while the handler runs and, if the handler keeps it
//! ([`Job::hold_slot`]), for the workload's lifetime.
//! Outcomes: [`Outcome::Started`] acks (after the workload exists, confirmed by the server);
//! [`Outcome::Retry`] NAKs with exponential backoff and [`Outcome::Wait`] after the base delay
//! (either is TERMed once `max_deliver` is spent); [`Outcome::Poison`], undecodable messages
//! and another backend's assignments are TERMed with a log line. While the handler runs,
//! progress acks (`+WPI`) keep the delivery from timing out.
//!
//! The server's `max_ack_pending` (= capacity, see `topology`) is the second, independent cap.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::StreamExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::STREAM;
use super::assignment::{Assignment, AssignmentError};
use crate::backend_kind::BackendKind;

/// Tunables of a [`CappedConsumer`]; the defaults suit production.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// How long one pull request waits for a message before it is renewed. Kept short: a
    /// worker that exits leaves its waiting pulls at the server until they expire, and a message
    /// the server hands to such a pull is only redelivered after ack_wait.
    pub pull_expires: Duration,
    /// Interval of progress acks while a handler runs (default: a third of ack_wait).
    pub progress_every: Option<Duration>,
    /// First NAK delay; doubles per delivery up to `nak_max`.
    pub nak_base: Duration,
    /// Longest NAK delay: the backoff stops doubling there.
    pub nak_max: Duration,
    /// Wait for the server to confirm each ack (double ack): the assignment is known removed.
    pub confirm_acks: bool,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            pull_expires: Duration::from_secs(5),
            progress_every: None,
            nak_base: Duration::from_secs(1),
            nak_max: Duration::from_secs(60),
            confirm_acks: true,
        }
    }
}

/// Most lanes (concurrent pull-and-start loops) of one consumer. A lane holds one waiting
/// pull at the server, renewed every `pull_expires`, so lanes cost the server work even when
/// idle; they bound concurrent *starts*, while slots (held for a workload's lifetime) bound
/// running workloads. Capacity 1000 once meant 2000 idle pulls and nats-server at 92% of a
/// core doing nothing useful (docs/benchmarks/dispatch.md).
pub const MAX_LANES: usize = 32;

/// Lanes for `capacity` slots: two per slot (one pulling while another starts), at most
/// [`MAX_LANES`].
pub fn lanes_for(capacity: usize) -> usize {
    capacity.saturating_mul(2).clamp(1, MAX_LANES)
}

/// The NAK delay after the `delivered`-th delivery failed transiently.
pub fn nak_delay(settings: &ConsumerSettings, delivered: i64) -> Duration {
    let exp = delivered.clamp(1, 32) as u32 - 1;
    settings
        .nak_base
        .saturating_mul(2u32.saturating_pow(exp))
        .min(settings.nak_max)
}

/// The answer to the server for a handler's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settle {
    Ack,
    /// Redeliver after a backoff.
    Nak(String),
    /// Redeliver after the base delay, without backoff: waiting is not failing.
    Wait(String),
    /// Never redeliver.
    Term(String),
}

/// Why a delivery's assignment is not read.
enum Unread {
    /// It can never be started: TERM.
    Poison(String),
    /// A newer release wrote it: NAK, for that release (left whole, reported once).
    Newer(tenantci_core::record_version::Newer),
}

/// A transient failure on the last delivery the server allows (`max_deliver`, 0 or less:
/// unlimited) is final: TERM it rather than NAK a redelivery that will not come.
fn settle(outcome: Outcome, delivered: i64, max_deliver: i64) -> Settle {
    match outcome {
        Outcome::Started => Settle::Ack,
        Outcome::Retry(reason) if max_deliver > 0 && delivered >= max_deliver => Settle::Term(
            format!("transient failure on the last of {max_deliver} deliveries: {reason}"),
        ),
        Outcome::Retry(reason) => Settle::Nak(reason),
        Outcome::Wait(reason) if max_deliver > 0 && delivered >= max_deliver => Settle::Term(
            format!("still waiting on the last of {max_deliver} deliveries: {reason}"),
        ),
        Outcome::Wait(reason) => Settle::Wait(reason),
        Outcome::Poison(reason) => Settle::Term(reason),
    }
}

/// What the handler made of an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The workload exists: ack (the assignment leaves the queue).
    Started,
    /// A transient failure: NAK, redeliver after a backoff.
    Retry(String),
    /// Not now (its resource class is full): NAK, redeliver after the base delay.
    Wait(String),
    /// The assignment can never succeed: TERM (not redelivered) and log why.
    Poison(String),
}

/// What the consumer observed; read with [`CappedConsumer::stats`].
#[derive(Debug, Default)]
struct Counters {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    max_pull_batch: AtomicUsize,
    pulls: AtomicU64,
    delivered: AtomicU64,
    acked: AtomicU64,
    naked: AtomicU64,
    termed: AtomicU64,
}

/// What a consumer did since it was bound ([`CappedConsumer::stats`]); for tests and
/// benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Assignments received and not yet finished (slot still taken).
    pub in_flight: usize,
    /// The most that were ever in flight at once.
    pub max_in_flight: usize,
    /// The largest pull request sent (always 1).
    pub max_pull_batch: usize,
    /// Pull requests sent.
    pub pulls: u64,
    /// Deliveries received, redeliveries included.
    pub delivered: u64,
    /// Acks sent (and, with `confirm_acks`, confirmed): workloads started.
    pub acked: u64,
    /// NAKs sent: deliveries to be redelivered ([`Outcome::Retry`], [`Outcome::Wait`]).
    pub naked: u64,
    /// TERMs sent: poison, undecodable or another backend's assignments, and transient failures
    /// on the last delivery.
    pub termed: u64,
}

/// A taken admission slot; the slot is free again when every clone is dropped.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<SlotInner>);

struct SlotInner {
    _permit: OwnedSemaphorePermit,
    counters: Arc<Counters>,
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        self.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slot {
    /// A slot of `permit`'s own semaphore, counted by no consumer: freed when its last clone
    /// is dropped, as a consumer's is. For admission outside a consumer (the testkit's fakes
    /// of the layers above).
    pub fn of_permit(permit: OwnedSemaphorePermit) -> Slot {
        take_slot(&Arc::new(Counters::default()), permit)
    }
}

/// Counts a slot taken with `permit` as in flight until every clone of it is dropped.
fn take_slot(counters: &Arc<Counters>, permit: OwnedSemaphorePermit) -> Slot {
    let n = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_in_flight.fetch_max(n, Ordering::SeqCst);
    Slot(Arc::new(SlotInner {
        _permit: permit,
        counters: counters.clone(),
    }))
}

/// One delivered assignment, handed to the handler.
pub struct Job {
    /// The assignment, decoded and checked but still sealed.
    pub assignment: Assignment,
    /// How many times the server has delivered it (1 = first delivery).
    pub delivered: i64,
    /// Its sequence in the stream; 0 when the delivery's metadata could not be read, or outside
    /// a consumer.
    pub stream_sequence: u64,
    /// The server delivers no more after this one (a finite `max_deliver` reached): a
    /// transient failure now is final.
    pub last_delivery: bool,
    slot: Slot,
}

impl Job {
    /// A delivery made outside a consumer (the worker's unit tests), holding `slot`.
    pub fn outside_a_consumer(
        assignment: Assignment,
        delivered: i64,
        last_delivery: bool,
        slot: Slot,
    ) -> Job {
        Job {
            assignment,
            delivered,
            stream_sequence: 0,
            last_delivery,
            slot,
        }
    }

    /// Keeps the admission slot taken after the handler returns, until the returned `Slot`
    /// (e.g. stored with the running workload) is dropped.
    pub fn hold_slot(&self) -> Slot {
        self.slot.clone()
    }
}

/// Errors binding to a consumer.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A capacity of 0.
    #[error("the capacity must be at least 1")]
    Capacity,
    /// The backend's durable consumer could not be looked up or read at the server.
    #[error("cannot look up the JetStream consumer `{consumer}` on stream {STREAM}: {source}")]
    Lookup {
        /// The consumer's name (the backend's).
        consumer: &'static str,
        /// What NATS answered.
        #[source]
        source: async_nats::Error,
    },
}

/// A pull consumer capped at `capacity` concurrent assignments.
pub struct CappedConsumer {
    js: jetstream::Context,
    consumer: PullConsumer,
    backend: BackendKind,
    capacity: usize,
    slots: Arc<Semaphore>,
    counters: Arc<Counters>,
    settings: ConsumerSettings,
    ack_wait: Duration,
    max_deliver: i64,
}

impl CappedConsumer {
    /// Binds to the durable consumer of `backend` (one CONSUMER.INFO request).
    pub async fn bind(
        client: async_nats::Client,
        backend: BackendKind,
        capacity: usize,
        settings: ConsumerSettings,
    ) -> Result<Self, BindError> {
        if capacity == 0 {
            return Err(BindError::Capacity);
        }
        let js = jetstream::new(client);
        let mut consumer: PullConsumer = js
            .get_consumer_from_stream(backend.consumer(), STREAM)
            .await
            .map_err(|e| BindError::Lookup {
                consumer: backend.consumer(),
                source: e.into(),
            })?;
        let info = consumer.info().await.map_err(|e| BindError::Lookup {
            consumer: backend.consumer(),
            source: e.into(),
        })?;
        let server_cap = usize::try_from(info.config.max_ack_pending).unwrap_or(usize::MAX);
        if server_cap < capacity {
            tracing::warn!(
                consumer = backend.consumer(),
                capacity,
                max_ack_pending = server_cap,
                "local capacity exceeds the consumer's max_ack_pending; the server caps in-flight assignments lower (run `tenantci queue init`)"
            );
        }
        let ack_wait = info.config.ack_wait;
        let max_deliver = info.config.max_deliver;
        Ok(CappedConsumer {
            js,
            consumer,
            backend,
            capacity,
            slots: Arc::new(Semaphore::new(capacity)),
            counters: Arc::new(Counters::default()),
            settings,
            ack_wait,
            max_deliver,
        })
    }

    /// The backend whose durable consumer this is.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Admission slots: the most assignments held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Free admission slots right now.
    pub fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Takes a slot for a workload that exists already (found at start, e.g. executor Pods
    /// of a previous dispatcher), so it counts against capacity until the Slot is dropped.
    /// None when every slot is taken.
    pub fn reserve_slot(&self) -> Option<Slot> {
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        Some(take_slot(&self.counters, permit))
    }

    /// Waits for a slot, queued in turn with the lanes (the semaphore is FIFO): for a
    /// workload to be started outside the worker, which must not run past capacity. An idle
    /// lane holds its slot while its pull waits, so [`Self::reserve_slot`] finds none then;
    /// this gets one within a pull's `expires` once the workloads leave one free. None only
    /// when the consumer is gone.
    pub fn acquire_slot(&self) -> impl Future<Output = Option<Slot>> + Send + 'static {
        let (slots, counters) = (self.slots.clone(), self.counters.clone());
        async move {
            let permit = slots.acquire_owned().await.ok()?;
            Some(take_slot(&counters, permit))
        }
    }

    /// The counters now.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            in_flight: c.in_flight.load(Ordering::SeqCst),
            max_in_flight: c.max_in_flight.load(Ordering::SeqCst),
            max_pull_batch: c.max_pull_batch.load(Ordering::SeqCst),
            pulls: c.pulls.load(Ordering::SeqCst),
            delivered: c.delivered.load(Ordering::SeqCst),
            acked: c.acked.load(Ordering::SeqCst),
            naked: c.naked.load(Ordering::SeqCst),
            termed: c.termed.load(Ordering::SeqCst),
        }
    }

    /// Pulls and handles assignments until `shutdown` resolves, then waits for running
    /// handlers (pulls still waiting are abandoned; they expire at the server).
    ///
    /// Two lanes per slot, at most [`MAX_LANES`] ([`lanes_for`]), each with one long-lived
    /// inbox subscription, compete for the `capacity` slots; a lane sends a pull for one
    /// message only while it holds a slot.
    pub async fn run<H, F>(&self, handler: H, shutdown: impl Future<Output = ()>)
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut lanes = tokio::task::JoinSet::new();
        for _ in 0..lanes_for(self.capacity) {
            let lane = Lane {
                js: self.js.clone(),
                consumer: self.consumer.clone(),
                backend: self.backend,
                counters: self.counters.clone(),
                settings: self.settings.clone(),
                progress_every: self
                    .settings
                    .progress_every
                    .unwrap_or(self.ack_wait / 3)
                    .max(Duration::from_millis(50)),
                max_deliver: self.max_deliver,
            };
            let (handler, stop, slots) = (handler.clone(), stop_rx.clone(), self.slots.clone());
            lanes.spawn(async move { lane.run(slots, handler, stop).await });
        }
        shutdown.await;
        let _ = stop_tx.send(true);
        while lanes.join_next().await.is_some() {}
    }
}

/// A worker of the consumer: takes a free slot, pulls one message, handles it, repeats.
struct Lane {
    js: jetstream::Context,
    consumer: PullConsumer,
    backend: BackendKind,
    counters: Arc<Counters>,
    settings: ConsumerSettings,
    progress_every: Duration,
    max_deliver: i64,
}

/// What one pull request brought.
enum Pulled {
    Message(Box<jetstream::Message>),
    Nothing,
}

impl Lane {
    async fn run<H, F>(
        self,
        slots: Arc<Semaphore>,
        handler: Arc<H>,
        mut stop: watch::Receiver<bool>,
    ) where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let client = self.js.client();
        // One subscription per lane: pull replies on `<inbox>.p`, ack confirmations on `<inbox>.a`.
        let base = client.new_inbox();
        let inbox = format!("{base}.p");
        let ack_inbox = format!("{base}.a");
        let mut sub = loop {
            match client.subscribe(format!("{base}.*")).await {
                Ok(s) => break s,
                Err(e) => {
                    tracing::warn!(consumer = self.backend.consumer(), error = %e, "cannot subscribe the pull inbox at NATS; retrying in 500 ms");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        };
        loop {
            let permit = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                p = slots.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let pulled = tokio::select! {
                r = self.pull_one(&mut sub, &inbox, &ack_inbox) => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            match pulled {
                Ok(Pulled::Message(m)) => {
                    self.handle(*m, permit, handler.as_ref(), &mut sub, &ack_inbox)
                        .await
                }
                Ok(Pulled::Nothing) => {}
                Err(e) => {
                    drop(permit);
                    tracing::warn!(consumer = self.backend.consumer(), error = %e, "the pull request to NATS failed; retrying in 500 ms");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        }
    }

    /// Sends a pull for exactly one message and waits for it, or for the server to end the
    /// request (408 expired / 409 terminated).
    async fn pull_one(
        &self,
        sub: &mut async_nats::Subscriber,
        inbox: &str,
        ack_inbox: &str,
    ) -> Result<Pulled, async_nats::Error> {
        self.counters.pulls.fetch_add(1, Ordering::SeqCst);
        self.counters.max_pull_batch.fetch_max(1, Ordering::SeqCst);
        let request = jetstream::consumer::pull::BatchConfig {
            batch: 1,
            expires: Some(self.settings.pull_expires),
            ..Default::default()
        };
        self.consumer
            .request_batch(request, inbox.to_string().into())
            .await?;
        // The server answers within `expires`; the guard only covers a lost 408.
        let guard = tokio::time::sleep(self.settings.pull_expires + Duration::from_secs(5));
        tokio::pin!(guard);
        loop {
            let next = tokio::select! {
                m = sub.next() => m,
                _ = &mut guard => return Ok(Pulled::Nothing),
            };
            let Some(message) = next else {
                return Err("the pull inbox subscription closed".into());
            };
            if message.subject.as_str() == ack_inbox {
                continue; // a late ack confirmation (deliveries carry their stream subject)
            }
            match message.status {
                None | Some(async_nats::StatusCode::OK) => {
                    return Ok(Pulled::Message(Box::new(jetstream::Message {
                        message,
                        context: self.js.clone(),
                    })));
                }
                Some(async_nats::StatusCode::IDLE_HEARTBEAT) => continue,
                // Refused, not ended: pulling again at once would spin (the lane backs off).
                Some(async_nats::StatusCode::REQUEST_TERMINATED)
                    if message
                        .description
                        .as_deref()
                        .is_some_and(|d| d.contains("MaxWaiting")) =>
                {
                    return Err("the server refused the pull: the consumer holds no more waiting pulls (max_waiting); another worker may hold them".into());
                }
                Some(async_nats::StatusCode::TIMEOUT)
                | Some(async_nats::StatusCode::NOT_FOUND)
                | Some(async_nats::StatusCode::REQUEST_TERMINATED) => return Ok(Pulled::Nothing),
                Some(other) => {
                    return Err(format!(
                        "the server answered the pull with status {other}: {}",
                        message.description.unwrap_or_default()
                    )
                    .into());
                }
            }
        }
    }

    /// Handles one delivery: admit it to its slot, run the handler with progress acks, then
    /// answer the server (ack, NAK or TERM).
    async fn handle<H, F>(
        &self,
        message: jetstream::Message,
        permit: OwnedSemaphorePermit,
        handler: &H,
        sub: &mut async_nats::Subscriber,
        ack_inbox: &str,
    ) where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        // Counted from here: the slot (permit) is the assignment's until every Slot is dropped.
        let slot = take_slot(&self.counters, permit);
        self.counters.delivered.fetch_add(1, Ordering::SeqCst);
        let (delivered, stream_sequence) = match message.info() {
            Ok(i) => (i.delivered, i.stream_sequence),
            Err(_) => (1, 0),
        };
        let assignment = match self.assignment_of(&message) {
            Ok(a) => a,
            // A newer release's (a rolling update overlaps them): handed back for it, whole.
            Err(Unread::Newer(newer)) => {
                crate::newer_records::report(&newer, &format!("queue message {stream_sequence}"));
                let why = newer.to_string();
                let at = format!("seq-{stream_sequence}");
                return self
                    .nak(&message, &at, delivered, self.settings.nak_base, &why)
                    .await;
            }
            Err(Unread::Poison(why)) => return self.term(&message, stream_sequence, &why).await,
        };
        let msg_id = assignment.msg_id();
        let job = Job {
            assignment,
            delivered,
            stream_sequence,
            last_delivery: self.max_deliver > 0 && delivered >= self.max_deliver,
            slot: slot.clone(),
        };
        let outcome = self
            .with_progress_acks(handler(job), &message, &msg_id)
            .await;
        // The slot is free for the next pull as soon as the outcome is known; the server's
        // max_ack_pending holds that pull back until this ack/NAK/TERM has landed.
        drop(slot);
        match settle(outcome, delivered, self.max_deliver) {
            Settle::Ack => self.ack(&message, &msg_id, sub, ack_inbox).await,
            Settle::Nak(reason) => {
                let delay = nak_delay(&self.settings, delivered);
                self.nak(&message, &msg_id, delivered, delay, &reason).await
            }
            Settle::Wait(reason) => {
                let delay = self.settings.nak_base;
                self.nak(&message, &msg_id, delivered, delay, &reason).await
            }
            Settle::Term(reason) => self.term(&message, stream_sequence, &reason).await,
        }
    }

    /// The assignment a message carries, or why it is poison (undecodable, another backend's)
    /// or not this release's to read.
    fn assignment_of(&self, message: &jetstream::Message) -> Result<Assignment, Unread> {
        let a = Assignment::from_json(&message.payload).map_err(|e| match e {
            AssignmentError::Newer(n) => Unread::Newer(n),
            e => Unread::Poison(e.to_string()),
        })?;
        if a.backend != self.backend {
            return Err(Unread::Poison(format!(
                "assignment {} is for backend {}, not {}",
                a.msg_id(),
                a.backend,
                self.backend
            )));
        }
        Ok(a)
    }

    /// Runs the handler, sending progress acks so the delivery does not time out meanwhile.
    async fn with_progress_acks(
        &self,
        work: impl Future<Output = Outcome>,
        message: &jetstream::Message,
        msg_id: &str,
    ) -> Outcome {
        tokio::pin!(work);
        // Not `interval()`: its immediate first tick still waits for the timer wheel (~1 ms).
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + self.progress_every,
            self.progress_every,
        );
        loop {
            tokio::select! {
                o = &mut work => return o,
                _ = ticker.tick() => {
                    if let Err(e) = message.ack_with(AckKind::Progress).await {
                        tracing::warn!(msg_id, error = %e, "cannot send a progress ack to NATS; sending the next one as usual (past ack_wait the assignment is redelivered, and a redelivery of a started task is not started again)");
                    }
                }
            }
        }
    }

    async fn ack(
        &self,
        message: &jetstream::Message,
        msg_id: &str,
        sub: &mut async_nats::Subscriber,
        ack_inbox: &str,
    ) {
        let acked = if self.settings.confirm_acks {
            self.confirmed_ack(message, sub, ack_inbox).await
        } else {
            message.ack().await
        };
        match acked {
            Ok(()) => {
                self.counters.acked.fetch_add(1, Ordering::SeqCst);
            }
            // The workload exists; a redelivery will find it (handlers are idempotent).
            Err(e) => {
                tracing::warn!(msg_id, error = %e, "ack not confirmed; the assignment may be redelivered")
            }
        }
    }

    async fn nak(
        &self,
        message: &jetstream::Message,
        msg_id: &str,
        delivered: i64,
        delay: Duration,
        reason: &str,
    ) {
        tracing::info!(
            msg_id,
            delivered,
            ?delay,
            reason,
            "assignment not started now; NAK"
        );
        match message.ack_with(AckKind::Nak(Some(delay))).await {
            Ok(()) => {
                self.counters.naked.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!(msg_id, error = %e, "cannot NAK; it is redelivered after ack_wait")
            }
        }
    }

    /// `+ACK` with a reply subject; the server's answer confirms the ack was recorded.
    async fn confirmed_ack(
        &self,
        message: &jetstream::Message,
        sub: &mut async_nats::Subscriber,
        ack_inbox: &str,
    ) -> Result<(), async_nats::Error> {
        let reply = message
            .reply
            .clone()
            .ok_or("the message has no reply subject to ack")?;
        self.js
            .client()
            .publish_with_reply(reply, ack_inbox.to_string(), "+ACK".into())
            .await?;
        let wait = async {
            while let Some(m) = sub.next().await {
                if m.subject.as_str() == ack_inbox {
                    return Ok(());
                }
            }
            Err::<(), async_nats::Error>("the ack inbox subscription closed".into())
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .map_err(|_| "no ack confirmation within 5s")?
    }

    async fn term(&self, message: &jetstream::Message, stream_sequence: u64, reason: &str) {
        tracing::error!(
            consumer = self.backend.consumer(),
            stream_sequence,
            reason,
            "poison assignment terminated (not redelivered)"
        );
        match message.ack_with(AckKind::Term).await {
            Ok(()) => {
                self.counters.termed.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!(stream_sequence, error = %e, "cannot TERM the poison assignment at NATS; it is redelivered after ack_wait and terminated again")
            }
        }
    }
}

#[cfg(test)]
mod lane_tests {
    #[test]
    fn lanes_grow_with_capacity_up_to_the_bound() {
        assert_eq!(super::lanes_for(1), 2);
        assert_eq!(super::lanes_for(4), 8);
        assert_eq!(super::lanes_for(16), 32);
        assert_eq!(super::lanes_for(1000), super::MAX_LANES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_backoff_doubles_and_is_capped() {
        let s = ConsumerSettings::default();
        assert_eq!(nak_delay(&s, 1), Duration::from_secs(1));
        assert_eq!(nak_delay(&s, 2), Duration::from_secs(2));
        assert_eq!(nak_delay(&s, 4), Duration::from_secs(8));
        assert_eq!(nak_delay(&s, 10), Duration::from_secs(60));
        assert_eq!(nak_delay(&s, 1000), Duration::from_secs(60));
        assert_eq!(nak_delay(&s, 0), Duration::from_secs(1));
    }

    #[test]
    fn a_retry_on_the_last_allowed_delivery_is_terminated() {
        let retry = || Outcome::Retry("apiserver away".into());
        assert_eq!(settle(Outcome::Started, 5, 5), Settle::Ack);
        assert_eq!(settle(retry(), 4, 5), Settle::Nak("apiserver away".into()));
        assert_eq!(
            settle(retry(), 5, 5),
            Settle::Term("transient failure on the last of 5 deliveries: apiserver away".into())
        );
        assert_eq!(
            settle(retry(), 99, 0),
            Settle::Nak("apiserver away".into()),
            "unlimited"
        );
        assert_eq!(
            settle(Outcome::Poison("bad".into()), 1, 5),
            Settle::Term("bad".into())
        );
    }
}
