//! Pure: the job `runner explain` is asked about: its web URL
//! (`https://gitlab.example.com/group/app/-/jobs/123`), or a job id with `--project` (an id or
//! a path). A URL of another GitLab than the entry's `url` is refused: the answer would come
//! from a GitLab this runner does not serve.

/// A job at the entry's GitLab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    /// The project: a numeric id or a path (`group/app`).
    pub project: String,
    /// The job's id.
    pub job: u64,
}

/// Parses `job` against the entry's GitLab `base` (its `url`). `Err` is the sentence to print.
pub fn parse(job: &str, project: Option<&str>, base: &str) -> Result<JobRef, String> {
    let job = job.trim();
    if let Ok(id) = job.parse::<u64>() {
        let Some(project) = project.map(str::trim).filter(|p| !p.is_empty()) else {
            return Err(format!(
                "job `{id}` is an id: give its project with --project ID|GROUP/PROJECT, or the job's web URL"
            ));
        };
        return Ok(JobRef {
            project: project.to_string(),
            job: id,
        });
    }
    if project.is_some() {
        return Err("--project goes with a job id, not with a job URL".into());
    }
    if !(job.starts_with("https://") || job.starts_with("http://")) {
        return Err(format!(
            "`{job}` is neither a job id nor a job URL (https://GITLAB/GROUP/PROJECT/-/jobs/ID)"
        ));
    }
    let base = base.trim_end_matches('/');
    let prefix = format!("{}/", base.to_ascii_lowercase());
    if !job.to_ascii_lowercase().starts_with(&prefix) {
        return Err(format!(
            "the job URL `{job}` is not at this runner's GitLab {base}: give a job of {base}, or --name of the entry that serves the other GitLab"
        ));
    }
    let path = job[prefix.len()..]
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    let shape = || format!("the job URL `{job}` is not GITLAB/GROUP/PROJECT/-/jobs/ID");
    let (project, id) = path.split_once("/-/jobs/").ok_or_else(shape)?;
    let id: u64 = id.parse().map_err(|_| shape())?;
    if project.is_empty() || project.contains("/-/") {
        return Err(shape());
    }
    Ok(JobRef {
        project: project.to_string(),
        job: id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "https://gitlab.example.com";

    #[test]
    fn job_urls_and_ids_are_read() {
        let r = parse(
            "https://gitlab.example.com/g/sub/app/-/jobs/123",
            None,
            BASE,
        )
        .unwrap();
        assert_eq!(r.project, "g/sub/app");
        assert_eq!(r.job, 123);
        let r = parse(
            "https://GitLab.example.com/g/app/-/jobs/9/?x#y",
            None,
            "https://gitlab.example.com/",
        )
        .unwrap();
        assert_eq!((r.project.as_str(), r.job), ("g/app", 9));
        let r = parse("77", Some("42"), BASE).unwrap();
        assert_eq!((r.project.as_str(), r.job), ("42", 77));
        let r = parse("https://h/gitlab/g/app/-/jobs/5", None, "https://h/gitlab").unwrap();
        assert_eq!(r.project, "g/app");
    }

    #[test]
    fn another_gitlab_and_bad_shapes_are_refused() {
        let e = parse("https://other.example.com/g/app/-/jobs/1", None, BASE).unwrap_err();
        assert!(e.contains("not at this runner's GitLab"), "{e}");
        assert!(parse("77", None, BASE).unwrap_err().contains("--project"));
        assert!(parse("https://gitlab.example.com/g/app/-/pipelines/1", None, BASE).is_err());
        assert!(parse("https://gitlab.example.com/-/jobs/1", None, BASE).is_err());
        assert!(parse("https://gitlab.example.com/g/app/-/jobs/x", None, BASE).is_err());
        assert!(parse("nonsense", None, BASE).is_err());
    }
}
