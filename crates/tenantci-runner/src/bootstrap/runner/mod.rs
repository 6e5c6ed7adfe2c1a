//! `bootstrap runner --forge gitlab`: runbook 01 steps 2, 4 and 5 plus the runner config of 02,
//! in order, each step's outcome recorded. Two phases, as `dispatch init`:
//!
//! Phase one changes nothing: the flags and names (`check`), config.toml (a regular file of
//! bounded size that parses and takes our entry, in a directory this user can write), the
//! cluster resolved and its apiserver reached, first with a TLS handshake trusting only the
//! serving CA the credential will carry (`resolve`), the sizing, the credential decision and,
//! when it mints, the ClientCA pair, and GitLab reached with the API token when a runner will
//! be created. Any refusal there is exit 2 (3 for a system not reached) with nothing minted,
//! applied, created or written.
//!
//! At the end of phase one a run (not a dry run) takes config.toml's lock
//! (`gitlab::config_lock`) and holds it until config.toml is written; under it, it decides
//! again about the files it writes (the credential, config.toml, the pending-runner record,
//! the runner token): a second run at the same moment waits, then keeps the credential and
//! reuses the runner the first made.
//!
//! Phase two writes, in an order whose every prefix is safe to re-run: the credential (kept
//! on re-run), the RBAC (server-side apply), the pause pods, the runner at GitLab, then
//! GitLab's CA copy and config.toml last, so a config always names files that exist.
//!
//! The work lives in its own modules (`credential`, `tenant::rbac`, `tenant::verify`,
//! `tenant::sizing`, `tenant::prewarm`, `gitlab::token`, `gitlab::ca`, `gitlab::config`,
//! `gitlab::check`). [`run`] is the list of steps; each step is a method of `Run` (the inputs,
//! the resolved cluster and the step recorder) in the submodule that names it: `check` (before
//! any request), `resolve`, `credential`, `cluster` (rbac, verify, sizing, prewarm), `config`
//! (runner token, config.toml) and `final_check` (`runner check` on the written entry). Their
//! pure decisions are functions of their own, unit-tested there.
//!
//! Pause pods ([`PausePods`]) are kept by tenantci's Deployment or, with
//! `--gitlab-native-pause-pods`, by gitlab-runner itself; never by both: switching to native
//! removes the Deployment, and a Deployment run refuses while config.toml still has the
//! runner keep its own (switching back is the explicit `--remove-gitlab-native-pause-pods`).

mod check;
mod cluster;
mod config;
mod credential;
mod final_check;
mod resolve;

use std::path::PathBuf;

use serde::Serialize;

use crate::credential::CredentialFiles;
pub use crate::gitlab::token::TokenSource;
use crate::gitlab::{self, ca::GitlabCa, config::entry::NativePausePods, config_lock};
use crate::tenant::sizing::JobPodRequests;
use resolve::Resolved;
use tenantci_core::Result;
use tenantci_core::kube_client as client;

/// Where the cluster comes from.
#[derive(Debug, Clone)]
pub enum Target {
    /// Resolve through gateway.json and the admin apiserver.
    StateDir {
        /// The gateway's state directory, whose gateway.json names the admin apiserver.
        state_dir: PathBuf,
        /// The tenant cluster's name at the gateway.
        cluster: String,
    },
    /// Everything given directly.
    Direct {
        /// The tenant apiserver's URL.
        server: String,
        /// The CA that signed the apiserver's serving certificate (the credential's `ca.crt`).
        server_ca: PathBuf,
        /// The ClientCA's certificate, which signs the runner's credential.
        client_ca_cert: PathBuf,
        /// The ClientCA's private key.
        client_ca_key: PathBuf,
        /// The tenant-admin kubeconfig that applies the RBAC.
        tenant_kubeconfig: PathBuf,
        /// The tenant cluster's name (names the defaults and appears in the report).
        cluster: String,
    },
}

/// Everything `bootstrap runner` needs, from the CLI's flags; [`run`] takes it.
pub struct Inputs {
    /// Where the cluster comes from.
    pub target: Target,
    /// The tenant-admin kubeconfig that applies the RBAC; `None` takes the target's (the state
    /// directory's, or [`Target::Direct`]'s).
    pub tenant_kubeconfig: Option<PathBuf>,
    /// The runner's name: its config.toml entry's `name`, by which a re-run finds its entry, token
    /// and pending-runner record.
    pub runner_name: String,
    /// The namespace job pods run in; the runner's RoleBinding and the pause pods are there.
    pub namespace: String,
    /// The credential's organization and the group the runner's bindings grant to; it also
    /// names the ClusterRole and the RoleBinding.
    pub group: String,
    /// The credential's common name: the Kubernetes user the runner authenticates as.
    pub common_name: String,
    /// Where the credential's files (`ca.crt`, `tls.crt`, `tls.key`, `kubeconfig`) are kept or
    /// minted.
    pub credential_dir: PathBuf,
    /// gitlab-runner's config.toml.
    pub config_path: PathBuf,
    /// The GitLab URL the config.toml entry names (`url`).
    pub gitlab_url: String,
    /// Where the runner token comes from: given, in a file, or created through GitLab's API.
    pub token: TokenSource,
    /// GitLab's CA, handed on to gitlab-runner as `tls-ca-file`.
    pub gitlab_ca: Option<GitlabCa>,
    /// The job pod's requests: checked against the node image, and the size of tenantci's pause
    /// pods.
    pub job: JobPodRequests,
    /// gitlab-runner resource keys (cpu_request, memory_limit, ...) to quantities.
    pub resources: std::collections::BTreeMap<String, String>,
    /// How many pause pods tenantci's Deployment keeps (`--prewarm N`; 0 keeps the objects at
    /// zero replicas); `None` leaves the Deployment as it is. gitlab-runner's own pause pods take
    /// their count from [`PausePods::GitlabNative`].
    pub prewarm: Option<i32>,
    /// Who keeps the pause pods: tenantci's Deployment or gitlab-runner.
    pub pause_pods: PausePods,
    /// The image of tenantci's pause pods.
    pub pause_pod_image: String,
    /// The credential's lifetime as a Go duration; `None` for the default (720h). Only used when
    /// minting.
    pub valid_for: Option<String>,
    /// Mint a new credential even when the one on disk is still good (the old files are moved
    /// aside).
    pub rotate: bool,
    /// Decide and report without writing a file or changing an object (server-side dry runs).
    pub dry_run: bool,
    /// Take over a config.toml entry of our name that uses another executor.
    pub force: bool,
}

/// Who keeps the `--prewarm N` pause pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PausePods {
    /// tenantci's Deployment (`tenant::prewarm`); config.toml's autoscaler table is not
    /// touched.
    Deployment,
    /// gitlab-runner's own autoscaler (`[runners.kubernetes.autoscaler]`, Runner 18.10+):
    /// no Deployment, and the runner's RBAC gets deployments and priorityclasses.
    GitlabNative(NativePausePods),
    /// Leaving native mode: remove tenantci's autoscaler keys and the runner's pause-pod RBAC;
    /// with `--prewarm N` tenantci's Deployment takes over.
    LeaveGitlabNative,
}

pub use crate::steps::Step;
use crate::steps::Steps;

/// The hand-back (runbook 01's "what 02 needs"), `-o json`'s shape.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    /// The tenant cluster's name.
    pub cluster: String,
    /// The tenant apiserver's URL, as the credential's kubeconfig and config.toml name it.
    pub server: String,
    /// The credential's files (absolute paths, as config.toml names them).
    pub credential: CredentialFiles,
    /// The credential's common name (the Kubernetes user).
    pub common_name: String,
    /// The credential's organization, bound by the ClusterRoleBinding.
    pub group: String,
    /// The namespace job pods run in.
    pub namespace: String,
    /// The config.toml written (or, in a dry run, that would be).
    pub config: PathBuf,
    /// The runner's name in config.toml.
    pub runner_name: String,
    /// Whether this was a dry run (nothing written, nothing changed).
    pub dry_run: bool,
    /// Each step's outcome, in the order run.
    pub steps: Vec<Step>,
    /// Requests this run's steps sent to the admin and tenant apiservers.
    pub apiserver_requests: u64,
    /// Requests of the final check (access reviews with the runner's own credential).
    pub check_requests: u64,
    /// Always [`LOOPBACK_WARNING`].
    pub warning: &'static str,
}

/// The hand-back's warning: the tenant apiserver listens on this host's loopback, so gitlab-runner
/// must run here.
pub const LOOPBACK_WARNING: &str = "the tenant apiserver binds loopback on this host: gitlab-runner must run here. A GitLab Runner on another VM cannot reach it, and publishing an authenticated front for the apiserver is a deliberate trust-boundary change (docs/runbooks/gitlab-runner.md), not a config step.";

/// What every step reads and records to: the inputs, the cluster they resolved to, and the
/// step list. Values one step hands to a later one (the admin client, the credential) are
/// passed as arguments, so each step says what it needs.
struct Run<'a> {
    inputs: &'a Inputs,
    /// `[group]`: the credential's organizations and the groups the access reviews ask for.
    groups: Vec<String>,
    cluster: Resolved,
    steps: Steps<'a>,
}

/// Runs every step; `on_step` sees each line as it completes (the CLI prints them).
pub async fn run(inputs: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let requests_before = client::requests();
    // Phase one: every local input and every system this run needs, nothing written.
    let token = check::check_inputs(inputs)?;
    let ca = gitlab::ca::plan(inputs.gitlab_ca.as_ref(), &inputs.credential_dir)?;
    let mut steps = Steps::new(&mut on_step, inputs.dry_run);
    let (cluster, admin) = resolve::resolve(inputs, &mut steps).await?;
    let mut run = Run {
        inputs,
        groups: vec![inputs.group.clone()],
        cluster,
        steps,
    };
    let sizing = run.check_sizing()?;
    // Refused early, without the lock, unless the refusal may be another run's write in
    // progress: a credential directory with some of its files is decided again under it.
    if let Err(e) = run.plan_local(&ca)
        && !run.credential_being_written()
    {
        return Err(e);
    }
    token.check_access().await?;
    // One writer per config.toml from here until it is written. Every decision is taken
    // again under the lock: a run that waited for another decides from what that one wrote
    // (its credential kept, its runner reused), having refused bad input (and an unreachable
    // GitLab) without it, so a refusal leaves no lock file.
    let lock = config_lock::acquire_unless_dry_run(&inputs.config_path, inputs.dry_run).await?;
    let ca = gitlab::ca::plan(inputs.gitlab_ca.as_ref(), &inputs.credential_dir)?;
    let credential = run.plan_local(&ca)?;
    let token = check::decide_token(inputs)?;
    token.check_access().await?;
    // Phase two: each write safe to re-run after any earlier one (a kept credential, applied
    // objects unchanged, a reused token), config.toml last.
    let credential = run.credential(credential)?;
    let rbac_changed = run.rbac(&admin).await?;
    run.verify(&admin, &credential, rbac_changed).await?;
    run.record_sizing(sizing.as_ref());
    run.prewarm(&admin).await?;
    let token = run.runner_token(token).await?;
    // GitLab is checked when this run talked to it; a given or reused token may be for a
    // GitLab this host does not reach yet, which `runner check` reports on its own.
    let created = token.origin.runner_id().is_some();
    run.write_config(&credential.files, token, &ca)?;
    drop(lock);
    let steps_requests = client::requests() - requests_before;
    run.final_check(created).await?;
    Ok(run.hand_back(credential.files, steps_requests, requests_before))
}

/// The gateway's half of a runner on another host (`bootstrap runner --remote`): the
/// credential, the RBAC and their verification, sizing and pre-warm, as [`run`] does them; no
/// runner token and no config.toml entry, which the runner's host writes itself from the
/// bundle. Safe to re-run: a kept credential, applied objects unchanged.
pub async fn run_remote(inputs: &Inputs, mut on_step: impl FnMut(&Step)) -> Result<HandBack> {
    let requests_before = client::requests();
    check::check_identity(inputs)?;
    if matches!(inputs.pause_pods, PausePods::GitlabNative(_)) {
        return Err(tenantci_core::Error::bad_input(
            "gitlab-runner's own pause pods are kept by the runner's host, not the gateway",
        )
        .hint("drop --gitlab-native-pause-pods here (the remote entry is written by `front unpack`), or use --prewarm N for tenantci's pause-pod Deployment"));
    }
    let mut steps = Steps::new(&mut on_step, inputs.dry_run);
    let (cluster, admin) = resolve::resolve(inputs, &mut steps).await?;
    let mut run = Run {
        inputs,
        groups: vec![inputs.group.clone()],
        cluster,
        steps,
    };
    let sizing = run.check_sizing()?;
    let credential = run.plan_credential()?;
    let credential = run.credential(credential)?;
    let rbac_changed = run.rbac(&admin).await?;
    run.verify(&admin, &credential, rbac_changed).await?;
    run.record_sizing(sizing.as_ref());
    run.prewarm(&admin).await?;
    let steps_requests = client::requests() - requests_before;
    Ok(run.hand_back(credential.files, steps_requests, requests_before))
}

impl Run<'_> {
    /// What this run does with the files it writes (the credential, config.toml), decided
    /// from what they hold now; refused when config.toml cannot take the entry.
    fn plan_local(&self, ca: &gitlab::ca::Plan) -> Result<credential::CredentialPlan> {
        let credential = self.plan_credential()?;
        self.check_config(credential.files(), ca)?;
        Ok(credential)
    }

    fn hand_back(
        self,
        credential: CredentialFiles,
        steps_requests: u64,
        requests_before: u64,
    ) -> HandBack {
        let inputs = self.inputs;
        HandBack {
            cluster: self.cluster.cluster,
            server: self.cluster.server,
            credential,
            common_name: inputs.common_name.clone(),
            group: inputs.group.clone(),
            namespace: inputs.namespace.clone(),
            config: inputs.config_path.clone(),
            runner_name: inputs.runner_name.clone(),
            dry_run: inputs.dry_run,
            steps: self.steps.into_vec(),
            apiserver_requests: steps_requests,
            check_requests: client::requests() - requests_before - steps_requests,
            warning: LOOPBACK_WARNING,
        }
    }
}
