//! `tenantci dispatch run`: composes the leader election, the scheduler, each backend's
//! worker and reconciler (`backend::catalog` builds the backends the config turns on: the pod
//! backend always, the VM backend with `[vm]`), the facade and the status API, runs until
//! SIGTERM and drains. A leadership term is [`term`]; renewed files are taken up by
//! [`reload`].
//!
//! Every instance serves the facade and the status API. Only the holder of the Lease
//! `dynamic-runner-scheduler` runs a *term*: recovery, then the scheduler (FetchTask), each
//! backend's worker and reconciler, and the keep-alive. A term ends when the lease is lost
//! (the election stops leading before the lease can expire for others) or at SIGTERM; then
//! nothing of it runs any more, so two instances never claim or start at once.
//!
//! Drain on SIGTERM: stop the term (no more FetchTask, no more pulls; a start in progress
//! finishes and is acked), release the lease so a standby takes over at once, then stop the
//! facade (in-flight requests finish). Executors keep running; the next dispatcher's facade
//! and reconciler pick them up from their backends.
//!
//! Listen addresses may have port 0 (tests, a second instance on one host): the system picks
//! the ports, [`Listening`] reports them, and a `facade.url` with port 0 is advertised to
//! executors with the facade's bound port.

pub mod credential;
pub mod kube_swap;
pub mod reload;
pub mod status_api;
pub mod term;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::backend::pod::registrar::Registrar;
use crate::backend::vm::sandboxes::{Minter, Sandboxes};
use crate::backend::{Backend, Context, catalog};
use crate::cache::Cache;
use crate::capability::{self, CapabilityKey};
use crate::claim::registration::SchedulerCredential;
use crate::claim::scheduler;
use crate::claim::webhook::{self, Receiver, WebhookSecret};
use crate::config::Config;
use crate::facade::Facade;
use crate::facade::cert as facade_cert;
use crate::facade::handout::Handout;
use crate::facade::serving::ServingCert;
use crate::health::Health;
use crate::identity::own::Own;
use crate::leader;
use crate::metrics::Metrics;
use crate::queue::assignment::SealingKey;
use crate::queue::producer::Producer;
use crate::queue::topology;
use crate::queue::{connect, permissions, users};
use crate::run::kube_swap::SwappableClient;
use crate::run::term::{Shared, Term};
use crate::sizing::demand::WarmDemand;
use crate::task::history::store::History;
use crate::task::ledger::Ledger;
use crate::task::mirror::Mirror;
use crate::task::registry::Registry;
use crate::task::spec::GiteaForExecutors;
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient};
use tenantci_core::forge::gitea::facade as transport;
use tenantci_core::{Error, Result, input};

/// Everything `run` needs from disk, loaded before anything connects or listens, so a bad
/// file is exit 2 with nothing started: each read bounded and only from a regular file, each
/// key and token only when no other account can read it, the facade certificate checked
/// against its key, the clock and `facade.url`'s host (`facade_cert`).
struct Inputs {
    credentials: Credentials,
    /// The scheduler registration's Gitea runner id (owner of this dispatcher's sandboxes).
    runner_id: i64,
    capability_key: CapabilityKey,
    sealing_key: SealingKey,
    /// The facade's certificate as the TLS server presents it (swapped on renewal).
    facade_serving: Arc<ServingCert>,
    /// `facade.url`'s host, which the facade certificate must cover.
    facade_host: String,
    facade_ca_pem: String,
    /// `gitea.ca_file`'s PEM: the dispatcher's Gitea client and every executor's proxy trust it.
    gitea_ca_pem: Option<String>,
    facade_cert: facade_cert::Valid,
    webhook_secret: Option<WebhookSecret>,
    /// `waiting_jobs.token_file`'s Forgejo API token.
    waiting_token: Option<tenantci_core::secret::Secret>,
}

fn load_inputs(cfg: &Config) -> Result<Inputs> {
    let registration = SchedulerCredential::load(&cfg.gitea.credential_file)?;
    if !cfg.nats.sealing_key_file.exists() {
        return Err(Error::bad_input(format!(
            "the sealing key `{}` does not exist",
            cfg.nats.sealing_key_file.display()
        ))
        .hint("run `tenantci dispatch init`, which creates it; every dispatcher sharing a queue needs the same key"));
    }
    let host = tenantci_core::input::url_host(&cfg.facade.url, &["https"])
        .ok_or_else(|| Error::bad_input("facade.url has no host").hint("fix facade.url"))?;
    let facade = facade_cert::load(&cfg.facade, &host, time::OffsetDateTime::now_utc())?;
    for user in [users::PRODUCER, users::WORKER, users::ADMIN] {
        let path = permissions::password_file(&cfg.nats.secrets_dir, user);
        // ci-admin's is optional (`apply_topology`); the others are read when connecting.
        if user != users::ADMIN || path.exists() {
            input::check_private("the NATS password file", &path)?;
        }
    }
    Ok(Inputs {
        credentials: registration.credentials(),
        runner_id: registration.id,
        capability_key: capability::load_key(&cfg.facade.capability_key_file)?,
        sealing_key: SealingKey::load_or_create(&cfg.nats.sealing_key_file)?,
        facade_serving: ServingCert::new(&facade.cert_pem, &facade.key_pem)?,
        facade_host: host,
        facade_ca_pem: facade.ca_pem,
        gitea_ca_pem: match &cfg.gitea.ca_file {
            Some(path) => Some(gitea_ca(path)?),
            None => None,
        },
        facade_cert: facade.valid,
        webhook_secret: match &cfg.webhook {
            Some(w) => {
                input::check_private("the webhook secret file", &w.secret_file)?;
                Some(WebhookSecret::new(tenantci_core::secret::read_file(
                    "the webhook secret file",
                    &w.secret_file,
                    Some("put the secret typed into the Gitea webhook's settings into it"),
                )?))
            }
            None => None,
        },
        waiting_token: match &cfg.waiting_jobs {
            Some(w) => Some(w.read_token()?),
            None => None,
        },
    })
}

/// The metrics, with the configured capacities and the facade certificate's end.
fn start_metrics(cfg: &Config, inputs: &Inputs) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::default());
    report_facade_cert(cfg, &inputs.facade_cert, &metrics);
    report_credential(cfg, &metrics);
    // Every backend's capacity, whether it runs or not (an opt-in backend only when it does).
    for f in catalog::all().filter(|f| !f.opt_in || cfg.runs(f.kind)) {
        metrics.capacity(f.kind, cfg.capacity.of(f.kind));
    }
    metrics
}

/// Says how long the facade certificate has left (a warning within [`facade_cert::WARN_DAYS`])
/// and exports it as a metric.
fn report_facade_cert(cfg: &Config, valid: &facade_cert::Valid, metrics: &Metrics) {
    metrics.facade_cert_expiry(valid.not_after);
    let until = tenantci_core::pki::inspect::rfc3339(valid.not_after);
    if valid.days_left < facade_cert::WARN_DAYS {
        tracing::warn!(
            cert = %cfg.facade.cert_file.display(),
            days_left = valid.days_left,
            "the facade certificate expires at {until}; run `tenantci dispatch renew --config FILE` (tenantci-dispatch-renew@.timer does it daily): this dispatcher takes the new one up without a restart"
        );
    } else {
        tracing::info!(
            days_left = valid.days_left,
            "the facade certificate is valid until {until}"
        );
    }
}

/// Exports the end of the dispatcher's own client certificate (gateway path) and says when
/// it must be renewed; in the cluster (no kubeconfig) there is nothing to report.
fn report_credential(cfg: &Config, metrics: &Metrics) {
    let Some(path) = &cfg.cluster.kubeconfig else {
        return;
    };
    let Some(cert) = credential::client_certificate(path) else {
        return;
    };
    let user = cert.common_name.clone().unwrap_or_default();
    metrics.credential_expiry(&user, cert.not_after);
    let until = tenantci_core::pki::inspect::rfc3339(cert.not_after);
    let days_left = (cert.not_after - time::OffsetDateTime::now_utc()).whole_days();
    if days_left < credential::WARN_DAYS {
        tracing::warn!(
            kubeconfig = %path.display(),
            days_left,
            "the dispatcher's client credential expires at {until}; run `tenantci dispatch renew --config FILE --state-dir DIR --cluster NAME` (tenantci-dispatch-renew@.timer does it daily): this dispatcher takes the new one up without a restart"
        );
    } else {
        tracing::info!(
            days_left,
            "the dispatcher's client credential is valid until {until}"
        );
    }
}

/// The dispatcher's client. On the gateway path (a kubeconfig with a minted credential) it
/// is swappable, so a renewed credential is taken up without a restart (`reload`); in the
/// cluster kube itself re-reads the ServiceAccount token.
async fn kube_client(cfg: &Config) -> Result<(kube::Client, Option<SwappableClient>)> {
    match &cfg.cluster.kubeconfig {
        Some(path) => {
            let swappable =
                SwappableClient::new(tenantci_core::kube_client::from_kubeconfig(path).await?);
            Ok((swappable.client(), Some(swappable)))
        }
        None => {
            tenantci_core::tls::ensure_crypto_provider();
            kube::Client::try_default().await.map_err(|e| {
                Error::bad_input("no in-cluster or KUBECONFIG credentials").caused_by(e)
                    .hint("set cluster.kubeconfig in the config, or run inside the cluster with the tenantci-dispatcher ServiceAccount")
            }).map(|c| (c, None))
        }
    }
}

/// The facade's TLS: its own certificate, server-only (the capability authenticates), or,
/// with `[identity]`, SPIFFE mTLS with the dispatcher's SVID (`identity::own`).
fn facade_tls(inputs: &Inputs, own: Option<&Own>) -> Arc<rustls::ServerConfig> {
    match own {
        Some(own) => own.facade_tls(),
        None => inputs.facade_serving.server_config(),
    }
}

/// Renewed files taken up while running (`reload`): the facade's unless it serves SPIFFE
/// mTLS (`serving` None), the credential's on the gateway path. Ends when the drain flips
/// `stop`.
fn start_reloader(
    cfg: &Config,
    inputs: &Inputs,
    serving: Option<Arc<ServingCert>>,
    swappable: Option<SwappableClient>,
    metrics: &Arc<Metrics>,
    stop: &watch::Receiver<bool>,
) {
    let (facade, kube) = reload::watched(cfg, inputs.facade_host.clone(), serving, swappable);
    // Spawned even with nothing to watch: it owns SIGHUP, whose default action (the end of
    // the process, which systemd counts as a clean stop) `systemctl reload` must not trigger.
    drop(reload::Reloader::new(facade, kube, metrics.clone()).spawn(stop.clone()));
}

async fn bind(what: &str, addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        Error::bad_input(format!("cannot listen on {addr} for the {what}"))
            .caused_by(e)
            .hint("pick a free address in the config (or its TENANTCI_DISPATCH_* override)")
    })
}

fn identity(cfg: &Config) -> String {
    cfg.leader.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|| "dispatcher".into());
        format!("{host}-{}", std::process::id())
    })
}

/// Where the servers of a running dispatcher listen: `dispatch run` prints it on stdout as
/// one JSON line, `{"type":"listening","facade":ADDR,"facadeUrl":URL,"status":ADDR}`, once
/// both listen (docs/cli.md). With port 0 in the config these are the ports the system picked.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listening {
    /// The line's `type`: always `listening`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The facade's bound address.
    pub facade: SocketAddr,
    /// The facade URL executors are given.
    pub facade_url: String,
    /// The status API's bound address.
    pub status: SocketAddr,
    /// The metrics listener, when `status.metrics_listen` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
    /// The webhook receiver, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<SocketAddr>,
}

/// The facade URL executors are given: `facade.url` as configured, except that port 0 (as
/// `dispatch init --facade-listen HOST:0` writes it) becomes the facade's bound port, so the
/// executors of this instance reach it. A URL without a port means 443 and is kept.
fn advertised_facade_url(configured: &str, bound_port: u16) -> String {
    let (scheme, rest) = configured.split_once("://").unwrap_or(("", configured));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once(':') {
        Some((host, "0")) => format!("{scheme}://{host}:{bound_port}{path}"),
        _ => configured.to_string(),
    }
}

/// Runs the dispatcher described by `config` until SIGTERM / SIGINT; `on_listening` is
/// called once the facade and the status API listen.
///
/// One sequence on purpose: its order is the start-up contract (every file loaded, NATS
/// connected and the topology applied before anything listens: `prepare`; the facade
/// serving before the lease is contested: `serve`) and the drain undoes it in reverse,
/// which reads best top to bottom.
pub async fn run(mut cfg: Config, on_listening: impl FnOnce(&Listening)) -> Result<()> {
    let mut p = prepare(&cfg).await?;
    let servers = serve(&mut cfg, &mut p, on_listening).await?;

    let me = identity(&cfg);
    // The dispatcher's own namespace (in the cluster, apart from the executors'): a reader of
    // the Lease there is given nothing in the executors' namespace.
    let leases: Api<Lease> = Api::namespaced(p.client.clone(), cfg.cluster.dispatcher_namespace());
    let (election, leader_rx) = start_election(&leases, &me, p.timing, servers.stop_rx.clone());
    let shared = Shared {
        cfg: cfg.clone(),
        ctx: Context {
            gitea: Arc::new(p.gitea.clone()),
            registry: p.registry,
            ledger: Arc::new(p.ledger.clone()),
            metrics: p.metrics.clone(),
            warm: p.warm.clone(),
        },
        runner: p.gitea,
        ledger: p.ledger,
        kube: p.client.clone(),
        priority_class: Default::default(),
        backends: p.backends,
        producer: Producer::new(p.producer_client),
        worker_client: p.worker_client,
        capability_key: p.inputs.capability_key,
        sealing_key: p.inputs.sealing_key,
        facade_ca_pem: p.inputs.facade_ca_pem,
        gitea: GiteaForExecutors {
            url: cfg.gitea.url.clone(),
            ca_pem: p.inputs.gitea_ca_pem.clone(),
        },
        nudge: servers.nudge,
        waiting_token: p.inputs.waiting_token.clone(),
    };

    let term = follow_the_lease(&shared, &p.health, leader_rx, &me).await?;
    Running {
        term,
        stop: servers.stop_tx,
        election,
        leases,
        me,
        health: p.health,
        facade: servers.facade,
        status: servers.status,
        webhook: servers.webhook,
    }
    .drain()
    .await;
    Ok(())
}

/// What `prepare` made before anything listens, in the order it made it.
struct Prepared {
    inputs: Inputs,
    timing: leader::Timing,
    client: kube::Client,
    /// The gateway path's client, for `reload` to swap a renewed credential into.
    swappable: Option<SwappableClient>,
    producer_client: async_nats::Client,
    worker_client: async_nats::Client,
    ledger: Ledger,
    metrics: Arc<Metrics>,
    /// With `[identity]`: the dispatcher's own SVID source.
    own: Option<Own>,
    /// The scheduler's Gitea client, with the registration's credentials.
    gitea: RunnerClient,
    registry: Arc<Registry>,
    warm: Arc<WarmDemand>,
    backends: Vec<Arc<dyn Backend>>,
    health: Arc<Health>,
}

/// Start-up before anything listens: every file loaded (a bad one is exit 2 with nothing
/// started), the cluster client, NATS connected and the topology applied, the claim ledger
/// opened, the metrics, the dispatcher's own identity, the VM backend's sandboxes, then the
/// Gitea client, the registry and every backend built over them.
async fn prepare(cfg: &Config) -> Result<Prepared> {
    let inputs = load_inputs(cfg)?;
    let timing = cfg.leader_timing();
    let (client, swappable) = kube_client(cfg).await?;
    let (producer_client, worker_client) = connect_queue(cfg).await?;
    apply_topology(cfg).await?;
    let metrics = start_metrics(cfg, &inputs);
    let ledger = open_ledger(cfg, &worker_client).await?;
    let ledger = with_history(ledger, &worker_client, &metrics).await;
    let (own, minter) = own_identity(cfg, &metrics).await?;
    let sandboxes = connect_sandboxes(cfg, inputs.runner_id, minter).await?;

    let gitea = gitea_client(cfg, &inputs)?;
    let registry = Arc::new(Registry::default());
    let warm = Arc::new(WarmDemand::new(&cfg.executor.classes));
    let backends = backends(cfg, &client, sandboxes, &ledger, &metrics);
    let health = Arc::new(Health::default());
    Ok(Prepared {
        inputs,
        timing,
        client,
        swappable,
        producer_client,
        worker_client,
        ledger,
        metrics,
        own,
        gitea,
        registry,
        warm,
        backends,
        health,
    })
}

/// The servers `serve` started, for the term and the drain.
struct Servers {
    facade: transport::FacadeHandle,
    /// The status API's tasks (and the metrics listener's).
    status: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    webhook: Option<tokio::task::JoinHandle<crate::http1::Stopped>>,
    /// Flipped by the drain: the servers, the reloader and the election stop.
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    /// The webhook receiver's nudges, for the scheduler of the current term.
    nudge: Arc<Notify>,
}

/// Every instance's servers, before the lease is contested: the facade (with the shared
/// cache beside it) listening and serving, then renewed files taken up, the status API and
/// the webhook receiver serving, and `on_listening` told where. `cfg.facade.url` becomes the
/// URL executors are given (the bound port for port 0).
async fn serve(
    cfg: &mut Config,
    p: &mut Prepared,
    on_listening: impl FnOnce(&Listening),
) -> Result<Servers> {
    let facade_tls = facade_tls(&p.inputs, p.own.as_ref());
    let handout = Handout::new(p.backends.clone(), p.ledger.clone());
    let facade = Arc::new(new_facade(
        cfg,
        &p.inputs,
        handout,
        p.gitea.clone(),
        p.registry.clone(),
        p.ledger.clone(),
        p.metrics.clone(),
    ));
    let facade_listener = bind("facade", cfg.facade.listen).await?;
    let status_listeners = status_api::Listeners::bind(&cfg.status).await?;
    let (status_addr, metrics_addr) = (status_listeners.status_addr, status_listeners.metrics_addr);
    let webhook_listener = match &cfg.webhook {
        Some(w) => Some(bind("webhook receiver", w.listen).await?),
        None => None,
    };
    let facade_routes = facade_routes(cfg, &p.inputs, facade, &p.metrics)?;
    let facade = transport::spawn_router(facade_listener, facade_tls, facade_routes)
        .map_err(|e| Error::external("cannot start the facade").caused_by(e))?;
    // Before `Shared` is built from `cfg`: the worker gives this URL to each executor.
    cfg.facade.url = advertised_facade_url(&cfg.facade.url, facade.local_addr.port());
    p.health.facade_up.store(true, Ordering::SeqCst);
    let (stop_tx, stop_rx) = watch::channel(false);
    let serving = p.own.is_none().then(|| p.inputs.facade_serving.clone());
    start_reloader(
        cfg,
        &p.inputs,
        serving,
        p.swappable.take(),
        &p.metrics,
        &stop_rx,
    );
    let sources = status_sources(cfg, &p.registry, &p.ledger, &p.backends, &p.worker_client);
    let served = status_listeners.serve(
        p.health.clone(),
        p.metrics.clone(),
        sources,
        stop_rx.clone(),
    );
    let nudge = Arc::new(Notify::new());
    let (webhook_addr, webhook_task) = match (webhook_listener, p.inputs.webhook_secret.take()) {
        (Some(listener), Some(secret)) => {
            let receiver = receiver(cfg, secret, &p.warm, &p.metrics, &p.health, &nudge);
            let (addr, task) = start_webhook(listener, receiver, cfg, stop_rx.clone())?;
            (Some(addr), Some(task))
        }
        _ => (None, None),
    };
    on_listening(&announce(
        cfg,
        Listening {
            kind: "listening",
            facade: facade.local_addr,
            facade_url: cfg.facade.url.clone(),
            status: status_addr,
            metrics: metrics_addr,
            webhook: webhook_addr,
        },
    ));
    Ok(Servers {
        facade,
        status: served,
        webhook: webhook_task,
        stop_tx,
        stop_rx,
        nudge,
    })
}

/// What the status API reads: the parts `run` holds, and the config's fixed figures; the
/// task history's records read once in the background meanwhile.
fn status_sources(
    cfg: &Config,
    registry: &Arc<Registry>,
    ledger: &Ledger,
    backends: &[Arc<dyn Backend>],
    worker: &async_nats::Client,
) -> Arc<status_api::Sources> {
    let sources = Arc::new(status_api::Sources {
        registry: registry.clone(),
        ledger: Mirror::new(ledger.clone()),
        backends: backends.to_vec(),
        instance: identity(cfg),
        forge_url: cfg.gitea.url.clone(),
        labels: cfg.declared_labels(),
        capacity: backends
            .iter()
            .map(|b| (b.backend(), cfg.capacity.of(b.backend())))
            .collect(),
        classes: cfg.executor.classes.clone(),
        cache_enabled: cfg.cache.is_some(),
        queue: async_nats::jetstream::new(worker.clone()),
        history: ledger
            .history()
            .cloned()
            .map(|history| status_api::HistorySource {
                history,
                seen: Default::default(),
                max_tasks: usize::try_from(cfg.history.max_tasks()).unwrap_or(usize::MAX),
                max_age: cfg.history.max_age(),
            }),
    });
    let warming = sources.clone();
    tokio::spawn(async move {
        if let Some(h) = &warming.history {
            h.warm().await;
        }
    });
    sources
}

/// Before anything listens: with identity on, the dispatcher's first SVID and its ID are
/// checked, and with the VM backend too, the SPIRE server that mints the sandboxes' SVIDs with
/// it is reached.
async fn own_identity(
    cfg: &Config,
    metrics: &Arc<Metrics>,
) -> Result<(Option<Own>, Option<Minter>)> {
    let Some(identity) = &cfg.identity else {
        return Ok((None, None));
    };
    let own = Own::open(identity).await?;
    let minter = match &cfg.vm {
        Some(vm) => own.server_api().await?.map(|api| Minter {
            api,
            ttl: std::time::Duration::from_secs(vm.timeout_seconds()),
            metrics: metrics.clone(),
        }),
        None => None,
    };
    Ok((Some(own), minter))
}

/// Every backend this config turns on (`backend::catalog`): the pod backend (with its SPIRE
/// entries when identity is on), the VM backend when `[vm]` is configured, and any other
/// registered backend its config turns on.
fn backends(
    cfg: &Config,
    client: &kube::Client,
    sandboxes: Option<Sandboxes>,
    ledger: &Ledger,
    metrics: &Arc<Metrics>,
) -> Vec<Arc<dyn Backend>> {
    let namespace = &cfg.cluster.namespace;
    // A loaded config is valid, so a present section parses.
    let registrar = cfg
        .identity
        .as_ref()
        .and_then(|i| i.parse().ok())
        .map(|settings| Registrar::new(client.clone(), settings, namespace, metrics.clone()));
    catalog::build(crate::backend::provider::Inputs {
        kube: client.clone(),
        namespace: namespace.clone(),
        resync: cfg.cluster.resync(),
        ledger: ledger.clone(),
        metrics: metrics.clone(),
        capacity: cfg.capacity.explicit().clone(),
        registrar,
        sandboxes,
    })
}

/// The VM backend's sandboxes when `[vm]` is set. Checked at start: a wrong key is refused
/// now, naming its file, not at the first vm task.
async fn connect_sandboxes(
    cfg: &Config,
    runner_id: i64,
    minter: Option<Minter>,
) -> Result<Option<Sandboxes>> {
    Ok(crate::backend::vm::api::connect(cfg.vm.as_ref())
        .await?
        .zip(cfg.vm.clone())
        .map(|(client, vm)| Sandboxes::new(client, vm, runner_id, minter)))
}

/// The facade's routes and, with `[cache]`, the shared cache's beside them: one listener, one
/// TLS, the executors' one road (docs/architecture.md). The cache's first sweep starts here.
fn facade_routes(
    cfg: &Config,
    inputs: &Inputs,
    facade: Arc<Facade>,
    metrics: &Arc<Metrics>,
) -> Result<axum::Router> {
    let Some(settings) = &cfg.cache else {
        return Ok(transport::router(facade));
    };
    let cache =
        Cache::open(settings, inputs.capability_key.clone(), metrics.clone()).map_err(|e| {
            Error::bad_input(format!("the shared cache cannot start: {e}"))
                .hint("fix [cache] in the config (docs/runbooks/gitea-dispatcher.md)")
        })?;
    cache.sweep_soon();
    Ok(transport::router(facade).merge(crate::cache::protocol::router(cache)))
}

/// The facade: the keys and settings from `cfg` and `inputs`, the rest shared with the term.
fn new_facade(
    cfg: &Config,
    inputs: &Inputs,
    handout: Handout,
    gitea: RunnerClient,
    registry: Arc<Registry>,
    ledger: Ledger,
    metrics: Arc<Metrics>,
) -> Facade {
    Facade {
        capability_key: inputs.capability_key.clone(),
        sealing_key: inputs.sealing_key.clone(),
        handout,
        gitea,
        registry,
        ledger,
        metrics,
        runner_name: cfg.gitea.runner_name.clone(),
        identity: cfg.identity.is_some(),
        consumed: Default::default(),
        finished: Default::default(),
    }
}

/// The lease election in the background; its receiver says whether this instance leads.
fn start_election(
    leases: &Api<Lease>,
    me: &str,
    timing: leader::Timing,
    stop: watch::Receiver<bool>,
) -> (tokio::task::JoinHandle<()>, watch::Receiver<bool>) {
    let (leader_tx, leader_rx) = watch::channel(false);
    let election = tokio::spawn(leader::run(
        leases.clone(),
        me.to_string(),
        timing,
        leader_tx,
        stop,
    ));
    (election, leader_rx)
}

/// What a running dispatcher stops at SIGTERM / SIGINT.
struct Running {
    term: Option<Term>,
    stop: watch::Sender<bool>,
    election: tokio::task::JoinHandle<()>,
    leases: Api<Lease>,
    me: String,
    health: Arc<Health>,
    facade: transport::FacadeHandle,
    status: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    webhook: Option<tokio::task::JoinHandle<crate::http1::Stopped>>,
}

impl Running {
    /// The drain, the start undone in reverse: the term, the election and the lease, then
    /// the servers (the facade finishes its requests).
    async fn drain(self) {
        tracing::info!("draining: no more FetchTask, finishing starts in progress");
        if let Some(t) = self.term {
            t.stop().await;
        }
        let _ = self.stop.send(true);
        let _ = self.election.await;
        if leader::release(&self.leases, &self.me).await {
            tracing::info!("released the scheduler lease");
        }
        self.health.facade_up.store(false, Ordering::SeqCst);
        self.facade.shutdown().await;
        for t in self.status {
            stop_status(t).await;
        }
        if let Some(t) = self.webhook {
            // Bounded by the receiver's own shutdown grace.
            let _ = t.await;
        }
        tracing::info!("dispatcher stopped");
    }
}

/// Logs that the dispatcher is up, and what its polling costs Gitea; returns `listening`.
fn announce(cfg: &Config, listening: Listening) -> Listening {
    tracing::info!(
        "FetchTask rate: {}",
        scheduler::Polling::of(&cfg.gitea, cfg.webhook.as_ref()).describe()
    );
    tracing::info!(
        facade = %listening.facade,
        webhook = ?listening.webhook,
        facade_url = %cfg.facade.url,
        status = %listening.status,
        metrics = ?listening.metrics,
        namespace = %cfg.cluster.namespace,
        lease_namespace = %cfg.cluster.dispatcher_namespace(),
        "dispatcher up; waiting for the scheduler lease"
    );
    listening
}

/// The webhook receiver: nudges for the registration's labels (every class's included), and
/// announcements for the classes' warm pools.
fn receiver(
    cfg: &Config,
    secret: WebhookSecret,
    warm: &Arc<WarmDemand>,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    nudge: &Arc<Notify>,
) -> Receiver {
    Receiver {
        secret,
        labels: cfg.declared_labels(),
        classes: cfg.executor.classes.clone(),
        warm: warm.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        nudge: nudge.clone(),
        recent: Default::default(),
    }
}

/// The scheduler's Gitea client, with the registration's credentials.
fn gitea_client(cfg: &Config, inputs: &Inputs) -> Result<RunnerClient> {
    let mut config = ClientConfig::new(&cfg.gitea.url);
    config.fetch_timeout = scheduler::FETCH_TIMEOUT;
    config.ca_pem = inputs.gitea_ca_pem.clone();
    let client = RunnerClient::new(config).map_err(|e| {
        Error::bad_input(format!(
            "cannot build a client for Gitea at {}",
            cfg.gitea.url
        ))
        .caused_by(e)
    })?;
    Ok(client.with_credentials(inputs.credentials.clone()))
}

/// Resolves once `stop` turns true: the shutdown signal of the servers.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves Gitea's webhook deliveries on `listener` until `stop`.
fn start_webhook(
    listener: TcpListener,
    receiver: Receiver,
    cfg: &Config,
    stop: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<crate::http1::Stopped>)> {
    let addr = listener
        .local_addr()
        .map_err(|e| Error::external("cannot read the webhook receiver's address").caused_by(e))?;
    let task = tokio::spawn(webhook::serve(
        listener,
        Arc::new(receiver),
        webhook::bounds(cfg.webhook.as_ref().map_or_else(
            || crate::claim::settings::defaults::header_read_timeout().get(),
            |w| w.header_read_timeout.get(),
        )),
        stopped(stop),
    ));
    Ok((addr, task))
}

/// The producer's and the worker's NATS connections (each user has its own permissions).
async fn connect_queue(cfg: &Config) -> Result<(async_nats::Client, async_nats::Client)> {
    let producer = connect_as(cfg, users::PRODUCER).await?;
    let worker = connect_as(cfg, users::WORKER).await?;
    Ok((producer, worker))
}

/// The claim ledger, through the worker's connection (its permissions cover the bucket).
/// The ledger, marking the task history too when its bucket is there; without it (a queue
/// set up by an older `queue init`, no ci-admin to create it) the dispatcher runs without a
/// history and says so once.
async fn with_history(
    ledger: Ledger,
    worker: &async_nats::Client,
    metrics: &Arc<Metrics>,
) -> Ledger {
    let js = async_nats::jetstream::new(worker.clone());
    match History::open(&js, Some(metrics.clone())).await {
        Ok(history) => ledger.with_history(history),
        Err(e) => {
            tracing::warn!(error = %e, "no task history is kept: run `tenantci queue init` (or give the dispatcher the ci-admin password) to create the CI_HISTORY bucket");
            ledger
        }
    }
}

async fn open_ledger(cfg: &Config, worker: &async_nats::Client) -> Result<Ledger> {
    Ledger::open(&async_nats::jetstream::new(worker.clone()))
        .await
        .map_err(|e| {
            Error::external(format!("cannot open the claim ledger at NATS {}", cfg.nats.url))
                .caused_by(e)
                .hint("run `tenantci queue init` (it creates the bucket CI_CLAIMS) and `tenantci queue nats-config` (ci-worker's permissions), then reload nats-server")
        })
}

async fn connect_as(cfg: &Config, user: &str) -> Result<async_nats::Client> {
    let password = permissions::password_file(&cfg.nats.secrets_dir, user);
    connect::connect_trusting(&cfg.nats.url, user, &password, cfg.nats.ca_file.as_deref()).await
}

/// Starts a term when the lease is won and stops it when it is lost, until SIGTERM / SIGINT
/// or the election ends; returns the term still running then, for the drain to stop.
async fn follow_the_lease(
    shared: &Shared,
    health: &Health,
    mut leader_rx: watch::Receiver<bool>,
    me: &str,
) -> Result<Option<Term>> {
    let mut signals = Signals::new()?;
    let mut term: Option<Term> = None;
    loop {
        tokio::select! {
            _ = signals.next() => return Ok(term),
            changed = leader_rx.changed() => {
                if changed.is_err() {
                    return Ok(term);
                }
                let leading = *leader_rx.borrow_and_update();
                health.leader.store(leading, Ordering::SeqCst);
                shared.ctx.metrics.leader(leading);
                match (leading, term.take()) {
                    (true, None) => {
                        tracing::info!(identity = %me, "acquired the scheduler lease; starting a term");
                        term = Some(Term::start(shared.clone()));
                    }
                    (false, Some(t)) => {
                        tracing::warn!(identity = %me, "lost the scheduler lease; stopping the term");
                        t.stop().await;
                        shared.ctx.registry.clear();
                    }
                    (_, t) => term = t,
                }
            }
        }
    }
}

/// Waits for the status API to finish its requests, but not for long: a scraper's
/// keep-alive connection must not hold the exit up.
async fn stop_status(mut status_task: tokio::task::JoinHandle<std::io::Result<()>>) {
    if tokio::time::timeout(std::time::Duration::from_secs(2), &mut status_task)
        .await
        .is_err()
    {
        status_task.abort();
    }
}

/// How long start-up retries applying the topology while the servers answer with errors.
const TOPOLOGY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Applies the topology with this config's capacities when ci-admin's password is at hand.
async fn apply_topology(cfg: &Config) -> Result<()> {
    let admin = permissions::password_file(&cfg.nats.secrets_dir, users::ADMIN);
    if !admin.exists() {
        tracing::info!(
            "no ci-admin password in the NATS secrets dir; using the stream and consumers as they are"
        );
        return Ok(());
    }
    let ca = cfg.nats.ca_file.as_deref();
    let client = connect::connect_trusting(&cfg.nats.url, users::ADMIN, &admin, ca).await?;
    let js = async_nats::jetstream::new(client);
    let own = cfg.topology_spec();
    // A cluster that just lost a server answers the stream's and consumers' requests only
    // once their raft groups have leaders again (seconds): a restart then waits, it does not
    // exit. A topology the server refuses for good still fails, after the wait.
    let deadline = tokio::time::Instant::now() + TOPOLOGY_PATIENCE;
    let report = loop {
        // Replicas, stream bounds and max_deliver are `queue init`'s to choose; the
        // dispatcher keeps them (a restart must not undo an operator's --max-deliver).
        let applied = match topology::live_configs(&js, catalog::default_kind()).await {
            Ok((stream, consumer)) => {
                let spec = topology::keeping_init_choices(own.clone(), stream.as_ref(), consumer);
                topology::apply(&js, &spec).await
            }
            Err(e) => Err(e),
        };
        match applied {
            Ok(r) => break r,
            Err(e @ topology::ApplyError::Server { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tracing::warn!(error = %e, "the queue topology cannot be applied yet; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(e) => {
                return Err(Error::external(format!(
                    "cannot apply the queue topology at NATS {}",
                    cfg.nats.url
                ))
                .caused_by(e)
                .hint("check nats-server and the ci-admin password"));
            }
        }
    };
    tracing::info!(stream = %report.stream, change = ?report.stream_change, "queue topology applied");
    Ok(())
}

/// SIGTERM or SIGINT.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let err =
            |e: std::io::Error| Error::external("cannot install signal handlers").caused_by(e);
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(err)?,
            int: signal(SignalKind::interrupt()).map_err(err)?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// `gitea.ca_file`'s PEM, refused at start when it holds no certificate: a wrong file would
/// otherwise surface only as an unknown-issuer handshake at the first FetchTask.
fn gitea_ca(path: &std::path::Path) -> Result<String> {
    tenantci_core::pki::inspect::read_ca_file(
        "the Gitea CA file (gitea.ca_file)",
        path,
        "put the CA certificate (PEM) that signed Gitea's certificate into it, or remove gitea.ca_file when the system's roots trust Gitea",
    )
}

#[cfg(test)]
mod tests {
    use super::advertised_facade_url;

    #[test]
    fn a_facade_url_with_port_0_advertises_the_bound_port() {
        for (configured, advertised) in [
            ("https://127.0.0.1:0", "https://127.0.0.1:41234"),
            ("https://[::1]:0/", "https://[::1]:41234/"),
            (
                "https://dispatch.ci.internal:0/base",
                "https://dispatch.ci.internal:41234/base",
            ),
            // A fixed port or none (443), e.g. a Service in front of every instance: kept.
            ("https://127.0.0.1:8443", "https://127.0.0.1:8443"),
            ("https://127.0.0.1:10", "https://127.0.0.1:10"),
            (
                "https://dispatch.ci.internal",
                "https://dispatch.ci.internal",
            ),
            ("https://[::0]", "https://[::0]"),
        ] {
            assert_eq!(
                advertised_facade_url(configured, 41234),
                advertised,
                "{configured}"
            );
        }
    }
}
