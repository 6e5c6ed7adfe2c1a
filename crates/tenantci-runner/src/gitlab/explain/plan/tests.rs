//! One test per reason, in the planner's order, plus the verdicts without one.

use super::*;
use crate::gitlab::rest::{JobPipeline, JobRunner, ProjectRef};
use crate::gitlab::status::pods::PodJob;

fn job(status: &str, tags: &[&str]) -> JobDetails {
    JobDetails {
        id: 5,
        status: status.into(),
        name: "build".into(),
        git_ref: "feature".into(),
        tag: false,
        tag_list: tags.iter().map(|t| t.to_string()).collect(),
        runner: None,
        queued_duration: Some(12.0),
        web_url: "https://gitlab.example.com/g/app/-/jobs/5".into(),
        pipeline: JobPipeline { project_id: 42 },
    }
}

fn runner() -> RunnerDetails {
    RunnerDetails {
        id: 1,
        description: None,
        runner_type: "instance_type".into(),
        paused: false,
        status: "online".into(),
        contacted_at: Some("2026-12-07T22:00:00Z".into()),
        version: Some("18.10.0".into()),
        tag_list: vec!["pod".into()],
        run_untagged: false,
        locked: false,
        maximum_timeout: None,
        access_level: "not_protected".into(),
        projects: vec![],
    }
}

fn pod(name: &str, job: u64, phase: &str) -> JobPod {
    JobPod {
        name: name.into(),
        job: PodJob {
            id: job,
            url: None,
            name: None,
            git_ref: None,
            sha: None,
            project_id: Some(42),
        },
        phase: phase.into(),
        node: None,
        node_source: None,
        age_seconds: 3,
        restarts: 0,
        waiting: None,
        events: vec![],
        node_booting: false,
    }
}

fn free() -> Concurrency {
    Concurrency {
        concurrent: Some(4),
        limit: Some(4),
        request_concurrency: Some(1),
        active: 0,
        slots: Some(4),
        full: false,
    }
}

struct Case<'a> {
    job: JobDetails,
    runner: RunnerDetails,
    concurrency: Concurrency,
    pods: &'a [JobPod],
    warm: usize,
    protected: Option<bool>,
}

impl<'a> Case<'a> {
    fn new(job: JobDetails) -> Self {
        Case {
            job,
            runner: runner(),
            concurrency: free(),
            pods: &[],
            warm: 0,
            protected: None,
        }
    }

    fn plan(&self) -> (Verdict, Vec<Reason>) {
        plan(&Facts {
            job: &self.job,
            runner: &self.runner,
            ref_protected: self.protected,
            concurrency: &self.concurrency,
            pods: self.pods,
            warm: self.warm,
            service: "systemctl status x.service",
        })
    }

    fn kinds(&self) -> (Verdict, Vec<&'static str>) {
        let (v, reasons) = self.plan();
        (v, reasons.iter().map(|r| r.kind).collect())
    }
}

#[test]
fn a_pending_job_with_matching_tags_will_run() {
    let got = Case::new(job("pending", &["pod"])).kinds();
    assert_eq!(got, (Verdict::WillRun, vec![]));
}

#[test]
fn missing_tags_are_named() {
    let (v, reasons) = Case::new(job("pending", &["pod", "gpu", "arm"])).plan();
    assert_eq!(v, Verdict::Waits);
    assert_eq!(reasons[0].kind, "tags");
    assert!(
        reasons[0]
            .line
            .starts_with("the job's tags gpu, arm are not"),
        "{}",
        reasons[0].line
    );
}

#[test]
fn untagged_paused_locked_protected_contact_come_in_order() {
    let mut case = Case::new(job("pending", &[]));
    let r = &mut case.runner;
    r.paused = true;
    r.runner_type = "project_type".into();
    r.locked = true;
    r.projects = vec![ProjectRef { id: 7 }];
    r.access_level = "ref_protected".into();
    r.status = "offline".into();
    case.protected = Some(false);
    let want = vec!["untagged", "paused", "locked", "protected", "contact"];
    assert_eq!(case.kinds(), (Verdict::Waits, want));
    // A protected ref: no protected reason; an assigned project: no locked reason.
    case.runner.projects.push(ProjectRef { id: 42 });
    case.protected = Some(true);
    assert_eq!(case.kinds().1, vec!["untagged", "paused", "contact"]);
}

#[test]
fn a_full_concurrency_names_the_pods_holding_it() {
    let pods = [
        pod("runner-a", 1, "Running"),
        pod("runner-b", 2, "Pending"),
        pod("done", 3, "Succeeded"),
    ];
    let mut case = Case::new(job("pending", &["pod"]));
    case.pods = &pods;
    case.concurrency = Concurrency {
        active: 2,
        slots: Some(2),
        limit: Some(2),
        full: true,
        ..free()
    };
    let (v, reasons) = case.plan();
    assert_eq!(v, Verdict::Waits);
    assert_eq!(reasons.len(), 1);
    let line = &reasons[0].line;
    assert!(
        line.contains("runner-a (job 1, Running), runner-b (job 2, Pending)"),
        "{line}"
    );
    assert!(!line.contains("done"), "{line}");
}

#[test]
fn a_pending_pod_on_a_booting_node_and_an_empty_warm_pool() {
    let mut mine = pod("runner-x", 5, "Pending");
    mine.node_booting = true;
    let mut j = job("running", &["pod"]);
    j.runner = Some(JobRunner {
        id: 1,
        description: None,
    });
    let pods = [mine.clone()];
    let mut case = Case::new(j.clone());
    case.pods = &pods;
    assert_eq!(
        case.kinds(),
        (Verdict::Waits, vec!["pod-pending", "warm-pool"])
    );
    case.warm = 1;
    assert_eq!(case.kinds().1, vec!["pod-pending"]);

    mine.waiting = Some("ImagePullBackOff".into());
    let pulling = [mine.clone()];
    let mut case = Case::new(j.clone());
    case.pods = &pulling;
    let (_, reasons) = case.plan();
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].line.contains("image pull (ImagePullBackOff)"),
        "{}",
        reasons[0].line
    );

    mine.phase = "Running".into();
    let running = [mine];
    let mut case = Case::new(j);
    case.pods = &running;
    assert_eq!(case.kinds(), (Verdict::Runs, vec![]));
}

#[test]
fn finished_elsewhere_and_not_queued_jobs() {
    assert_eq!(
        Case::new(job("success", &["gpu"])).kinds().0,
        Verdict::Finished
    );
    let mut j = job("running", &[]);
    j.runner = Some(JobRunner {
        id: 9,
        description: None,
    });
    assert_eq!(Case::new(j).kinds().0, Verdict::Elsewhere);
    assert_eq!(
        Case::new(job("manual", &["pod"])).kinds(),
        (Verdict::Waits, vec!["not-queued"])
    );
    assert_eq!(Verdict::Waits.exit_code(), 1);
    assert_eq!(Verdict::WillRun.exit_code(), 0);
}
