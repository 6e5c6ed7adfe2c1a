//! Steps 3 to 5, in the tenant cluster: the runner's RBAC, the verification of both halves,
//! the sizing line and the pause pods. The lines they report are computed by the pure
//! functions at the end of this file.

use super::credential::{Credential, read_cert};
use super::{Inputs, PausePods, Run};
use crate::gitlab::config::entry::NativePausePods;
use crate::steps::Outcome;
use crate::tenant::apply::{Applied, summary};
use crate::tenant::prewarm::{self, NativeSwitch, PrewarmSpec};
use crate::tenant::rbac::{self, RbacSpec};
use crate::tenant::sizing::SizingReport;
use crate::tenant::verify;
use tenantci_core::Result;
use tenantci_core::kube_client as client;

impl Run<'_> {
    /// Applies the runner's RBAC with the tenant-admin client; leaving native pause pods also
    /// removes their objects. Returns whether anything changed.
    pub(super) async fn rbac(&mut self, admin: &kube::Client) -> Result<bool> {
        let spec = rbac_spec(self.inputs);
        let dry_run = self.inputs.dry_run;
        let mut applied = rbac::apply(admin, &rbac::desired(&spec), dry_run).await?;
        if self.inputs.pause_pods == PausePods::LeaveGitlabNative {
            let removed = rbac::remove_pause_pod_objects(admin, &spec, dry_run).await?;
            applied.extend(removed.into_iter().map(absent_as_unchanged));
        }
        let (outcome, detail) = summary(&applied);
        self.steps.act("rbac", outcome, detail);
        Ok(outcome != Outcome::Unchanged)
    }

    /// Both halves: the certificate's subject matches the binding, and access reviews plus one
    /// real request with the credential. Needs the credential on disk (not in a dry run that
    /// would mint it).
    pub(super) async fn verify(
        &mut self,
        admin: &kube::Client,
        credential: &Credential,
        rbac_changed: bool,
    ) -> Result<()> {
        let files = &credential.files;
        if !files.cert.exists() {
            self.steps
                .record("verify", Outcome::Skipped, "dry run: no credential yet");
            return Ok(());
        }
        let inputs = self.inputs;
        let cert = read_cert("the credential", &files.cert)?;
        verify::check_subject(&cert, &inputs.common_name, &inputs.group)?;
        let runner = client::from_kubeconfig(&files.kubeconfig).await?;
        let reviews = verify::verify(
            admin,
            &runner,
            &inputs.common_name,
            &self.groups,
            &inputs.namespace,
            credential.minted || rbac_changed,
            is_native(&inputs.pause_pods),
        )
        .await?;
        let detail = format!(
            "subject {}; {} access review(s) as expected; list pods with the credential ok",
            cert.subject,
            reviews.len()
        );
        self.steps.record("verify", Outcome::Ok, detail);
        Ok(())
    }

    /// Records the check made before anything was written ([`Run::check_sizing`]).
    pub(super) fn record_sizing(&mut self, report: Option<&SizingReport>) {
        let (outcome, detail) = sizing_line(report);
        self.steps.record("sizing", outcome, detail);
    }

    /// The pause pods: left to gitlab-runner (removing tenantci's Deployment), or tenantci's
    /// Deployment with `--prewarm N`; nothing without either.
    pub(super) async fn prewarm(&mut self, admin: &kube::Client) -> Result<()> {
        match (&self.inputs.pause_pods, self.inputs.prewarm) {
            (PausePods::GitlabNative(native), _) => self.leave_to_gitlab(admin, native).await,
            (_, Some(replicas)) => self.apply_pause_deployment(admin, replicas).await,
            (_, None) => Ok(()),
        }
    }

    async fn leave_to_gitlab(
        &mut self,
        admin: &kube::Client,
        native: &NativePausePods,
    ) -> Result<()> {
        let inputs = self.inputs;
        let switch = prewarm::remove_for_native(admin, &inputs.namespace, inputs.dry_run).await?;
        let detail = native_prewarm_line(native.count, &inputs.namespace, switch, inputs.dry_run);
        self.steps.record("prewarm", Outcome::Native, detail);
        Ok(())
    }

    async fn apply_pause_deployment(&mut self, admin: &kube::Client, replicas: i32) -> Result<()> {
        let spec = prewarm_spec(self.inputs, replicas);
        let report = prewarm::apply(admin, &spec, self.inputs.dry_run).await?;
        let detail = format!(
            "{} pause pod(s) of {} CPU / {}",
            report.replicas, report.cpu, report.memory
        );
        self.steps.act("prewarm", report.action, detail);
        Ok(())
    }
}

fn is_native(pause_pods: &PausePods) -> bool {
    matches!(pause_pods, PausePods::GitlabNative(_))
}

/// The role and binding are named after the group: one flag, so they cannot disagree.
fn rbac_spec(inputs: &Inputs) -> RbacSpec {
    RbacSpec {
        namespace: inputs.namespace.clone(),
        role_name: inputs.group.clone(),
        group: inputs.group.clone(),
        pause_pods: is_native(&inputs.pause_pods),
    }
}

/// Absent objects are what a re-run of a removal expects; only a deletion is a change.
fn absent_as_unchanged(mut applied: Applied) -> Applied {
    if applied.outcome == Outcome::Absent {
        applied.outcome = Outcome::Unchanged;
    }
    applied
}

fn sizing_line(report: Option<&SizingReport>) -> (Outcome, String) {
    match report {
        Some(s) => (
            Outcome::Ok,
            format!(
                "job pod {} CPU / {} fits {} / {} allocatable",
                s.cpu_request, s.memory_request, s.allocatable_cpu, s.allocatable_memory
            ),
        ),
        None => (
            Outcome::Skipped,
            "no node-image.json for this cluster".to_string(),
        ),
    }
}

/// The `prewarm` detail when gitlab-runner keeps the pause pods, naming what of tenantci's
/// was (or in a dry run would be) removed.
fn native_prewarm_line(count: u32, namespace: &str, switch: NativeSwitch, dry_run: bool) -> String {
    let verb = if dry_run { "would remove" } else { "removed" };
    let removed = match (switch.deployment_removed, switch.priority_class_removed) {
        (false, _) => String::new(),
        (true, pc) => format!(
            "; {verb} tenantci's Deployment {namespace}/{}{}",
            prewarm::NAME,
            if pc {
                format!(" and PriorityClass {}", prewarm::NAME)
            } else {
                String::new()
            }
        ),
    };
    format!(
        "gitlab-runner keeps {count} pause pod(s) sized like the build container ([runners.kubernetes.autoscaler]){removed}"
    )
}

/// tenantci's pause Deployment: pods sized like a job pod, in the runner's namespace.
fn prewarm_spec(inputs: &Inputs, replicas: i32) -> PrewarmSpec {
    PrewarmSpec {
        namespace: inputs.namespace.clone(),
        replicas,
        cpu: inputs.job.cpu(),
        memory: inputs.job.memory(),
        node_selector: Default::default(),
        tolerations: Vec::new(),
        labels: Default::default(),
        image: inputs.pause_pod_image.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(outcome: Outcome) -> Applied {
        Applied {
            kind: "ClusterRole".into(),
            name: "gitlab-runner".into(),
            outcome,
        }
    }

    #[test]
    fn rbac_is_unchanged_only_when_every_object_is() {
        let removed_before = absent_as_unchanged(applied(Outcome::Absent));
        let (outcome, detail) = summary(&[applied(Outcome::Unchanged), removed_before]);
        assert_eq!(outcome, Outcome::Unchanged);
        assert_eq!(
            detail,
            "ClusterRole gitlab-runner unchanged, ClusterRole gitlab-runner unchanged"
        );
        let (outcome, _) = summary(&[applied(Outcome::Unchanged), applied(Outcome::Deleted)]);
        assert_eq!(outcome, Outcome::Applied);
    }

    #[test]
    fn the_native_prewarm_line_names_what_was_removed() {
        let none = NativeSwitch {
            deployment_removed: false,
            priority_class_removed: false,
        };
        let both = NativeSwitch {
            deployment_removed: true,
            priority_class_removed: true,
        };
        assert!(native_prewarm_line(2, "ci", none, false).ends_with("autoscaler])"));
        let line = native_prewarm_line(2, "ci", both, true);
        assert!(
            line.starts_with("gitlab-runner keeps 2 pause pod(s)"),
            "{line}"
        );
        assert!(
            line.ends_with(&format!(
                "; would remove tenantci's Deployment ci/{0} and PriorityClass {0}",
                prewarm::NAME
            )),
            "{line}"
        );
    }
}
