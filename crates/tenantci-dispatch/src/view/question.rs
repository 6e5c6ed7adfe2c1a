//! Which job `dispatch explain` is asked about (pure): a job's web URL
//! (`https://FORGE/OWNER/REPO/actions/runs/RUN[/jobs/JOB]`, as Gitea and Forgejo show it), a
//! repository and run number, or a task id; and the tasks of a [`Status`] that are that job.
//!
//! Gitea's task context names the repository and the run's number (`run_number`), not the
//! job's index in its run: a run with several jobs held at once matches each of them.

use reqwest::Url;

use super::{Status, TaskStatus};
use crate::task_id::TaskId;

/// The job asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// Its run, from a URL (with the forge's origin) or `--repository` and `--run`.
    Run {
        /// The URL's `scheme://host[:port]`, to refuse another forge's job (None: no URL).
        origin: Option<String>,
        /// `owner/name`.
        repository: String,
        /// The run's number, as its URL and the task context's `run_number` show it.
        run: i64,
        /// The job's index in its run (a URL's `/jobs/JOB`, counted from 0 in id order).
        job: Option<usize>,
    },
    /// The dispatcher's task id.
    Task(TaskId),
}

/// A job's web URL, or the sentence saying why it is not one (pure).
pub fn parse_url(text: &str) -> Result<Job, String> {
    let shape = "a job's web URL looks like https://FORGE/OWNER/REPO/actions/runs/RUN/jobs/JOB (copy it from the job's page)";
    let url = Url::parse(text).map_err(|e| format!("`{text}` is not a URL ({e}); {shape}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{text}` is not an http(s) URL; {shape}"));
    }
    let segments: Vec<&str> = url.path_segments().map(|s| s.collect()).unwrap_or_default();
    let at = segments
        .windows(2)
        .position(|w| w == ["actions", "runs"])
        .filter(|at| *at >= 2)
        .ok_or_else(|| {
            format!("`{text}` has no /OWNER/REPO/actions/runs/RUN in its path; {shape}")
        })?;
    let run = segments
        .get(at + 2)
        .and_then(|r| r.parse::<i64>().ok())
        .filter(|r| *r > 0)
        .ok_or_else(|| format!("`{text}` names no run number after /actions/runs/; {shape}"))?;
    let job = match segments.get(at + 3..at + 5) {
        Some(["jobs", index]) => Some(index.parse::<usize>().map_err(|_| {
            format!("`{text}` names no job index after /jobs/ (a number from 0); {shape}")
        })?),
        _ => None,
    };
    Ok(Job::Run {
        origin: Some(origin(&url)),
        repository: format!("{}/{}", segments[at - 2], segments[at - 1]),
        run,
        job,
    })
}

/// `scheme://host[:port]`: what tells two forges apart.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// A URL of another forge than the one this dispatcher serves is refused (pure).
pub fn check_forge(job: &Job, status: &Status) -> Result<(), String> {
    let Job::Run {
        origin: Some(asked),
        ..
    } = job
    else {
        return Ok(());
    };
    let served = Url::parse(&status.summary.forge.url)
        .map(|u| origin(&u))
        .unwrap_or_default();
    if asked.eq_ignore_ascii_case(&served) {
        return Ok(());
    }
    Err(format!(
        "the job is on {asked}, but this dispatcher runs jobs of {served}; ask the dispatcher registered there (its config's status address)"
    ))
}

/// The tasks of `status` that are `job`.
pub fn find<'s>(status: &'s Status, job: &Job) -> Vec<&'s TaskStatus> {
    status
        .tasks
        .iter()
        .filter(|t| match job {
            Job::Task(id) => t.task == *id,
            Job::Run {
                repository, run, ..
            } => t.repository.eq_ignore_ascii_case(repository) && t.run == Some(*run),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_url_names_its_repository_and_run() {
        let j = parse_url("https://git.example.com/acme/app/actions/runs/12/jobs/0").unwrap();
        assert_eq!(
            j,
            Job::Run {
                origin: Some("https://git.example.com".into()),
                repository: "acme/app".into(),
                run: 12,
                job: Some(0)
            }
        );
        for bad in [
            "git.example.com/acme/app",
            "https://git.example.com/acme/app/issues/3",
            "https://git.example.com/actions/runs/3",
            "https://git.example.com/acme/app/actions/runs/x/jobs/0",
            "ftp://git.example.com/acme/app/actions/runs/3",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("/actions/runs/RUN"), "{e}");
        }
    }

    #[test]
    fn another_forge_is_refused_with_both_names() {
        let s = super::super::tests::full();
        let ours = parse_url("https://gitea.example/acme/app/actions/runs/3/jobs/0").unwrap();
        assert!(check_forge(&ours, &s).is_ok());
        assert_eq!(find(&s, &ours).len(), 1);
        let theirs = parse_url("https://codeberg.org/acme/app/actions/runs/3").unwrap();
        let e = check_forge(&theirs, &s).unwrap_err();
        assert!(
            e.contains("https://codeberg.org") && e.contains("https://gitea.example"),
            "{e}"
        );
    }
}
