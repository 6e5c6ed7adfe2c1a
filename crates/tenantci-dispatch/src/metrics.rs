//! The dispatcher's Prometheus metrics (served on /metrics by `run::status_api`). One struct so
//! every actor records into the same registry; names are `tenantci_dispatch_*`, labelled by
//! backend or resource class where they are per one. The status API reads a few figures back
//! ([`Figures`]): gauges it shows as they are, and what a series cannot say (claims in the
//! last minute, the forge's last answer to FetchTask and its last failure).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::backend_kind::BackendKind;

type ByBackend = Vec<(String, String)>;

fn backend(b: BackendKind) -> ByBackend {
    vec![("backend".to_string(), b.to_string())]
}

fn by_class(class: &str) -> ByBackend {
    vec![("class".to_string(), class.to_string())]
}

/// What the status API reads back (`Metrics::figures`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Tasks claimed in the last 60 seconds, every backend together.
    pub claims_last_minute: u32,
    /// Since the forge last answered a FetchTask (None: not since start, or not leading).
    pub since_forge_answered: Option<Duration>,
    /// The forge's last FetchTask failure, while it lasts (cleared by an answer).
    pub forge_error: Option<String>,
    /// Assignments queued or being started, by backend, as the scheduler last read them (0
    /// until it has).
    pub queue_depth: BTreeMap<BackendKind, u64>,
    /// Warm slots by class.
    pub warm_slots: BTreeMap<String, u32>,
    /// Bytes of all committed cache entries after the last eviction sweep (0 with the cache off).
    pub cache_stored_bytes: u64,
}

/// The figures no series holds.
#[derive(Default)]
struct Recent {
    claims: VecDeque<Instant>,
    forge_answered: Option<Instant>,
    forge_error: Option<String>,
}

/// The claims-per-minute window.
const CLAIMS_WINDOW: Duration = Duration::from_secs(60);

/// Every series of one dispatcher process, in one registry, and the figures no series holds.
/// Shared behind an `Arc`; `Default` registers every family.
pub struct Metrics {
    registry: Registry,
    recent: Mutex<Recent>,
    claimed: Family<ByBackend, Counter>,
    completed: Family<ByBackend, Counter>,
    failed: Family<ByBackend, Counter>,
    fetch_calls: Counter,
    fetch_latency: Histogram,
    queue_depth: Family<ByBackend, Gauge>,
    capacity: Family<ByBackend, Gauge>,
    in_use: Family<ByBackend, Gauge>,
    leader: Gauge,
    handed_out: Counter,
    facade_refused: Counter,
    identity_refused: Counter,
    spire_entry_errors: Counter,
    spire_mint_errors: Counter,
    webhook: Family<Vec<(String, String)>, Counter>,
    attempts: Counter,
    withdrawn: Counter,
    answers_lost: Counter,
    nudges_paced: Counter,
    forge_waiting: Family<Vec<(String, String)>, Gauge>,
    waiting_reads: Family<Vec<(String, String)>, Counter>,
    warm_slots: Family<ByBackend, Gauge>,
    warm_hits: Family<ByBackend, Counter>,
    warm_misses: Family<ByBackend, Counter>,
    warm_slot_seconds: Family<ByBackend, Counter<f64, AtomicU64>>,
    /// Days until the facade certificate expires, computed when scraped from its end.
    facade_cert: Expiry,
    /// Days until the dispatcher's own client certificate expires, by its user (CN). No
    /// series in the cluster: the kubelet renews the ServiceAccount's token.
    credential_days: Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>,
    credential: std::sync::Mutex<Option<(String, i64)>>,
    cache: CacheMetrics,
    task_phase: PhaseHistograms,
}

/// The task history's histogram per phase, backend and class.
type PhaseHistograms = Family<Vec<(String, String)>, Histogram, fn() -> Histogram>;

/// A phase's buckets: 0.1 s .. ~3.6 h (a job's run), doubling.
fn phase_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 18))
}

/// The shared actions cache's series (`cache`).
#[derive(Default)]
struct CacheMetrics {
    hits: Counter,
    misses: Counter,
    refused: Counter,
    stored_bytes: Gauge,
    evicted_bytes: Counter,
    evicted_entries: Counter,
}

/// A certificate's end, exported as days left, computed when scraped.
#[derive(Default)]
struct Expiry {
    days: Gauge<f64, AtomicU64>,
    /// Unix seconds; `i64::MIN` until [`Expiry::set`] (no value exported).
    not_after: AtomicI64,
}

impl Expiry {
    fn unset() -> Expiry {
        Expiry {
            days: Gauge::default(),
            not_after: AtomicI64::new(i64::MIN),
        }
    }

    fn set(&self, not_after: time::OffsetDateTime) {
        self.not_after
            .store(not_after.unix_timestamp(), Ordering::Relaxed);
    }

    fn refresh(&self, now: i64) {
        let not_after = self.not_after.load(Ordering::Relaxed);
        if not_after != i64::MIN {
            self.days.set(days_left(not_after, now));
        }
    }
}

/// Drops claims older than the window.
fn forget_before(claims: &mut VecDeque<Instant>, now: Instant) {
    while claims
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) > CLAIMS_WINDOW)
    {
        claims.pop_front();
    }
}

fn days_left(not_after: i64, now: i64) -> f64 {
    (not_after - now) as f64 / 86_400.0
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tenantci_dispatch");
        let m = Metrics {
            claimed: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            fetch_calls: Counter::default(),
            // 1 ms .. ~16 s.
            fetch_latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            queue_depth: Family::default(),
            capacity: Family::default(),
            in_use: Family::default(),
            leader: Gauge::default(),
            handed_out: Counter::default(),
            facade_refused: Counter::default(),
            identity_refused: Counter::default(),
            spire_entry_errors: Counter::default(),
            spire_mint_errors: Counter::default(),
            webhook: Family::default(),
            attempts: Counter::default(),
            withdrawn: Counter::default(),
            answers_lost: Counter::default(),
            nudges_paced: Counter::default(),
            forge_waiting: Family::default(),
            waiting_reads: Family::default(),
            warm_slots: Family::default(),
            warm_hits: Family::default(),
            warm_misses: Family::default(),
            warm_slot_seconds: Family::default(),
            facade_cert: Expiry::unset(),
            credential_days: Family::default(),
            credential: Default::default(),
            cache: CacheMetrics::default(),
            task_phase: Family::new_with_constructor(phase_buckets),
            registry: Registry::default(),
            recent: Mutex::default(),
        };
        register_tasks(&mut registry, &m);
        register_claiming(&mut registry, &m);
        register_capacity(&mut registry, &m);
        register_facade(&mut registry, &m);
        register_identity(&mut registry, &m);
        register_warm_pools(&mut registry, &m);
        register_expiries(&mut registry, &m);
        register_cache(&mut registry, &m.cache);
        Metrics { registry, ..m }
    }
}

/// What became of the tasks: claimed, ended, restarted, withdrawn.
fn register_tasks(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "tasks_claimed",
        "Tasks claimed from Gitea and queued",
        m.claimed.clone(),
    );
    registry.register(
        "tasks_completed",
        "Tasks whose executor reported a final state",
        m.completed.clone(),
    );
    registry.register(
        "tasks_failed",
        "Tasks the dispatcher reported as FAILURE itself",
        m.failed.clone(),
    );
    registry.register(
        "task_restarts",
        "Executors replaced by a new attempt (the previous one never fetched its task)",
        m.attempts.clone(),
    );
    registry.register(
        "tasks_withdrawn",
        "Tasks cancelled at Gitea before their executor fetched them (no executor ran them)",
        m.withdrawn.clone(),
    );
    registry.register(
        "task_phase_seconds",
        "Where finished tasks' time went: each phase's duration (task::history), observed at most once per task, when its history is complete",
        m.task_phase.clone(),
    );
}

/// Claiming at Gitea: FetchTask calls and their answers, webhook nudges.
fn register_claiming(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "fetch_task_calls",
        "FetchTask calls to Gitea",
        m.fetch_calls.clone(),
    );
    registry.register(
        "fetch_task_duration_seconds",
        "FetchTask latency",
        m.fetch_latency.clone(),
    );
    registry.register(
        "fetch_task_answers_lost",
        "FetchTask calls that failed after they were sent: Gitea may have claimed a task whose answer never arrived (it fails such a task after 10 minutes without updates)",
        m.answers_lost.clone(),
    );
    registry.register(
        "webhook_deliveries",
        "Webhook deliveries by outcome: nudge, standby (a non-leader's nudge), ignored, unsigned, bad_signature, too_large, malformed, replayed",
        m.webhook.clone(),
    );
    registry.register(
        "webhook_nudges_paced",
        "Nudged FetchTasks that waited for the nudge budget (webhook.nudge_burst used up): deliveries arrive faster than webhook.nudge_spacing",
        m.nudges_paced.clone(),
    );
    registry.register(
        "forge_waiting_jobs",
        "Jobs waiting at Forgejo (waiting-jobs API), by their runs-on labels and whether this dispatcher serves them (servable=false: demand no registration of it can take)",
        m.forge_waiting.clone(),
    );
    registry.register(
        "forge_waiting_jobs_reads",
        "Reads of Forgejo's waiting-jobs API by outcome: ok, nudge (a job this dispatcher serves started waiting), error",
        m.waiting_reads.clone(),
    );
}

/// The queue and the backends' capacity, and the scheduler lease.
fn register_capacity(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "queue_depth",
        "Assignments queued or being started",
        m.queue_depth.clone(),
    );
    registry.register(
        "capacity",
        "Configured concurrent executors",
        m.capacity.clone(),
    );
    registry.register("capacity_in_use", "Executors running", m.in_use.clone());
    registry.register(
        "leader",
        "1 while this instance holds the scheduler lease",
        m.leader.clone(),
    );
}

/// The facade's hand-outs and refusals.
fn register_facade(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "facade_tasks_handed_out",
        "Tasks handed to their executor by the facade",
        m.handed_out.clone(),
    );
    registry.register(
        "facade_refused",
        "Facade calls refused for a bad capability",
        m.facade_refused.clone(),
    );
}

/// The resource classes' warm pools (`backend::pod::pause`).
fn register_warm_pools(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "warm_slots",
        "Pause Pods the warm pool of a resource class holds (each keeps one executor's room on a rented node)",
        m.warm_slots.clone(),
    );
    registry.register(
        "warm_hits",
        "Executors of a class with a warm pool created while it held a warm slot (no node boot to wait for)",
        m.warm_hits.clone(),
    );
    registry.register(
        "warm_misses",
        "Executors of a class with a warm pool created while it held none (they wait for a node to boot)",
        m.warm_misses.clone(),
    );
    registry.register(
        "warm_slot_seconds",
        "Warm slots times seconds held: the rented-node time the warm pool costs (divide by 60 for node-minutes)",
        m.warm_slot_seconds.clone(),
    );
}

/// Executor identity's counters (SPIFFE on).
fn register_identity(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "facade_identity_refused",
        "Facade calls refused because the client's SPIFFE ID is missing or not its task's (identity on)",
        m.identity_refused.clone(),
    );
    registry.register(
        "spire_entry_errors",
        "Reads, writes and deletes of executor SPIRE entries (ClusterStaticEntry) that failed; each is retried next pass (identity on)",
        m.spire_entry_errors.clone(),
    );
    registry.register(
        "spire_mint_errors",
        "X509-SVID mints for VM executors that the SPIRE server refused or did not answer; each is tried again while the task waits (identity on, VM backend)",
        m.spire_mint_errors.clone(),
    );
}

/// The shared actions cache (`[cache]` on).
fn register_cache(registry: &mut Registry, c: &CacheMetrics) {
    registry.register(
        "cache_hits",
        "Cache lookups that found an entry of the caller's repository",
        c.hits.clone(),
    );
    registry.register(
        "cache_misses",
        "Cache lookups that found none",
        c.misses.clone(),
    );
    registry.register(
        "cache_refused",
        "Cache requests refused: a forged or expired grant, a missing or wrong runtime token, a download without its ticket, an entry past cache.max_entry_size_mib",
        c.refused.clone(),
    );
    registry.register(
        "cache_stored_bytes",
        "Bytes of all committed cache entries after the last eviction sweep",
        c.stored_bytes.clone(),
    );
    registry.register(
        "cache_evicted_bytes",
        "Bytes of cache entries evicted (size or age limit)",
        c.evicted_bytes.clone(),
    );
    registry.register(
        "cache_evicted_entries",
        "Cache entries evicted (size or age limit)",
        c.evicted_entries.clone(),
    );
}

/// The certificates' days left (`facade_cert_expiry_days`, `credential_expiry_days`).
fn register_expiries(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "facade_cert_expiry_days",
        "Days until the facade's serving certificate expires (executors cannot connect after it; `tenantci dispatch renew` re-issues it)",
        m.facade_cert.days.clone(),
    );
    registry.register(
        "credential_expiry_days",
        "Days until the dispatcher's own client certificate (cluster.kubeconfig) expires, by user; the apiserver refuses it after that (`tenantci dispatch renew` rotates it)",
        m.credential_days.clone(),
    );
    registry.register(
        "records_from_newer_release",
        "Stored records (ledger entries, executor Secrets, cache manifests, assignments, task histories) a newer tenantci release wrote, by kind, each counted once: left as they are; upgrade this dispatcher",
        crate::newer_records::counter(),
    );
}

impl Metrics {
    /// One phase of a finished task (`task::history`): its duration, labelled by phase,
    /// backend and class.
    pub fn task_phase(&self, phase: &str, backend: &str, class: &str, took: Duration) {
        let labels = vec![
            ("phase".to_string(), phase.to_string()),
            ("backend".to_string(), backend.to_string()),
            ("class".to_string(), class.to_string()),
        ];
        self.task_phase
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A task claimed from Gitea and queued for backend `b`; also counted in
    /// [`Figures::claims_last_minute`].
    pub fn claimed(&self, b: BackendKind) {
        self.claimed.get_or_create(&backend(b)).inc();
        let now = Instant::now();
        let mut r = self.recent();
        r.claims.push_back(now);
        forget_before(&mut r.claims, now);
    }
    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The forge answered a FetchTask (with tasks or without).
    pub fn forge_answered(&self) {
        let mut r = self.recent();
        r.forge_answered = Some(Instant::now());
        r.forge_error = None;
    }
    /// A FetchTask failed: the status API shows why until the forge answers again.
    pub fn fetch_failed(&self, error: &str) {
        self.recent().forge_error = Some(error.to_string());
    }
    /// A task on `b` done: its executor reported a final state and was deleted.
    pub fn completed(&self, b: BackendKind) {
        self.completed.get_or_create(&backend(b)).inc();
    }
    /// A task on `b` the dispatcher gave up on itself, reporting (or trying to report) FAILURE.
    pub fn failed(&self, b: BackendKind) {
        self.failed.get_or_create(&backend(b)).inc();
    }
    /// One FetchTask call to Gitea, answered or not, and how long it took.
    pub fn fetched(&self, took: Duration) {
        self.fetch_calls.inc();
        self.fetch_latency.observe(took.as_secs_f64());
    }
    /// `n` assignments for `b` queued or being started, as the scheduler read its consumer.
    pub fn queue_depth(&self, b: BackendKind, n: u64) {
        self.queue_depth.get_or_create(&backend(b)).set(n as i64);
    }
    /// A backend's capacity; its task counters start at 0 (a series that never appeared
    /// reads as "no data" in alerts, not as "no failures").
    pub fn capacity(&self, b: BackendKind, n: u32) {
        self.capacity.get_or_create(&backend(b)).set(n as i64);
        let labels = backend(b);
        for family in [&self.claimed, &self.completed, &self.failed] {
            drop(family.get_or_create(&labels));
        }
    }
    /// `n` executors of `b` running now (the registry's count).
    pub fn in_use(&self, b: BackendKind, n: usize) {
        self.in_use.get_or_create(&backend(b)).set(n as i64);
    }
    /// Whether this instance holds the scheduler lease now.
    pub fn leader(&self, is: bool) {
        self.leader.set(is as i64);
    }
    /// The facade handed a task to its executor.
    pub fn handed_out(&self) {
        self.handed_out.inc();
    }
    /// The facade refused a call whose capability did not verify.
    pub fn facade_refused(&self) {
        self.facade_refused.inc();
    }
    /// A cache lookup found an entry of the caller's repository.
    pub fn cache_hit(&self) {
        self.cache.hits.inc();
    }
    /// A cache lookup found none.
    pub fn cache_miss(&self) {
        self.cache.misses.inc();
    }
    /// The cache refused a request: a forged or expired grant, a wrong runtime token, a download
    /// without its ticket, an entry too large.
    pub fn cache_refused(&self) {
        self.cache.refused.inc();
    }
    /// `bytes` of committed cache entries after an eviction sweep.
    pub fn cache_stored(&self, bytes: u64) {
        self.cache.stored_bytes.set(bytes as i64);
    }
    /// One cache entry of `bytes` bytes evicted.
    pub fn cache_evicted(&self, bytes: u64) {
        self.cache.evicted_bytes.inc_by(bytes);
        self.cache.evicted_entries.inc();
    }
    /// The facade refused a call (identity on): no client SVID, or not its task's SPIFFE ID.
    pub fn identity_refused(&self) {
        self.identity_refused.inc();
    }

    /// A read, write or delete of an executor's SPIRE entry failed.
    pub fn spire_entry_error(&self) {
        self.spire_entry_errors.inc();
    }
    /// The SPIRE server refused or did not answer a VM executor's X509-SVID mint.
    pub fn spire_mint_error(&self) {
        self.spire_mint_errors.inc();
    }
    /// One webhook delivery and its `outcome`: `nudge`, `standby`, `ignored`, `unsigned`,
    /// `bad_signature`, `too_large`, `malformed` or `replayed`.
    pub fn webhook(&self, outcome: &str) {
        self.webhook
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
    }
    /// A task cancelled at Gitea before its executor fetched it.
    pub fn withdrawn(&self) {
        self.withdrawn.inc();
    }
    /// An executor replaced by a new attempt of its task.
    pub fn restarted(&self) {
        self.attempts.inc();
    }
    /// A FetchTask failed after it was sent: Gitea may have claimed a task whose answer never
    /// arrived.
    pub fn answer_lost(&self) {
        self.answers_lost.inc();
    }
    /// A nudged FetchTask waited for the nudge budget (`webhook.nudge_burst` used up).
    pub fn nudge_paced(&self) {
        self.nudges_paced.inc();
    }

    /// The waiting jobs now: the old series go, so label sets no longer waiting read 0 by
    /// their absence.
    pub fn forge_waiting(&self, demand: &tenantci_core::forge::waiting::Demand) {
        self.forge_waiting.clear();
        for ((labels, ours), n) in &demand.by_labels {
            self.forge_waiting
                .get_or_create(&vec![
                    ("runs_on".to_string(), labels.clone()),
                    ("servable".to_string(), ours.to_string()),
                ])
                .set(*n as i64);
        }
    }

    /// One read of Forgejo's waiting-jobs API and its `outcome`: `ok`, `nudge` or `error`.
    pub fn waiting_read(&self, outcome: &str) {
        self.waiting_reads
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
    }

    /// A class's warm slots now, and `held` seconds of the slots it had since the last call.
    pub fn warm(&self, class: &str, slots: u32, held: f64) {
        let labels = by_class(class);
        self.warm_slots.get_or_create(&labels).set(i64::from(slots));
        self.warm_slot_seconds.get_or_create(&labels).inc_by(held);
    }

    /// An executor of a class with a warm pool was created with (`hit`) or without a warm slot.
    pub fn warm_start(&self, class: &str, hit: bool) {
        let family = if hit {
            &self.warm_hits
        } else {
            &self.warm_misses
        };
        family.get_or_create(&by_class(class)).inc();
    }

    /// The facade certificate's end, for `facade_cert_expiry_days`.
    pub fn facade_cert_expiry(&self, not_after: time::OffsetDateTime) {
        self.facade_cert.set(not_after);
    }

    /// The client certificate's end and user, for `credential_expiry_days`.
    pub fn credential_expiry(&self, user: &str, not_after: time::OffsetDateTime) {
        let mut c = self.credential.lock().unwrap_or_else(|p| p.into_inner());
        *c = Some((user.to_string(), not_after.unix_timestamp()));
    }

    /// What the status API shows; `backends` and `classes` name the series to read.
    pub fn figures(&self, backends: &[BackendKind], classes: &[&str]) -> Figures {
        let now = Instant::now();
        let mut r = self.recent();
        forget_before(&mut r.claims, now);
        let gauge = |v: i64| u64::try_from(v).unwrap_or(0);
        Figures {
            claims_last_minute: u32::try_from(r.claims.len()).unwrap_or(u32::MAX),
            since_forge_answered: r.forge_answered.map(|t| now.saturating_duration_since(t)),
            forge_error: r.forge_error.clone(),
            queue_depth: backends
                .iter()
                .map(|b| {
                    (
                        *b,
                        gauge(self.queue_depth.get_or_create(&backend(*b)).get()),
                    )
                })
                .collect(),
            warm_slots: classes
                .iter()
                .map(|c| {
                    let slots = self.warm_slots.get_or_create(&by_class(c)).get();
                    (c.to_string(), u32::try_from(slots).unwrap_or(0))
                })
                .collect(),
            cache_stored_bytes: gauge(self.cache.stored_bytes.get()),
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        self.facade_cert.refresh(now);
        let credential = self
            .credential
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((user, not_after)) = credential {
            self.credential_days
                .get_or_create(&vec![("user".to_string(), user)])
                .set(days_left(not_after, now));
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family() {
        let m = Metrics::default();
        m.claimed(BackendKind::new("pod"));
        m.fetched(Duration::from_millis(3));
        m.leader(true);
        m.answer_lost();
        m.warm("small", 2, 1.5);
        m.warm_start("small", false);
        m.facade_cert_expiry(time::OffsetDateTime::now_utc() + time::Duration::days(20));
        m.task_phase("scheduling", "pod", "none", Duration::from_secs(90));
        let text = m.render();
        for needle in [
            "tenantci_dispatch_task_phase_seconds_count{phase=\"scheduling\",backend=\"pod\",class=\"none\"} 1",
            "tenantci_dispatch_tasks_claimed_total{backend=\"pod\"} 1",
            "tenantci_dispatch_fetch_task_calls_total 1",
            "tenantci_dispatch_leader 1",
            "tenantci_dispatch_fetch_task_answers_lost_total 1",
            "tenantci_dispatch_fetch_task_duration_seconds_bucket",
            "tenantci_dispatch_warm_slots{class=\"small\"} 2",
            "tenantci_dispatch_warm_slot_seconds_total{class=\"small\"} 1.5",
            "tenantci_dispatch_warm_misses_total{class=\"small\"} 1",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        let days: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("tenantci_dispatch_facade_cert_expiry_days "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((19.9..=20.0).contains(&days), "{days}");
        assert!(
            !text.contains("tenantci_dispatch_credential_expiry_days{"),
            "no credential series until one is known (in the cluster there is none)"
        );
        m.credential_expiry(
            "tenantci-dispatcher",
            time::OffsetDateTime::now_utc() + time::Duration::days(3),
        );
        let text = m.render();
        let days: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "tenantci_dispatch_credential_expiry_days{user=\"tenantci-dispatcher\"} ",
                )
            })
            .unwrap_or_else(|| panic!("{text}"))
            .parse()
            .unwrap();
        assert!((2.9..=3.0).contains(&days), "{days}");
    }

    /// Every query of the shipped Grafana dashboard names a family this registry exports
    /// (a family is in the text once it has a series, so every recording method is called
    /// first): a renamed metric cannot leave a panel silently empty.
    #[test]
    fn every_dashboard_query_names_a_metric_the_dispatcher_exports() {
        let m = Metrics::default();
        let b = BackendKind::new("pod");
        m.claimed(b);
        m.completed(b);
        m.failed(b);
        m.fetched(Duration::from_millis(3));
        m.queue_depth(b, 1);
        m.capacity(b, 4);
        m.in_use(b, 1);
        m.leader(true);
        m.handed_out();
        m.facade_refused();
        m.identity_refused();
        m.spire_entry_error();
        m.spire_mint_error();
        m.webhook("nudged");
        m.withdrawn();
        m.restarted();
        m.answer_lost();
        m.nudge_paced();
        m.waiting_read("ok");
        m.warm("small", 1, 1.0);
        m.warm_start("small", true);
        m.warm_start("small", false);
        m.cache_hit();
        m.cache_miss();
        m.cache_refused();
        m.cache_stored(1);
        m.cache_evicted(1);
        m.task_phase("run", "pod", "none", Duration::from_secs(1));
        let now = time::OffsetDateTime::now_utc();
        m.facade_cert_expiry(now + time::Duration::days(20));
        m.credential_expiry("tenantci-dispatcher", now + time::Duration::days(20));
        let text = m.render();
        let exported: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../manifests/monitoring/dashboard.json"))
                .unwrap();
        let mut named = std::collections::BTreeSet::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap();
                named.extend(
                    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|w| w.starts_with("tenantci_dispatch_"))
                        .map(str::to_string),
                );
            }
        }
        assert!(named.contains("tenantci_dispatch_task_phase_seconds_bucket"));
        for metric in &named {
            // A counter's series ends in _total, a histogram's in _bucket, _sum, _count.
            let family = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s).filter(|f| exported.contains(f)))
                .unwrap_or(metric);
            assert!(
                exported.contains(family),
                "the dashboard queries {metric}, which the dispatcher does not export"
            );
        }
    }
}
