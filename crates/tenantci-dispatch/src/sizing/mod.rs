//! What an executor is given, whatever its backend: the `[executor]` section (images, runner
//! command, placement), its requests and limits ([`resources`]), the resource classes a job's
//! `runs-on` picks ([`class`]) and their warm pools ([`warm`]: the pure plan; [`demand`]: what the
//! leader's actors report into it). The one home of classes: the scheduler picks a class here
//! once, and everything after carries the pick.
//!
//! Pure, no I/O: the pod backend applies the pause Deployments (`backend::pod::pause`).

pub mod class;
pub mod demand;
pub mod resources;
pub mod warm;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde::{Deserialize, Serialize};

use class::ExecutorClass;
use resources::Resources;
use tenantci_core::duration::GoDuration;

/// The `[executor]` section: what every executor runs (images, runner command, shutdown
/// timeout), how large it is (resources, classes) and, for Pods, where it is placed (node
/// selector, tolerations, runtime class) and how its images are pulled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSettings {
    /// The official runner image, pinned by digest (`IMAGE@sha256:<64 hex>`). It runs the job
    /// in host mode, so it holds the job's tools (runbook: the executor image).
    pub image: String,
    /// The tenantci image whose `tenantci executor-proxy` runs beside the runner (the only
    /// holder of the facade CA), pinned by digest.
    pub proxy_image: String,
    /// The runner binary in `image`: `act_runner` (gitea/act_runner), `gitea-runner`
    /// (gitea/runner 1.0 and later) or `forgejo-runner` (Forgejo's runner).
    #[serde(default)]
    pub runner_command: RunnerCommand,
    /// The runner container's requests and limits (defaults: the runbook's node; `init`
    /// derives them from the node image).
    #[serde(default)]
    pub resources: Resources,
    /// How long the runner may finish its job after SIGTERM (its `shutdown_timeout`); the
    /// Pod's grace period adds 15 s for the final reports.
    #[serde(default = "defaults::shutdown_timeout")]
    pub shutdown_timeout: GoDuration,
    /// Pod nodeSelector (e.g. the rented nodes' pool label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations, as in a Pod spec (`{key, operator, value, effect}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Pod runtimeClassName (e.g. a sandboxed runtime for untrusted jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Resource classes (`[[executor.class]]`), selected by a `runs-on` label; none: every
    /// executor is sized by the keys above (`sizing::class`).
    #[serde(default, rename = "class", skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ExecutorClass>,
    /// Pod imagePullSecrets: names of `kubernetes.io/dockerconfigjson` Secrets in the
    /// namespace, for executor and proxy images in a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
}

impl ExecutorSettings {
    /// The two images with every other key at its default.
    pub fn with_images(
        image: impl Into<String>,
        proxy_image: impl Into<String>,
    ) -> ExecutorSettings {
        ExecutorSettings {
            image: image.into(),
            proxy_image: proxy_image.into(),
            runner_command: RunnerCommand::default(),
            resources: Resources::default(),
            shutdown_timeout: defaults::shutdown_timeout(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            runtime_class_name: None,
            classes: Vec::new(),
            image_pull_secrets: Vec::new(),
        }
    }

    /// The executor settings a job of `class` gets: these with the class's size and placement.
    pub fn of_class(&self, class: &ExecutorClass) -> ExecutorSettings {
        let mut x = self.clone();
        x.resources = class.resources(&self.resources);
        if let Some(s) = &class.node_selector {
            x.node_selector = s.clone();
        }
        if let Some(t) = &class.tolerations {
            x.tolerations = t.clone();
        }
        if let Some(r) = &class.runtime_class_name {
            x.runtime_class_name = Some(r.clone());
        }
        x
    }
}

/// The runner binary the executor image ships.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunnerCommand {
    /// `act_runner` (gitea/act_runner); the default.
    #[default]
    #[serde(rename = "act_runner")]
    ActRunner,
    /// `gitea-runner` (gitea/runner 1.0 and later).
    #[serde(rename = "gitea-runner")]
    GiteaRunner,
    /// `forgejo-runner` (Forgejo's runner).
    #[serde(rename = "forgejo-runner")]
    ForgejoRunner,
}

impl RunnerCommand {
    /// The runner a forge's users run: Forgejo's own for Forgejo (it has no `act_runner`
    /// image of its own), act_runner for Gitea. `init`'s default when none is given.
    pub fn of_forge(forge: tenantci_core::forge::Forge) -> RunnerCommand {
        match forge {
            tenantci_core::forge::Forge::Forgejo => RunnerCommand::ForgejoRunner,
            tenantci_core::forge::Forge::Gitea => RunnerCommand::ActRunner,
        }
    }

    /// The binary's name, which is also how the config spells it.
    pub fn binary(self) -> &'static str {
        match self {
            RunnerCommand::ActRunner => "act_runner",
            RunnerCommand::GiteaRunner => "gitea-runner",
            RunnerCommand::ForgejoRunner => "forgejo-runner",
        }
    }

    /// The command line that runs one task and exits, before `--config FILE`: act_runner and
    /// gitea-runner have `daemon --once`; forgejo-runner has no `--once` but `one-job`
    /// (docs/forgejo-protocol.md).
    pub fn run_once(self) -> &'static [&'static str] {
        match self {
            RunnerCommand::ActRunner => &["act_runner", "daemon", "--once"],
            RunnerCommand::GiteaRunner => &["gitea-runner", "daemon", "--once"],
            RunnerCommand::ForgejoRunner => &["forgejo-runner", "one-job"],
        }
    }
}

impl std::str::FromStr for RunnerCommand {
    type Err = String;

    /// The names the config uses (`act_runner`, `gitea-runner`, `forgejo-runner`).
    fn from_str(s: &str) -> Result<Self, String> {
        [
            RunnerCommand::ActRunner,
            RunnerCommand::GiteaRunner,
            RunnerCommand::ForgejoRunner,
        ]
        .into_iter()
        .find(|r| r.binary() == s)
        .ok_or_else(|| {
            format!("`{s}` is not a runner command (act_runner, gitea-runner or forgejo-runner)")
        })
    }
}

/// The section's defaults (`init` uses them for keys it has no flag for).
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// 30 s.
    pub fn shutdown_timeout() -> GoDuration {
        Duration::from_secs(30).into()
    }
}
