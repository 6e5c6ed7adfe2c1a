//! The sections the scheduler claims by: `[gitea]` (the forge, the registration, how often to
//! ask), `[webhook]` (the `workflow_job` receiver as a nudge) and `[waiting_jobs]` (Forgejo's
//! waiting-jobs API as a nudge and a demand metric).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use tenantci_core::Result;
use tenantci_core::duration::GoDuration;

/// The `[gitea]` section: the forge, the scheduler's registration at it, and how often it is
/// asked for tasks and kept informed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gitea {
    /// Gitea's base URL (the RunnerService is under `<url>/api/actions`).
    pub url: String,
    /// The forge at `url`: `gitea` or `forgejo` (`init` reads it from the version API, or
    /// takes `--forge`). It decides what one FetchTask asks for (`forge::kind`).
    #[serde(default)]
    pub forge: tenantci_core::forge::Forge,
    /// The registration's name at Gitea (also the executors' runner name).
    pub runner_name: String,
    /// Labels registered at Gitea; a task's `runs-on` picks the backend (a backend's own
    /// label, else the default backend).
    pub labels: Vec<String>,
    /// `{id, uuid, token, name}` of the registration, 0600 (written by `init`).
    pub credential_file: PathBuf,
    /// FetchTask interval while a slot is free and Gitea had nothing (Go duration).
    #[serde(default = "defaults::fetch_interval")]
    pub fetch_interval: GoDuration,
    /// Longest FetchTask interval after a long idle spell.
    #[serde(default = "defaults::fetch_interval_idle")]
    pub fetch_interval_idle: GoDuration,
    /// Non-final UpdateTask for claimed tasks whose executor has not reported yet (Gitea fails
    /// tasks not updated for 10 minutes).
    #[serde(default = "defaults::keepalive_interval")]
    pub keepalive_interval: GoDuration,
    /// The CA (PEM) that signed Gitea's certificate, when it is not in the system's trust
    /// store: trusted by the dispatcher's own calls and by every executor's proxy on its way
    /// to Gitea (checkout, artifacts, the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// The webhook receiver (`POST /webhooks/gitea`, plain HTTP: deliveries are authenticated by
/// their HMAC signature, and one only ever triggers a FetchTask).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// Where the receiver listens; Gitea must reach it (directly or through a proxy).
    pub listen: SocketAddr,
    /// The webhook secret as typed into Gitea (a trailing newline is ignored), 0600.
    pub secret_file: PathBuf,
    /// FetchTask interval while a webhook is configured: the safety net for a lost delivery
    /// (replaces `gitea.fetch_interval` / `_idle`).
    #[serde(default = "defaults::webhook_fetch_interval")]
    pub fetch_interval: GoDuration,
    /// Nudged FetchTasks after the burst: at most one per this (`claim::nudge`).
    #[serde(default = "defaults::nudge_spacing")]
    pub nudge_spacing: GoDuration,
    /// Nudged FetchTasks that may go at once, before the spacing applies (at least 1).
    #[serde(default = "defaults::nudge_burst")]
    pub nudge_burst: u32,
    /// How long a client may take to send a delivery's headers (or keep a connection idle)
    /// before the receiver closes its connection (`http1`).
    #[serde(default = "defaults::header_read_timeout")]
    pub header_read_timeout: GoDuration,
}

impl Webhook {
    /// A receiver on `listen` with the secret in `secret_file`, tuned by the defaults.
    pub fn new(listen: SocketAddr, secret_file: PathBuf) -> Self {
        Webhook {
            listen,
            secret_file,
            fetch_interval: defaults::webhook_fetch_interval(),
            nudge_spacing: defaults::nudge_spacing(),
            nudge_burst: defaults::nudge_burst(),
            header_read_timeout: defaults::header_read_timeout(),
        }
    }

    /// The section's own checks (`Config::validate` calls them).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.nudge_burst == 0 {
            return Err(
                "has webhook.nudge_burst = 0 (at least 1: a delivery's FetchTask goes at once)"
                    .into(),
            );
        }
        if self.header_read_timeout.get().is_zero() {
            return Err("has webhook.header_read_timeout = 0s (more than 0: every delivery's connection would be closed at once)".into());
        }
        Ok(())
    }

    /// How often nudges may cause a FetchTask.
    pub fn nudge_budget(&self) -> crate::claim::nudge::NudgeBudget {
        crate::claim::nudge::NudgeBudget {
            spacing: self.nudge_spacing.get(),
            burst: self.nudge_burst,
        }
    }
}

/// Forgejo's waiting-jobs API (`forge::waiting`), read by the leader: a job it can serve wakes
/// the claim loop, and the waiting jobs are exported by their labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitingJobs {
    /// Whose jobs: `admin`, `user`, `orgs/ORG` or `repos/OWNER/REPO` (the scope the runner
    /// is registered in).
    pub scope: String,
    /// A Forgejo API token that may read that scope's runners (read:admin, read:user,
    /// read:organization or read:repository), 0600.
    pub token_file: PathBuf,
    /// How often the list is read.
    #[serde(default = "defaults::waiting_jobs_interval")]
    pub interval: GoDuration,
}

impl WaitingJobs {
    /// The parsed scope (`validate` has checked it).
    pub fn scope(&self) -> std::result::Result<tenantci_core::forge::waiting::Scope, String> {
        self.scope.parse()
    }

    /// The API token, from its file: private (0600), bounded, not empty. `run` reads it at
    /// start, `init` before it writes the section.
    pub fn read_token(&self) -> Result<tenantci_core::secret::Secret> {
        const WHAT: &str = "the Forgejo API token file (waiting_jobs.token_file)";
        tenantci_core::input::check_private(WHAT, &self.token_file)?;
        Ok(tenantci_core::secret::Secret::new(
            tenantci_core::secret::read_file(
                WHAT,
                &self.token_file,
                Some(
                    "put a Forgejo API token that may read the scope's runners into it (runbook: Forgejo)",
                ),
            )?,
        ))
    }
}

/// The section's defaults (`init` uses them for keys it has no flag for).
pub mod defaults {
    use std::time::Duration;

    use tenantci_core::duration::GoDuration;

    /// 200 ms while a slot is free and Gitea had nothing.
    pub fn fetch_interval() -> GoDuration {
        Duration::from_millis(200).into()
    }
    /// 2 s after a long idle spell, as act_runner's.
    pub fn fetch_interval_idle() -> GoDuration {
        Duration::from_secs(2).into()
    }
    /// 60 s: ten keep-alives within Gitea's 10 minutes.
    pub fn keepalive_interval() -> GoDuration {
        Duration::from_secs(60).into()
    }
    /// 5: jobs pushed together by several pipelines are each picked up at once; a FetchTask
    /// that returns a task is followed by the next without waiting for any nudge anyway.
    pub fn nudge_burst() -> u32 {
        5
    }
    /// 200 ms: a flood of deliveries costs Gitea no more than polling alone does at its
    /// default `gitea.fetch_interval` (5 FetchTask/s).
    pub fn nudge_spacing() -> GoDuration {
        Duration::from_millis(200).into()
    }
    /// 5 s: as the webhook's safety-net poll; a list call costs Forgejo one indexed query.
    pub fn waiting_jobs_interval() -> GoDuration {
        Duration::from_secs(5).into()
    }
    /// 5 s: 0.2 FetchTask/s idle, 2.5x less than one act_runner (2 s), while a lost delivery
    /// costs at most 5 s of pickup latency (2.5 s on average), no worse than act_runner.
    pub fn webhook_fetch_interval() -> GoDuration {
        Duration::from_secs(5).into()
    }
    /// 20 s, as the executor proxy's: Gitea sends a delivery's headers at once, so only a
    /// stalled or hostile client ever waits this long.
    pub fn header_read_timeout() -> GoDuration {
        Duration::from_secs(20).into()
    }
}
