//! The raw VM path: no queue, no second process. A runner registered here, `n` vm jobs queued,
//! then one loop: FetchTask, seal as the scheduler does, the Lifecycle API create with
//! `desired::desired`; optionally the worker's list-by-metadata first (what makes a redelivery
//! find its sandbox instead of creating a second), timed on its own.

use std::time::{Instant, SystemTime};

use chrono::{DateTime, Utc};
use prost::Message as _;
use tenantci_core::forge::gitea::client::{ClientConfig, Credentials, RunnerClient, TasksVersion};
use tenantci_core::forge::gitea::proto::{RegisterRequest, Runner};
use tenantci_core::opensandbox::ListFilter;
use tenantci_dispatch::backend::vm::desired;
use tenantci_dispatch::capability;
use tenantci_dispatch::claim::routing;
use tenantci_dispatch::config::Config;
use tenantci_dispatch::queue::assignment::{Assignment, SealingKey};
use tenantci_dispatch::task::spec::ExecutorTemplate;
use tenantci_dispatch::task_id::TaskId;

use crate::report::{PathResult, Stats, millis_between, stats};
use crate::world::World;
use crate::{DEADLINE, NAMESPACE, no_cpu, progress};

/// What the raw loop measured; `list` only when it listed before creating.
pub struct Raw {
    pub path: PathResult,
    pub list: Option<Stats>,
}

/// Per task: FetchTask returned, create returned (the claim comes from the double later), and
/// how long the list call took.
struct Times {
    task: i64,
    fetched: DateTime<Utc>,
    created: DateTime<Utc>,
    list_ms: f64,
}

fn now() -> DateTime<Utc> {
    SystemTime::now().into()
}

/// `n` jobs that only this loop's runner (its own `label`) can claim, then the loop.
pub async fn run(w: &mut World, n: usize, label: &str, list_first: bool) -> Raw {
    progress(&format!("raw vm path ({label}), {n} tasks"));
    let cfg = Config::load(&w.config).unwrap();
    let vm = cfg.vm.clone().expect("dispatch init wrote [vm]");
    let (runner, gitea) = register(w, label).await;
    for _ in 0..n {
        w.enqueue(&["self-hosted", "vm", label]).await;
    }
    let template = executor_template(&cfg);
    let mut done: Vec<Times> = Vec::new();
    let mut version = TasksVersion::default();
    let until = Instant::now() + DEADLINE;
    while done.len() < n {
        assert!(Instant::now() < until, "the raw vm path timed out");
        let Some(task) = gitea.poll(&mut version).await.unwrap() else {
            continue;
        };
        let fetched = now();
        let labels = routing::runs_on(task.workflow_payload.as_deref().unwrap_or_default());
        let backend = routing::route(&labels);
        // Sealed and opened: the raw path has no queue, but pays the scheduler's and the
        // worker's CPU.
        let sealed = Assignment::seal(
            &template.sealing_key,
            &task.id.to_string(),
            1,
            backend,
            labels,
            &task.encode_to_vec(),
        )
        .unwrap();
        let spec = template
            .open(&sealed)
            .and_then(|o| template.spec(&o))
            .expect("no classes: every task has a spec");
        let listing = Instant::now();
        if list_first {
            let filter = ListFilter {
                states: Vec::new(),
                metadata: desired::of_task(runner.id, TaskId::new(task.id)),
            };
            let found = w.sandboxes.list(&filter).await.unwrap();
            assert!(found.is_empty(), "task {} has a sandbox already", task.id);
        }
        let list_ms = listing.elapsed().as_secs_f64() * 1000.0;
        w.sandboxes
            .create(&desired::desired(&spec, &vm, runner.id, None))
            .await
            .unwrap();
        done.push(Times {
            task: task.id,
            fetched,
            created: now(),
            list_ms,
        });
    }
    let result = summarize(w, n, &done, list_first).await;
    w.clear_sandboxes().await;
    result
}

/// Step 1: registers this loop's runner (its own `label`); it and a client with its credentials.
async fn register(w: &World, label: &str) -> (Runner, RunnerClient) {
    let runner = RunnerClient::new(ClientConfig::new(&w.gitea.url))
        .unwrap()
        .register(&RegisterRequest {
            name: label.into(),
            token: w.gitea.registration_token.clone(),
            labels: vec!["self-hosted".into(), "vm".into(), label.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let gitea = RunnerClient::new(ClientConfig::new(&w.gitea.url))
        .unwrap()
        .with_credentials(Credentials::from_runner(&runner));
    (runner, gitea)
}

/// Step 2: the executor template from the dispatcher's own files.
fn executor_template(cfg: &Config) -> ExecutorTemplate {
    // The dispatcher's own files: the same key, CA and executor settings.
    let capability_key = capability::load_key(&cfg.facade.capability_key_file).unwrap();
    let sealing_key = SealingKey::load_or_create(&cfg.nats.sealing_key_file).unwrap();
    ExecutorTemplate {
        namespace: NAMESPACE.into(),
        facade_url: cfg.facade.url.clone(),
        facade_ca_pem: std::fs::read_to_string(&cfg.facade.ca_cert_file).unwrap(),
        gitea: tenantci_dispatch::task::spec::GiteaForExecutors {
            url: cfg.gitea.url.clone(),
            ca_pem: None,
        },
        runner_name: cfg.gitea.runner_name.clone(),
        executor: cfg.executor.clone(),
        capability_key,
        sealing_key,
        identity: None,
        cache_grant_lifetime: None,
    }
}

async fn summarize(w: &World, n: usize, done: &[Times], list_first: bool) -> Raw {
    let claimed = w.claimed_at(done.iter().map(|d| d.task)).await;
    let (mut total, mut first, mut second, mut list) = (vec![], vec![], vec![], vec![]);
    for d in done {
        let c = claimed[&d.task];
        total.push(millis_between(c, d.created));
        first.push(millis_between(c, d.fetched));
        second.push(millis_between(d.fetched, d.created));
        list.push(d.list_ms);
    }
    let window = millis_between(
        *claimed.values().min().unwrap(),
        done.last().unwrap().created,
    );
    Raw {
        path: PathResult {
            tasks: n,
            per_sec: n as f64 / (window / 1000.0),
            total: stats(total),
            first: stats(first),
            second: stats(second),
            max_backlog: 0,
            cpu: no_cpu(),
        },
        list: list_first.then(|| stats(list)),
    }
}
