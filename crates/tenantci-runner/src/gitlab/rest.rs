//! GitLab's read-only REST API as `runner status` and `runner explain` read it, with an access
//! token that has the `read_api` scope (or `api`): a runner's details (`GET /runners/:id`),
//! its managers (`GET /runners/:id/managers`, GitLab 16+: each gitlab-runner process's version
//! and last contact), a project's job (`GET /projects/:id/jobs/:job_id`) and protected
//! branches (`GET /projects/:id/protected_branches`). Only the fields tenantci reads; the
//! runner's own token answers none of these. Changes nothing at GitLab.

use serde::{Deserialize, Serialize};

use super::api::{ApiError, Client};

/// A project the runner is assigned to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProjectRef {
    /// The project's id.
    pub id: u64,
}

/// `GET /api/v4/runners/:id`: the runner as GitLab sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunnerDetails {
    /// The runner's id.
    pub id: u64,
    /// Its description.
    #[serde(default)]
    pub description: Option<String>,
    /// `instance_type`, `group_type` or `project_type`.
    #[serde(default)]
    pub runner_type: String,
    /// Whether it takes no jobs.
    #[serde(default)]
    pub paused: bool,
    /// `online`, `offline`, `stale` or `never_contacted`.
    #[serde(default)]
    pub status: String,
    /// Its last contact (RFC 3339); `None` when never.
    #[serde(default)]
    pub contacted_at: Option<String>,
    /// The version its newest manager reported.
    #[serde(default)]
    pub version: Option<String>,
    /// Its tags.
    #[serde(default)]
    pub tag_list: Vec<String>,
    /// Whether it takes jobs without tags.
    #[serde(default)]
    pub run_untagged: bool,
    /// Whether it is locked to its projects.
    #[serde(default)]
    pub locked: bool,
    /// Seconds a job may run on it; `None` for the project's timeout.
    #[serde(default)]
    pub maximum_timeout: Option<u64>,
    /// `not_protected` or `ref_protected`.
    #[serde(default)]
    pub access_level: String,
    /// The projects it is assigned to (project runners).
    #[serde(default)]
    pub projects: Vec<ProjectRef>,
}

/// One entry of `GET /api/v4/runners/:id/managers`: a gitlab-runner process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunnerManager {
    /// gitlab-runner's `system_id`.
    pub system_id: String,
    /// The version it reported.
    #[serde(default)]
    pub version: Option<String>,
    /// Its last contact (RFC 3339).
    #[serde(default)]
    pub contacted_at: Option<String>,
}

/// The runner a job went to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobRunner {
    /// The runner's id.
    pub id: u64,
    /// Its description.
    #[serde(default)]
    pub description: Option<String>,
}

/// The pipeline a job belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobPipeline {
    /// The job's project id (a job URL names the project by path).
    pub project_id: u64,
}

/// `GET /api/v4/projects/:id/jobs/:job_id`: the job as GitLab sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobDetails {
    /// The job's id.
    pub id: u64,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `manual`, ...
    pub status: String,
    /// The job's name.
    #[serde(default)]
    pub name: String,
    /// The branch or tag it runs for.
    #[serde(rename = "ref", default)]
    pub git_ref: String,
    /// Whether `ref` is a tag.
    #[serde(default)]
    pub tag: bool,
    /// The job's tags.
    #[serde(default)]
    pub tag_list: Vec<String>,
    /// The runner it went to; `None` while pending.
    #[serde(default)]
    pub runner: Option<JobRunner>,
    /// Seconds it waited in the queue (so far, while pending).
    #[serde(default)]
    pub queued_duration: Option<f64>,
    /// Its page at GitLab.
    #[serde(default)]
    pub web_url: String,
    /// Its pipeline (the project's numeric id).
    pub pipeline: JobPipeline,
}

/// One protected branch (a name or a wildcard such as `release/*`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtectedBranch {
    /// The name or wildcard.
    pub name: String,
}

fn decode<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, ApiError> {
    serde_json::from_str(body).map_err(|e| ApiError::Decode(e.to_string()))
}

/// A project id or path as a path segment (`group/app` -> `group%2Fapp`).
pub fn project_segment(project: &str) -> String {
    let mut out = String::new();
    for b in project.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `GET /api/v4/runners/:id`.
pub async fn runner(client: &Client, id: u64) -> Result<RunnerDetails, ApiError> {
    decode(&client.get_json(&format!("/api/v4/runners/{id}")).await?)
}

/// `GET /api/v4/runners/:id/managers`.
pub async fn managers(client: &Client, id: u64) -> Result<Vec<RunnerManager>, ApiError> {
    decode(
        &client
            .get_json(&format!("/api/v4/runners/{id}/managers"))
            .await?,
    )
}

/// `GET /api/v4/projects/:project/jobs/:job`; `project` is an id or a path.
pub async fn job(client: &Client, project: &str, job: u64) -> Result<JobDetails, ApiError> {
    let path = format!("/api/v4/projects/{}/jobs/{job}", project_segment(project));
    decode(&client.get_json(&path).await?)
}

/// `GET /api/v4/projects/:id/protected_branches` (the first 100: wildcards keep lists short).
pub async fn protected_branches(
    client: &Client,
    project: u64,
) -> Result<Vec<ProtectedBranch>, ApiError> {
    let path = format!("/api/v4/projects/{project}/protected_branches?per_page=100");
    decode(&client.get_json(&path).await?)
}

/// Whether `branch` is protected by one of `protections`: a name, or a wildcard in which `*`
/// matches any characters, as GitLab matches them.
pub fn is_protected(branch: &str, protections: &[ProtectedBranch]) -> bool {
    protections.iter().any(|p| wildcard(&p.name, branch))
}

fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> ProtectedBranch {
        ProtectedBranch { name: name.into() }
    }

    #[test]
    fn protected_branches_match_names_and_wildcards() {
        let list = [p("main"), p("release/*"), p("*-stable")];
        assert!(is_protected("main", &list));
        assert!(!is_protected("mainline", &list));
        assert!(is_protected("release/1.2", &list));
        assert!(is_protected("2-stable", &list));
        assert!(!is_protected("feature/x", &list));
        assert!(is_protected("a-b-c", &[p("a*b*c")]));
        assert!(!is_protected("ab", &[p("a*b*b")]));
    }

    #[test]
    fn a_project_path_is_one_segment() {
        assert_eq!(project_segment("tenant/app"), "tenant%2Fapp");
        assert_eq!(project_segment("42"), "42");
    }
}
