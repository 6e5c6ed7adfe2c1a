//! What every executor gets, whatever its backend: the spec of one task attempt (its
//! capability, the facade, the runner's labels and settings) and the runner's two files,
//! `.runner` (the task's registration at the facade, addressed to the loopback
//! executor-proxy) and `config.yaml`. Pure; each backend puts them where its runner reads them.

use tenantci_core::Secret as Sensitive;
use tenantci_core::{Error, Result};
use tenantci_runner::act_runner::Registration;

use crate::capability::{self, CapabilityKey};
use crate::identity;
use crate::queue::assignment::{Assignment, SealingKey};
use crate::sizing::class::ExecutorClass;
use crate::task::opened::Opened;
use crate::task_id::TaskId;

/// The label naming the Gitea task an executor's objects belong to.
pub const TASK_ID_LABEL: &str = "tenantci.io/task-id";

/// The label naming the attempt they belong to.
pub const ATTEMPT_LABEL: &str = "tenantci.io/attempt";

/// The resource class of an executor (and of a warm pool's pause Pod).
pub const CLASS_LABEL: &str = "tenantci.io/class";

/// The runner's registration file, `.runner` (also its key in a Pod's Secret): the assignment
/// id, the capability and the facade's address, so it is secret.
pub const RUNNER_KEY: &str = ".runner";

/// The runner's config file (no secret in it; kept in the Secret to make one object per task).
pub const CONFIG_KEY: &str = "config.yaml";

/// The executor-proxy's address beside every runner (in a Pod or a VM), and so the
/// `.runner` address.
pub const PROXY_LISTEN: &str = "127.0.0.1:8431";

/// An image reference pinned by digest (`repo@sha256:<64 hex>`); a tag can change under us.
pub fn check_image_digest(image: &str) -> Result<()> {
    let ok = image.split_once("@sha256:").is_some_and(|(repo, digest)| {
        !repo.is_empty()
            && digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    });
    if ok {
        Ok(())
    } else {
        Err(Error::bad_input(format!("the executor image `{image}` is not pinned by digest"))
            .hint("pass it as IMAGE@sha256:<64 hex digits> (e.g. `docker buildx imagetools inspect IMAGE` prints the digest); a tag can be moved under a running dispatcher"))
    }
}

/// What one executor needs.
#[derive(Debug, Clone)]
pub struct ExecutorSpec {
    /// The dispatcher's namespace, where Pod executors are created.
    pub namespace: String,
    /// The Gitea task id.
    pub task_id: TaskId,
    /// The attempt (1: the first executor).
    pub attempt: u32,
    /// The assignment id: the executor's runner uuid at the facade.
    pub assignment_id: String,
    /// The task's capability: the executor's runner token at the facade.
    pub capability: String,
    /// The facade's URL, as the executor-proxy reaches it.
    pub facade_url: String,
    /// The CA certificate (PEM) the executor-proxy verifies the facade with (identity off).
    pub facade_ca_pem: String,
    /// Where the executor-proxy sends what is not the RunnerService.
    pub gitea: GiteaForExecutors,
    /// The task's runs-on labels (names; the execution mode is added here).
    pub labels: Vec<String>,
    /// The runner's name, written into `.runner`.
    pub runner_name: String,
    /// Images, runner binary, resources and placement from the dispatcher config (the
    /// task's class applied).
    pub executor: crate::sizing::ExecutorSettings,
    /// The task's resource class (None: the dispatcher has none).
    pub class: Option<ExecutorClass>,
    /// Executor identity on: the task's SPIFFE ID and the facade's.
    pub identity: Option<ExecutorIdentity>,
    /// The shared cache on: the task's grant (`cache::grant`), in the runner's
    /// `cache.external_server` URL.
    pub cache_grant: Option<String>,
}

/// Gitea as executors reach it through their proxy: `gitea.url` and, when Gitea's certificate
/// is signed by a private CA, that CA (`gitea.ca_file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GiteaForExecutors {
    /// Gitea's URL (`gitea.url`).
    pub url: String,
    /// Gitea's private CA certificate (PEM); None: the system's roots.
    pub ca_pem: Option<String>,
}

/// The SPIFFE IDs of one executor (identity on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorIdentity {
    /// What the executor presents (its task's ID, bound into the capability).
    pub spiffe_id: String,
    /// What the executor accepts from the facade.
    pub facade_id: String,
}

/// What every executor of this dispatcher gets.
#[derive(Clone)]
pub struct ExecutorTemplate {
    /// The dispatcher's namespace.
    pub namespace: String,
    /// The facade's URL as executors reach it.
    pub facade_url: String,
    /// The CA certificate (PEM) executors verify the facade with (identity off).
    pub facade_ca_pem: String,
    /// Gitea as executors reach it.
    pub gitea: GiteaForExecutors,
    /// The runner's name, written into `.runner`.
    pub runner_name: String,
    /// The `[executor]` section; each task's class is applied over it.
    pub executor: crate::sizing::ExecutorSettings,
    /// Makes each attempt's capability.
    pub capability_key: CapabilityKey,
    /// Opens each assignment once (`Opened`), and seals a replacement's attempt.
    pub sealing_key: SealingKey,
    /// Executor identity on: the IDs are rendered from each task's Gitea context.
    pub identity: Option<identity::Parsed>,
    /// The shared cache on: how long a grant opens it from its executor's start
    /// (`cache.grant_lifetime`).
    pub cache_grant_lifetime: Option<std::time::Duration>,
}

impl ExecutorTemplate {
    /// `a` opened, its class resolved (see [`Opened::open`]).
    pub fn open(&self, a: &Assignment) -> Result<Opened, String> {
        Opened::open(&self.sealing_key, &self.executor.classes, a)
    }

    /// Attempt `attempt` of the task whose stored assignment is `sealed` (JSON): sealed again
    /// for it and opened. An error is why it cannot be started: the caller reports FAILURE.
    pub fn next_attempt(
        &self,
        sealed: &[u8],
        attempt: u32,
    ) -> Result<(Assignment, Opened), String> {
        let a = Assignment::from_json(sealed)
            .map_err(|e| format!("the stored assignment does not decode ({e})"))?;
        self.open(&a)?.next_attempt(&self.sealing_key, attempt)
    }

    /// The SPIFFE ID the executor of `o` must present (None: identity off). An error is a task
    /// that can have no ID (its context lacks the repository or job, or they make no ID).
    fn spiffe_id(&self, o: &Opened) -> Result<Option<ExecutorIdentity>, String> {
        let Some(settings) = &self.identity else {
            return Ok(None);
        };
        let id = identity::task_id(settings, &o.gitea_task)?;
        Ok(Some(ExecutorIdentity {
            spiffe_id: id.to_string(),
            facade_id: settings.facade_id.to_string(),
        }))
    }

    /// The cache grant of the executor of `o`, valid from now (None: the cache is off). An
    /// error is a task whose context names no repository or runtime token.
    fn cache_grant(&self, o: &Opened) -> Result<Option<String>, String> {
        let Some(lifetime) = self.cache_grant_lifetime else {
            return Ok(None);
        };
        let scope = crate::cache::grant::task_cache(&o.gitea_task)?;
        let expires = time::OffsetDateTime::now_utc().unix_timestamp() + lifetime.as_secs() as i64;
        Ok(Some(crate::cache::grant::mint(
            &self.capability_key,
            o.task,
            o.attempt,
            expires,
            &scope,
        )))
    }

    /// The executor of one task attempt, sized and placed by the class the scheduler picked,
    /// with its capability (bound to its SPIFFE ID when identity is on) and its cache grant.
    /// An error is why it will never start (the caller reports FAILURE with it).
    pub fn spec(&self, o: &Opened) -> Result<ExecutorSpec, String> {
        let identity = self.spiffe_id(o)?;
        let executor = match &o.class {
            Some(c) => self.executor.of_class(c),
            None => self.executor.clone(),
        };
        let bound = identity.as_ref().map(|i| i.spiffe_id.as_str());
        // A task the shared cache cannot serve (its context names no repository or runtime
        // token) runs with the runner's own cache: a cache is worth less than the job.
        let cache_grant = self.cache_grant(o).unwrap_or_else(|why| {
            tracing::warn!(task = o.task.get(), %why, "no shared cache for this task; its runner keeps its own");
            None
        });
        Ok(ExecutorSpec {
            namespace: self.namespace.clone(),
            task_id: o.task,
            attempt: o.attempt,
            assignment_id: capability::assignment_id(o.task, o.attempt),
            capability: self.capability_key.token_for(o.task, o.attempt, bound),
            identity,
            facade_url: self.facade_url.clone(),
            facade_ca_pem: self.facade_ca_pem.clone(),
            gitea: self.gitea.clone(),
            labels: o.labels.clone(),
            runner_name: self.runner_name.clone(),
            executor,
            class: o.class.clone(),
            cache_grant,
        })
    }
}

/// `name:host` for each runs-on name: the job runs in the executor image itself (the Pod has
/// no Docker daemon for `docker://`). Written in the runner's normalised form, because a
/// runner that finds its `.runner` labels differ from the normalised ones rewrites the file,
/// which is a read-only mount here (docs/gitea-protocol.md).
pub fn runner_labels(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            if n.contains(':') {
                n.clone()
            } else {
                format!("{n}:host")
            }
        })
        .collect()
}

/// The runner's config with its registration at `runner_file` and HOME at `home` (the VM
/// backend writes both elsewhere).
pub fn runner_config_at(spec: &ExecutorSpec, runner_file: &str, home: &str) -> String {
    let doc = serde_json::json!({
        "log": {"level": "info"},
        "runner": {
            "file": runner_file,
            "capacity": 1,
            "shutdown_timeout": spec.executor.shutdown_timeout.as_str(),
            "fetch_timeout": "5s",
            "fetch_interval": "1s",
            "fetch_interval_max": "2s",
            "insecure": false,
        },
        "cache": cache_section(spec, home),
        "host": {"workdir_parent": format!("{home}/work")},
    });
    format!(
        "# Generated by tenantci for one task (docs/gitea-protocol.md: the runner in the executor Pod).\n{}",
        serde_yaml::to_string(&doc).expect("the runner config serializes")
    )
}

/// The runner's `cache`: the shared cache through the proxy (act_runner sets the job's
/// `ACTIONS_CACHE_URL` to `external_server` verbatim, so it ends in `/`, which the toolkit
/// expects), or, with the cache off, the runner's own in its HOME.
fn cache_section(spec: &ExecutorSpec, home: &str) -> serde_json::Value {
    match &spec.cache_grant {
        Some(grant) => serde_json::json!({
            "enabled": true,
            "external_server": format!("http://{PROXY_LISTEN}{}/{grant}/", crate::cache::protocol::PREFIX),
        }),
        None => serde_json::json!({"enabled": true, "dir": format!("{home}/.cache/actcache")}),
    }
}

/// `.runner`: the task's registration at the facade (its uuid the assignment id, its token the
/// capability), addressed to the executor-proxy on loopback.
pub fn runner_file(spec: &ExecutorSpec) -> Vec<u8> {
    let runner = Registration {
        warning:
            "This file is generated by tenantci for one task; it is useless after the task ends."
                .into(),
        id: spec.task_id.get(),
        uuid: spec.assignment_id.clone(),
        name: spec.runner_name.clone(),
        token: Sensitive::new(spec.capability.clone()),
        address: format!("http://{PROXY_LISTEN}"),
        labels: runner_labels(&spec.labels),
        ephemeral: true,
    };
    serde_json::to_vec_pretty(&runner).expect("the .runner file serializes")
}

/// Task 42's executor with `attempt`, `assignment_id` and the runs-on labels `self-hosted` and
/// `label`, for the backends' unit tests.
#[cfg(test)]
pub(crate) fn example(attempt: u32, assignment_id: &str, label: &str) -> ExecutorSpec {
    ExecutorSpec {
        namespace: "dynamic-runner".into(),
        task_id: TaskId::new(42),
        attempt,
        assignment_id: assignment_id.into(),
        capability: "c0ffee".repeat(10),
        facade_url: "https://10.0.0.5:8443".into(),
        facade_ca_pem: "-----BEGIN CERTIFICATE-----\n".into(),
        gitea: GiteaForExecutors {
            url: "https://gitea.example".into(),
            ca_pem: None,
        },
        labels: vec!["self-hosted".into(), label.into()],
        runner_name: "tenantci".into(),
        executor: crate::sizing::ExecutorSettings::with_images(
            format!("gitea/act_runner@sha256:{}", "a".repeat(64)),
            format!("tenantci@sha256:{}", "b".repeat(64)),
        ),
        class: None,
        identity: None,
        cache_grant: None,
    }
}
