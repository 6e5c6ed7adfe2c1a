//! `tenantci runner status` and `tenantci runner explain`: the operator's view of a
//! gitlab-runner entry. Flags become [`tenantci_runner::gitlab::status`] and
//! [`tenantci_runner::gitlab::explain`] inputs here; the library gathers and plans.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::output::{self, OutputArgs};
use tenantci_core::Result;
use tenantci_runner::gitlab::{explain, status};

/// Which entry, and GitLab's access token: shared by both commands.
#[derive(Debug, Args)]
pub struct EntryArgs {
    /// gitlab-runner's config.toml.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/etc/gitlab-runner/config.toml"
    )]
    pub config: PathBuf,
    /// The entry's name. Default: the only kubernetes entry in the file.
    #[arg(long, value_name = "RUNNER")]
    pub name: Option<String>,
    /// A file (mode 0600) holding a GitLab access token with the `read_api` scope (or `api`):
    /// a personal, group or project access token of a user who may see the runner and the
    /// project. The runner's own token (glrt-) answers only the runner API.
    #[arg(long, value_name = "FILE")]
    pub gitlab_api_token_file: Option<PathBuf>,
}

impl EntryArgs {
    fn inputs(&self) -> status::Inputs {
        status::Inputs {
            config: self.config.clone(),
            name: self.name.clone(),
            api_token_file: self.gitlab_api_token_file.clone(),
        }
    }
}

/// `-o` of `runner status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// The runner, its concurrency and its job Pods, as `kubectl get` prints.
    #[default]
    Text,
    /// The Pods' table with the ref, commit, node source and job URL too.
    Wide,
    /// One JSON document (JSON Lines with --watch).
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub entry: EntryArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StatusFormat::Text)]
    pub output: StatusFormat,
    /// Print again every --interval until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds between two prints with --watch. Default: 2.
    #[arg(long, value_name = "SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: u64,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The job's web URL (https://GITLAB/GROUP/PROJECT/-/jobs/ID), or its id with --project.
    #[arg(value_name = "JOB")]
    pub job: String,
    /// The job's project (its id, or GROUP/PROJECT), when JOB is an id.
    #[arg(long, value_name = "ID|PATH")]
    pub project: Option<String>,
    #[command(flatten)]
    pub entry: EntryArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub async fn status(a: &StatusArgs) -> Result<i32> {
    let inputs = a.entry.inputs();
    loop {
        let s = status::run(&inputs, now()).await?;
        match a.output {
            StatusFormat::Json if a.watch => println!(
                "{}",
                serde_json::to_string(&s).expect("the status document serializes")
            ),
            StatusFormat::Json => output::print_json(&s)?,
            StatusFormat::Text | StatusFormat::Wide => {
                if a.watch {
                    println!("--- {}", chrono::Utc::now().format("%H:%M:%S"));
                }
                print!(
                    "{}",
                    status::table::render(&s, a.output == StatusFormat::Wide)
                );
            }
        }
        if !a.watch {
            return Ok(0);
        }
        tokio::time::sleep(Duration::from_secs(a.interval)).await;
    }
}

pub async fn explain(a: &ExplainArgs) -> Result<i32> {
    let e = &a.entry;
    let explained = explain::run(
        &explain::Inputs {
            config: e.config.clone(),
            name: e.name.clone(),
            api_token_file: e.gitlab_api_token_file.clone(),
            job: a.job.clone(),
            project: a.project.clone(),
        },
        now(),
    )
    .await?;
    if a.output.is_json() {
        output::print_json(&explained)?;
    } else {
        print!("{}", explain::render(&explained));
    }
    Ok(explained.verdict.exit_code())
}
