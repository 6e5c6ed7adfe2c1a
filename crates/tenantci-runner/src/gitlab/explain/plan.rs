//! Pure: why a GitLab job waits for this runner, from gathered facts, the reasons in the order
//! an operator fixes them (each one line and its fix): the job's tags not all on the runner;
//! an untagged job and a runner without run-untagged; the runner paused; locked to other
//! projects; protected-only for an unprotected ref; not in contact with GitLab; every slot of
//! `concurrent`/`limit` held (by which Pods); the job's Pod Pending (its Events: a node
//! booting, an image pull); the warm pool empty while a node boots.
//!
//! Quota and LimitRange refusals happen at admission, before a Pod exists: not a reason here.

use serde::Serialize;

use crate::gitlab::rest::{JobDetails, RunnerDetails};
use crate::gitlab::status::pods::JobPod;
use crate::gitlab::status::{Concurrency, holds_slot};

/// What [`plan`] decides from.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    /// The job as GitLab sees it.
    pub job: &'a JobDetails,
    /// This entry's runner as GitLab sees it.
    pub runner: &'a RunnerDetails,
    /// Whether the job's ref is protected; `None` when not looked up (the runner takes any ref).
    pub ref_protected: Option<bool>,
    /// The entry's concurrency.
    pub concurrency: &'a Concurrency,
    /// Every job Pod of the namespace.
    pub pods: &'a [JobPod],
    /// Pause pods running (warm slots).
    pub warm: usize,
    /// The Unix command to check gitlab-runner's service (systemd unit).
    pub service: &'a str,
}

/// One reason: a stable kind, the line, its fix.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Reason {
    /// `tags`, `untagged`, `paused`, `locked`, `protected`, `contact`, `concurrency`,
    /// `pod-pending`, `warm-pool`, `not-queued`.
    pub kind: &'static str,
    /// What holds the job.
    pub line: String,
    /// What to do.
    pub fix: String,
}

/// Where the job stands.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It finished (success, failed, canceled, skipped).
    Finished,
    /// It runs (on this runner, its Pod not waiting).
    Runs,
    /// Another runner took it.
    Elsewhere,
    /// Nothing holds it: this runner takes it at its next request.
    WillRun,
    /// It waits for the reasons named.
    Waits,
}

impl Verdict {
    /// The exit code: 1 when it waits for a named reason, else 0.
    pub fn exit_code(self) -> i32 {
        if self == Verdict::Waits { 1 } else { 0 }
    }
}

/// The verdict and the reasons, in order.
pub fn plan(f: &Facts<'_>) -> (Verdict, Vec<Reason>) {
    let job = f.job;
    let ours = job.runner.as_ref().is_none_or(|r| r.id == f.runner.id);
    match job.status.as_str() {
        "success" | "failed" | "canceled" | "skipped" => (Verdict::Finished, Vec::new()),
        _ if !ours => (Verdict::Elsewhere, Vec::new()),
        "running" => waiting(pod_reasons(f), Verdict::Runs),
        "pending" => {
            let mut reasons = runner_reasons(f);
            if reasons.is_empty() {
                reasons.extend(concurrency(f));
            }
            reasons.extend(pod_reasons(f));
            waiting(reasons, Verdict::WillRun)
        }
        other => waiting(
            vec![Reason {
                kind: "not-queued",
                line: format!("GitLab has not queued the job for any runner (status {other})"),
                fix: match other {
                    "manual" => "start it in GitLab (the play button)".into(),
                    "scheduled" => "it starts at its scheduled time, or play it now".into(),
                    _ => "it waits for earlier stages, needs or a resource group in its pipeline"
                        .into(),
                },
            }],
            Verdict::WillRun,
        ),
    }
}

fn waiting(reasons: Vec<Reason>, otherwise: Verdict) -> (Verdict, Vec<Reason>) {
    if reasons.is_empty() {
        (otherwise, reasons)
    } else {
        (Verdict::Waits, reasons)
    }
}

fn reason(kind: &'static str, line: String, fix: impl Into<String>) -> Reason {
    Reason {
        kind,
        line,
        fix: fix.into(),
    }
}

/// The runner-side reasons GitLab itself applies when it picks a runner for a pending job.
fn runner_reasons(f: &Facts<'_>) -> Vec<Reason> {
    let (job, r) = (f.job, f.runner);
    let mut out = Vec::new();
    let missing: Vec<&str> = job
        .tag_list
        .iter()
        .filter(|t| !r.tag_list.contains(t))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        out.push(reason(
            "tags",
            format!(
                "the job's tags {} are not on runner {} (it has {})",
                missing.join(", "),
                r.id,
                list_or_none(&r.tag_list)
            ),
            format!(
                "add {} to the runner's tags (GitLab: Settings > CI/CD > Runners > edit), or change the job's `tags:`",
                missing.join(", ")
            ),
        ));
    }
    if job.tag_list.is_empty() && !r.run_untagged {
        out.push(reason(
            "untagged",
            format!(
                "the job has no tags and runner {} does not run untagged jobs",
                r.id
            ),
            "turn on \"Run untagged jobs\" for the runner, or give the job `tags:` the runner has",
        ));
    }
    if r.paused {
        out.push(reason(
            "paused",
            format!("runner {} is paused", r.id),
            "resume it in GitLab (Settings > CI/CD > Runners), or `PUT /api/v4/runners/:id` with paused=false",
        ));
    }
    if let Some(reason) = locked(f) {
        out.push(reason);
    }
    if r.access_level == "ref_protected" && f.ref_protected == Some(false) {
        out.push(reason(
            "protected",
            format!(
                "runner {} runs jobs of protected refs only and `{}` is not protected",
                r.id, job.git_ref
            ),
            "protect the branch (Settings > Repository > Protected branches), or set the runner's \"Protected\" off",
        ));
    }
    if r.status != "online" {
        out.push(reason(
            "contact",
            format!(
                "runner {} has not contacted GitLab recently ({}, last contact {})",
                r.id,
                r.status,
                r.contacted_at.as_deref().unwrap_or("never")
            ),
            format!(
                "gitlab-runner is down or cannot reach GitLab: `{}`, then `journalctl -u {}`",
                f.service,
                f.service.rsplit(' ').next().unwrap_or_default()
            ),
        ));
    }
    out
}

fn list_or_none(tags: &[String]) -> String {
    if tags.is_empty() {
        "none".into()
    } else {
        tags.join(", ")
    }
}

/// A project runner not assigned to the job's project.
fn locked(f: &Facts<'_>) -> Option<Reason> {
    let r = f.runner;
    let project = f.job.pipeline.project_id;
    if r.runner_type != "project_type" || r.projects.iter().any(|p| p.id == project) {
        return None;
    }
    let assigned: Vec<String> = r.projects.iter().map(|p| p.id.to_string()).collect();
    Some(reason(
        "locked",
        format!(
            "runner {} is a project runner{} of project(s) {}, not of the job's project {project}",
            r.id,
            if r.locked { " locked" } else { "" },
            list_or_none(&assigned)
        ),
        format!(
            "assign the runner to project {project} (its Settings > CI/CD > Runners){}",
            if r.locked { ", after unlocking it" } else { "" }
        ),
    ))
}

fn concurrency(f: &Facts<'_>) -> Option<Reason> {
    let c = f.concurrency;
    if !c.full {
        return None;
    }
    let holders: Vec<String> = f
        .pods
        .iter()
        .filter(|p| holds_slot(p))
        .map(|p| format!("{} (job {}, {})", p.name, p.job.id, p.phase))
        .collect();
    Some(reason(
        "concurrency",
        format!(
            "every slot is held: {} of {} (concurrent {}, limit {}) by {}",
            c.active,
            c.slots.unwrap_or_default(),
            c.concurrent.map_or("-".into(), |v| v.to_string()),
            c.limit.map_or("-".into(), |v| v.to_string()),
            holders.join(", ")
        ),
        "wait for those jobs, or raise `limit` in the entry and `concurrent` in config.toml (`tenantci runner gitlab-config --limit N`)",
    ))
}

/// The job's Pod Pending, and an empty warm pool while a node boots for it.
fn pod_reasons(f: &Facts<'_>) -> Vec<Reason> {
    let Some(pod) = f.pods.iter().find(|p| p.job.id == f.job.id) else {
        return Vec::new();
    };
    if pod.phase != "Pending" {
        return Vec::new();
    }
    let pulling = pod
        .waiting
        .as_deref()
        .filter(|w| w.contains("Image") || w.contains("Pull"));
    let why = match (pulling, pod.node_booting) {
        (Some(w), _) => format!("an image pull ({w})"),
        (None, true) => "a node boots for it".into(),
        (None, false) if pod.node.is_none() => "not scheduled yet".into(),
        (None, false) => "its containers start".into(),
    };
    let fix = match (pulling, pod.node_booting) {
        (Some(_), _) => {
            "check the job's image name and the registry (reachable from the nodes, `image_pull_secrets`)"
        }
        (None, true) => {
            "wait: a rented node boots (the entry's poll_timeout covers it); keep nodes warm with `tenantci bootstrap runner --prewarm N`"
        }
        _ => "its Events below say why; `tenantci tenant size` when it never schedules",
    };
    let mut out = vec![reason(
        "pod-pending",
        format!("the job's Pod {} is Pending: {why}", pod.name),
        fix,
    )];
    if pod.node_booting && pulling.is_none() && f.warm == 0 {
        out.push(reason(
            "warm-pool",
            "the warm pool is empty while a node boots: no pause pod holds a warm node".into(),
            "keep warm nodes: `tenantci bootstrap runner ... --prewarm N` (or `tenantci tenant prewarm`)",
        ));
    }
    out
}

#[cfg(test)]
mod tests;
