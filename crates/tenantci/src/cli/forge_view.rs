//! The forge's view of a job, for `dispatch explain`: its status, runs-on labels and how long
//! it waits, read from the forge's REST API with an API token from a private file
//! (`tenantci_core::forge::jobs` has the endpoints; docs/gitea-protocol.md and
//! docs/forgejo-protocol.md which versions serve them). A forge without that API is one line,
//! and explain goes on from the dispatcher's view.

use std::path::Path;

use tenantci_core::forge::Forge;
use tenantci_core::forge::gitea::client::{ClientConfig, RunnerClient};
use tenantci_core::forge::jobs::{self, ForgeJob, Run};
use tenantci_core::secret::Secret;
use tenantci_core::{Error, Result};

/// What the forge said about the job.
pub enum View {
    /// The job (the URL's), or every job of the run.
    Jobs {
        forge: String,
        repository: String,
        run: i64,
        jobs: Vec<ForgeJob>,
    },
    /// Why the forge's view is missing, in one line.
    Missing(String),
}

/// The job asked about at the forge.
pub struct Asked<'a> {
    pub forge_url: &'a str,
    pub ca_pem: Option<String>,
    pub repository: &'a str,
    pub run: i64,
    pub job: Option<usize>,
}

/// The API token in `path`: a private (0600) file, never an argument.
pub fn read_token(path: &Path) -> Result<Secret> {
    const WHAT: &str = "the forge API token file (--forge-token-file)";
    tenantci_core::input::check_private(WHAT, path)?;
    let hint = "put an API token of the forge that may read the repository's actions into it";
    Ok(Secret::new(tenantci_core::secret::read_file(
        WHAT,
        path,
        Some(hint),
    )?))
}

/// Reads the job at the forge. An unknown run or job, or a token the forge refuses, is bad
/// input (exit 2); a forge without the runs API is [`View::Missing`].
pub async fn read(asked: &Asked<'_>, token: &Secret) -> Result<View> {
    let url = asked.forge_url;
    let mut config = ClientConfig::new(url);
    config.ca_pem = asked.ca_pem.clone();
    let client = RunnerClient::new(config).map_err(|e| {
        Error::bad_input(format!("cannot build a client for the forge at {url}")).caused_by(e)
    })?;
    let version = client.server_version().await.map_err(|e| {
        Error::external(format!(
            "cannot read the forge's version at {url}; explain needs it to read the job there"
        ))
        .caused_by(e)
    })?;
    let forge = match Forge::detect(&version) {
        Ok(f) => format!("{} {version}", f.display_name()),
        Err(_) => format!("the forge ({version})"),
    };
    let Some(run) = find_run(&client, asked, token, &forge).await? else {
        return Ok(View::Missing(format!(
            "{forge} at {url} answers 404 for the runs of {}: it has no runs API (Gitea has it from 1.25) or no such repository; from the dispatcher's view:",
            asked.repository
        )));
    };
    let path = jobs::jobs_path(asked.repository, run.id);
    let body = get(&client, &path, token, url).await?.1;
    let all = jobs::parse_jobs(&body, &run).map_err(|e| not_jobs(url, &path, &e))?;
    let jobs = match asked.job {
        None => all,
        Some(i) => vec![all.get(i).cloned().ok_or_else(|| {
            Error::bad_input(format!(
                "run {} of {} has {} job(s) at {url}; there is no job {i} (counted from 0): check the job's URL",
                asked.run,
                asked.repository,
                all.len()
            ))
        })?],
    };
    Ok(View::Jobs {
        forge,
        repository: asked.repository.to_string(),
        run: asked.run,
        jobs,
    })
}

/// The run numbered `asked.run`: None when the forge has no runs API (404).
async fn find_run(
    client: &RunnerClient,
    asked: &Asked<'_>,
    token: &Secret,
    forge: &str,
) -> Result<Option<Run>> {
    let url = asked.forge_url;
    for page in 1..=jobs::MAX_PAGES {
        let path = jobs::runs_path(asked.repository, asked.run, page);
        let (status, body) = get(client, &path, token, url).await?;
        if status == 404 {
            return Ok(None);
        }
        let (found, empty) =
            jobs::find_run(&body, asked.run).map_err(|e| not_jobs(url, &path, &e))?;
        if let Some(run) = found {
            return Ok(Some(run));
        }
        if empty {
            break;
        }
    }
    Err(Error::bad_input(format!(
        "{forge} at {url} has no run {} in {} (among its {} newest runs): check the job's URL or --run",
        asked.run,
        asked.repository,
        jobs::PAGE * jobs::MAX_PAGES
    )))
}

/// A GET with the token: the status (200 or 404) and the body; a refused token is bad input.
async fn get(
    client: &RunnerClient,
    path: &str,
    token: &Secret,
    url: &str,
) -> Result<(u16, Vec<u8>)> {
    let (status, body) = client
        .api_get("the runs API", path, token, jobs::MAX_ANSWER)
        .await
        .map_err(|e| {
            Error::external(format!(
                "cannot read {url}{path}; explain needs the forge's view of the job"
            ))
            .caused_by(e)
        })?;
    match status {
        200 | 404 => Ok((status, body)),
        401 | 403 => Err(Error::bad_input(format!(
            "the forge at {url} refused the API token (HTTP {status}) for {path}: put a token that may read the repository's actions into --forge-token-file"
        ))),
        _ => Err(Error::external(format!(
            "the forge at {url} answered HTTP {status} for {path}; explain cannot show the forge's view"
        ))),
    }
}

fn not_jobs(url: &str, path: &str, e: &str) -> Error {
    Error::external(format!(
        "the forge at {url} answered {path} with something that is not a runs API answer ({e})"
    ))
}

/// The forge's lines, first in explain's text.
pub fn lines(view: &View, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    let (forge, repository, run, jobs) = match view {
        View::Missing(line) => return vec![format!("forge: {line}")],
        View::Jobs {
            forge,
            repository,
            run,
            jobs,
        } => (forge, repository, run, jobs),
    };
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC");
    jobs.iter()
        .map(|j| {
            let since = match (j.since, j.waits()) {
                (Some(t), true) => format!(", waiting since {} ({})", when(t), age(now - t)),
                (Some(t), false) => format!(", created {}", when(t)),
                (None, _) => String::new(),
            };
            format!(
                "forge: {forge} has job `{}` of run {run} of {repository}: {}, runs-on {}{since}",
                j.name,
                j.status,
                j.runs_on.join(",")
            )
        })
        .collect()
}

fn age(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, s % 3600 / 60),
    }
}
