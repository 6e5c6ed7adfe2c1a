//! Forgejo's waiting-jobs API: `GET /api/v1/{admin|user|orgs/{org}|repos/{owner}/{repo}}/actions/runners/jobs`
//! lists the jobs of a scope that wait for a runner (and those running), each with its
//! `runs_on` labels (docs/forgejo-protocol.md has the source). The dispatcher reads it to wake
//! its claim loop when a job it can serve waits, and to export the demand it cannot serve.
//!
//! Pure here: the scope (`--scope` / `waiting_jobs.scope`), the answer's shape and the demand
//! it means. The call itself is `RunnerClient::waiting_jobs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// Whose waiting jobs are listed: the scope the dispatcher's runner is registered in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every job of the instance (a site administrator's token).
    Admin,
    /// The token's user's repositories.
    User,
    /// The repositories of one organization (`orgs/ORG`); holds the organization's name.
    Org(String),
    /// One repository (`repos/OWNER/REPO`).
    Repo {
        /// The user or organization that owns the repository.
        owner: String,
        /// The repository's name, without its owner.
        repo: String,
    },
}

impl Scope {
    /// The API path under the forge's base URL.
    pub fn path(&self) -> String {
        let tail = "actions/runners/jobs";
        match self {
            Scope::Admin => format!("/api/v1/admin/{tail}"),
            Scope::User => format!("/api/v1/user/{tail}"),
            Scope::Org(org) => format!("/api/v1/orgs/{org}/{tail}"),
            Scope::Repo { owner, repo } => format!("/api/v1/repos/{owner}/{repo}/{tail}"),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Admin => f.write_str("admin"),
            Scope::User => f.write_str("user"),
            Scope::Org(org) => write!(f, "orgs/{org}"),
            Scope::Repo { owner, repo } => write!(f, "repos/{owner}/{repo}"),
        }
    }
}

/// A name segment as Forgejo allows user, org and repository names: letters, digits, `-`,
/// `_`, `.`; never `.` or `..` (which would change the path).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "`{}` is not a waiting-jobs scope: `admin`, `user`, `orgs/ORG` or `repos/OWNER/REPO`",
                crate::input::shown(s)
            )
        };
        let parts: Vec<&str> = s.trim().split('/').collect();
        match parts.as_slice() {
            ["admin"] => Ok(Scope::Admin),
            ["user"] => Ok(Scope::User),
            ["orgs", org] if is_name(org) => Ok(Scope::Org(org.to_string())),
            ["repos", owner, repo] if is_name(owner) && is_name(repo) => Ok(Scope::Repo {
                owner: owner.to_string(),
                repo: repo.to_string(),
            }),
            _ => Err(bad()),
        }
    }
}

/// One entry of the answer (Forgejo's `ActionRunJob`); fields the dispatcher does not use are
/// skipped, and ones older Forgejo versions lack (`handle`, `attempt`) are optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WaitingJob {
    /// The job's database id.
    pub id: i64,
    /// The job's name; empty when the answer has none.
    #[serde(default)]
    pub name: String,
    /// The labels the job runs on; empty: any runner of the scope.
    #[serde(default)]
    pub runs_on: Vec<String>,
    /// `waiting` or `running` (Forgejo lists both).
    pub status: String,
    /// Forgejo 15+: the job attempt's handle, for `FetchSingleTask`.
    #[serde(default)]
    pub handle: Option<String>,
}

impl WaitingJob {
    /// Whether the job still waits for a runner (status `waiting`, not `running`).
    pub fn is_waiting(&self) -> bool {
        self.status == "waiting"
    }
}

/// The answer: a JSON array, `null` when no job matches (Forgejo encodes an empty Go slice
/// that was never appended to as `null`).
pub fn parse(body: &[u8]) -> Result<Vec<WaitingJob>, serde_json::Error> {
    Ok(serde_json::from_slice::<Option<Vec<WaitingJob>>>(body)?.unwrap_or_default())
}

/// Largest answer read: an entry is about 300 bytes, so this is thousands of waiting jobs.
pub const MAX_ANSWER: usize = 4 << 20;

/// Most label sets exported as their own series; the rest are summed under [`OTHER`], so a
/// scope with many distinct `runs-on` sets cannot grow the metric without bound.
pub const MAX_LABEL_SETS: usize = 32;
/// The series of the label sets beyond [`MAX_LABEL_SETS`].
pub const OTHER: &str = "(other)";

/// What the waiting jobs mean for a dispatcher serving `labels` (pure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    /// Waiting jobs it can take, by id.
    pub servable: BTreeSet<i64>,
    /// Waiting jobs by their runs-on labels (sorted, comma-joined) and whether this dispatcher
    /// can take them: the series of `tenantci_dispatch_forge_waiting_jobs`.
    pub by_labels: BTreeMap<(String, bool), u64>,
}

impl Demand {
    /// The demand of `jobs` for a dispatcher registered with `labels`; jobs that are not
    /// waiting (running ones) are left out.
    pub fn of(jobs: &[WaitingJob], labels: &[String]) -> Demand {
        let mut d = Demand::default();
        let mut sets: BTreeSet<String> = BTreeSet::new();
        for job in jobs.iter().filter(|j| j.is_waiting()) {
            let ours = super::runnable_with(&job.runs_on, labels);
            if ours {
                d.servable.insert(job.id);
            }
            let mut runs_on = job.runs_on.clone();
            runs_on.sort();
            runs_on.dedup();
            let mut key = runs_on.join(",");
            if !sets.contains(&key) && sets.len() >= MAX_LABEL_SETS {
                key = OTHER.to_string();
            } else {
                sets.insert(key.clone());
            }
            *d.by_labels.entry((key, ours)).or_default() += 1;
        }
        d
    }

    /// Whether a job this dispatcher can take waits that was not waiting in `before`: the
    /// moment to wake the claim loop (jobs that keep waiting while every slot is busy do not
    /// wake it again and again).
    pub fn has_new_since(&self, before: &Demand) -> bool {
        self.servable.difference(&before.servable).next().is_some()
    }

    /// Waiting jobs this dispatcher cannot take (no registration of it has their labels).
    pub fn unservable(&self) -> u64 {
        self.by_labels
            .iter()
            .filter(|((_, ours), _)| !ours)
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64, runs_on: &[&str], status: &str) -> WaitingJob {
        WaitingJob {
            id,
            name: format!("job{id}"),
            runs_on: runs_on.iter().map(|s| s.to_string()).collect(),
            status: status.into(),
            handle: None,
        }
    }

    #[test]
    fn scopes_parse_to_their_paths_and_refuse_what_would_change_the_path() {
        let p = |s: &str| s.parse::<Scope>().map(|s| s.path());
        assert_eq!(p("admin").unwrap(), "/api/v1/admin/actions/runners/jobs");
        assert_eq!(p("user").unwrap(), "/api/v1/user/actions/runners/jobs");
        assert_eq!(
            p("orgs/acme").unwrap(),
            "/api/v1/orgs/acme/actions/runners/jobs"
        );
        assert_eq!(
            p("repos/acme/web.site").unwrap(),
            "/api/v1/repos/acme/web.site/actions/runners/jobs"
        );
        for bad in [
            "",
            "orgs",
            "orgs/",
            "orgs/..",
            "repos/a",
            "repos/a/b/c",
            "orgs/a?b",
            "x",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert_eq!(
            "repos/a/b".parse::<Scope>().unwrap().to_string(),
            "repos/a/b"
        );
    }

    #[test]
    fn the_answer_is_forgejo_s_array_or_null() {
        let body = br#"[{"id":7,"repo_id":1,"owner_id":2,"name":"build","needs":[],
            "runs_on":["docker","pod"],"task_id":0,"status":"waiting","attempt":1,
            "handle":"51ddf9d1-2649-4b08-9fde-6867275a4b28","run_id":3}]"#;
        let jobs = parse(body).unwrap();
        assert_eq!(jobs[0].id, 7);
        assert_eq!(jobs[0].runs_on, ["docker", "pod"]);
        assert_eq!(
            jobs[0].handle.as_deref(),
            Some("51ddf9d1-2649-4b08-9fde-6867275a4b28")
        );
        assert!(parse(b"null").unwrap().is_empty());
        assert!(
            parse(br#"[{"id":1,"status":"waiting"}]"#).unwrap()[0]
                .runs_on
                .is_empty()
        );
        assert!(parse(b"{}").is_err());
    }

    #[test]
    fn demand_splits_what_we_serve_from_what_we_cannot_and_skips_running_jobs() {
        let ours = vec!["self-hosted".to_string(), "pod".to_string()];
        let jobs = [
            job(1, &["pod"], "waiting"),
            job(2, &["pod", "self-hosted"], "waiting"),
            job(3, &["gpu"], "waiting"),
            job(4, &["gpu"], "waiting"),
            job(5, &["pod"], "running"),
            job(6, &[], "waiting"),
        ];
        let d = Demand::of(&jobs, &ours);
        assert_eq!(d.servable, BTreeSet::from([1, 2, 6]));
        assert_eq!(d.by_labels[&("gpu".to_string(), false)], 2);
        assert_eq!(d.by_labels[&("pod".to_string(), true)], 1);
        assert_eq!(d.by_labels[&("pod,self-hosted".to_string(), true)], 1);
        assert_eq!(d.by_labels[&(String::new(), true)], 1);
        assert_eq!(d.unservable(), 2);
        let before = Demand::of(&jobs[..1], &ours);
        assert!(d.has_new_since(&before));
        assert!(
            !d.has_new_since(&d),
            "the same jobs still waiting wake nothing"
        );
        assert!(!Demand::of(&jobs[2..4], &ours).has_new_since(&before));
    }

    #[test]
    fn label_sets_beyond_the_bound_are_summed_as_other() {
        let jobs: Vec<WaitingJob> = (0..(MAX_LABEL_SETS as i64 + 5))
            .map(|i| job(i, &[&format!("l{i}")], "waiting"))
            .collect();
        let d = Demand::of(&jobs, &[]);
        assert_eq!(d.by_labels.len(), MAX_LABEL_SETS + 1);
        assert_eq!(d.by_labels[&(OTHER.to_string(), false)], 5);
        assert_eq!(d.unservable(), jobs.len() as u64);
    }
}
