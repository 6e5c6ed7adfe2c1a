//! Step 0: what can be checked before any request, so bad input fails before anything changes.
//! Also decides the runner token (reading its file, or config.toml for a token to reuse) and
//! builds the GitLab client when a runner will be created; creating it is left to the end. The
//! decision is taken twice: here, to refuse bad input early, and under config.toml's lock,
//! where it counts.

use super::{Inputs, PausePods};
use crate::gitlab::config::{merge, write};
use crate::gitlab::token::{self, Prepared};
use tenantci_core::input::shown;
use tenantci_core::pki::policy;
use tenantci_core::{Error, Result};

/// Every input, the token's files and config.toml's pause pods included, refused before the
/// config's lock file is made; [`decide_token`] decides again under the lock.
pub(super) fn check_inputs(inputs: &Inputs) -> Result<Prepared<'_>> {
    check_identity(inputs)?;
    decide_token(inputs)
}

/// The credential's lifetime and subject, and the names the run uses: what a remote runner's
/// half on the gateway needs too (it has no token and no config.toml).
pub(super) fn check_identity(inputs: &Inputs) -> Result<()> {
    if let Some(raw) = &inputs.valid_for {
        policy::parse_valid_for(raw)?;
    }
    policy::check_common_name(&inputs.common_name)?;
    policy::check_organizations(std::slice::from_ref(&inputs.group))?;
    check_names(inputs)
}

/// Under config.toml's lock (`gitlab::config_lock`): what config.toml and the pending-runner
/// record say now, which another run may have written while this one waited.
pub(super) fn decide_token(inputs: &Inputs) -> Result<Prepared<'_>> {
    refuse_double_pause_pods(inputs)?;
    prepare_token(inputs)
}

/// The names the run will use in the cluster and in config.toml: refused here, before the
/// credential is minted, rather than by the apiserver after it.
fn check_names(inputs: &Inputs) -> Result<()> {
    if !tenantci_core::dns::is_label(&inputs.namespace) {
        return Err(Error::bad_input(format!(
            "--namespace `{}` is not a Kubernetes namespace name",
            shown(&inputs.namespace)
        ))
        .hint("use 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit, e.g. gitlab-runner"));
    }
    let cluster = match &inputs.target {
        super::Target::StateDir { cluster, .. } | super::Target::Direct { cluster, .. } => cluster,
    };
    tenantci_core::gateway::layout::validate_cluster_name(cluster)?;
    let name = &inputs.runner_name;
    if name.trim().is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(Error::bad_input(format!(
            "--name `{}` is not a usable runner name",
            shown(name)
        ))
        .hint("use up to 255 printable characters, e.g. tenant-ci"));
    }
    Ok(())
}

/// Under the lock no other run changes config.toml before this one's last step, so deciding
/// about the token now (reusing the token of an earlier run) gives what deciding at the end
/// would.
fn prepare_token(inputs: &Inputs) -> Result<Prepared<'_>> {
    let existing = if inputs.token.reads_config() {
        write::read_existing(&inputs.config_path)?
    } else {
        None
    };
    token::prepare(
        &inputs.token,
        existing.as_deref(),
        &inputs.config_path,
        &inputs.runner_name,
        inputs.dry_run,
    )
}

/// Whether this run asks for tenantci's Deployment to keep pause pods.
fn wants_deployment(pause_pods: &PausePods, prewarm: Option<i32>) -> bool {
    *pause_pods == PausePods::Deployment && prewarm.is_some_and(|n| n > 0)
}

/// tenantci's Deployment and gitlab-runner's own autoscaler would each keep N pause pods,
/// renting twice the headroom: a Deployment run is refused, before anything changes, while
/// our config.toml entry still has the runner keep pause pods. The table is never deleted
/// without being asked (`--remove-gitlab-native-pause-pods`).
fn refuse_double_pause_pods(inputs: &Inputs) -> Result<()> {
    if !wants_deployment(&inputs.pause_pods, inputs.prewarm) {
        return Ok(());
    }
    let Some(text) = write::read_existing(&inputs.config_path)? else {
        return Ok(());
    };
    if merge::keeps_native_pause_pods(&text, &inputs.runner_name) {
        return Err(Error::bad_input(format!(
            "the runner `{}` in `{}` keeps its own pause pods ([runners.kubernetes.autoscaler]), so tenantci's Deployment would rent that headroom twice: pass --gitlab-native-pause-pods to stay native, or --remove-gitlab-native-pause-pods to switch to the Deployment",
            inputs.runner_name,
            inputs.config_path.display()
        )));
    }
    Ok(())
}
