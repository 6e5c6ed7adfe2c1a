//! `tenantci dispatch status` and `tenantci dispatch explain`: read a running dispatcher's
//! status API (`/v1/status`, at the config's status.listen) and print it, or why a job waits;
//! for a finished job (and `status --history`), where its time went (`/v1/history`).
//! The model, the reasons and the text are the library's (`tenantci_dispatch::view`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::cli::dispatch_reach::Opened;
pub use crate::cli::dispatch_reach::Reach;
use crate::cli::forge_view::{self, View};
use crate::output::{self, OutputArgs};
use tenantci_core::kube_event;
use tenantci_core::{Error, Result};
use tenantci_dispatch::backend::pod::events;
use tenantci_dispatch::config::Config;
use tenantci_dispatch::task_id::TaskId;
use tenantci_dispatch::view::question::{self, Job};
use tenantci_dispatch::view::{Status, TaskStatus, explain, history, table};

/// `-o` of `dispatch status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// The capacity and the tasks, as `kubectl get` prints.
    #[default]
    Text,
    /// The table with the workflow, run, runs-on labels, executor and node too.
    Wide,
    /// The /v1/status document (JSON Lines with --watch).
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub reach: Reach,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StatusFormat::Text)]
    pub output: StatusFormat,
    /// Print again every --interval until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds between two prints with --watch. Default: 2.
    #[arg(long, value_name = "SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: u64,
    /// The last finished tasks instead, with where their time went: each phase's duration
    /// (forge queue, queue, scheduling, starting, runner start, run, teardown) and the
    /// slowest (`-o json`: the /v1/history document).
    #[arg(long)]
    pub history: bool,
    /// How many finished tasks --history shows, the most recent first.
    #[arg(long, value_name = "N", default_value_t = 20, requires = "history", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub limit: u64,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The job's web URL (https://FORGE/OWNER/REPO/actions/runs/RUN/jobs/JOB).
    #[arg(value_name = "JOB_URL", conflicts_with_all = ["repository", "task"])]
    pub url: Option<String>,
    /// The job's repository (OWNER/NAME), with --run.
    #[arg(long, value_name = "OWNER/NAME", requires = "run")]
    pub repository: Option<String>,
    /// The run's number in its repository (the RUN of its URL), with --repository.
    #[arg(long, value_name = "RUN", requires = "repository", value_parser = clap::value_parser!(i64).range(1..))]
    pub run: Option<i64>,
    /// The dispatcher's task id (the TASK column of `dispatch status`).
    #[arg(long, value_name = "ID", conflicts_with = "repository", value_parser = clap::value_parser!(i64).range(1..))]
    pub task: Option<i64>,
    /// The job's runs-on labels, comma-separated: for a job the dispatcher has not claimed
    /// (or to try other labels for one it holds).
    #[arg(long, value_name = "LABELS", value_delimiter = ',')]
    pub runs_on: Option<Vec<String>>,
    /// The executors' namespace, whose waiting Pod's Events are shown under its reason when
    /// --kubeconfig is given (an operator's: the dispatcher's own role does not read events).
    #[arg(long, value_name = "NAME", default_value = "dynamic-runner")]
    pub executor_namespace: String,
    /// A private (0600) file holding an API token of the forge that may read the
    /// repository's actions: the job's status, runs-on and waiting time are read from the
    /// forge first (Gitea 1.25+, Forgejo with the runs API). Default: the config's
    /// waiting_jobs.token_file, with --config.
    #[arg(long, value_name = "FILE")]
    pub forge_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub reach: Reach,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn status(a: &StatusArgs) -> Result<i32> {
    if a.history {
        return history(a).await;
    }
    loop {
        let s = a.reach.fetch(a.output == StatusFormat::Json).await?;
        match a.output {
            StatusFormat::Json if a.watch => println!(
                "{}",
                serde_json::to_string(&s).expect("the status document serializes")
            ),
            StatusFormat::Json => output::print_json(&s)?,
            StatusFormat::Text | StatusFormat::Wide => {
                if a.watch {
                    println!("--- {}", s.generated_at.format("%H:%M:%S"));
                }
                print!("{}", table::render(&s, a.output == StatusFormat::Wide));
            }
        }
        if !a.watch {
            return Ok(0);
        }
        tokio::time::sleep(Duration::from_secs(a.interval)).await;
    }
}

/// `dispatch status --history`: the last finished tasks and their phases.
async fn history(a: &StatusArgs) -> Result<i32> {
    let query = [
        ("finished", "true".to_string()),
        ("limit", a.limit.to_string()),
    ];
    let opened = a.reach.open().await?;
    let doc = opened.history(&query).await?;
    opened.announce(a.output == StatusFormat::Json);
    match a.output {
        StatusFormat::Json => output::print_json(&doc)?,
        StatusFormat::Text | StatusFormat::Wide => print!("{}", history::table(&doc)),
    }
    Ok(0)
}

/// `dispatch explain` on a job the dispatcher no longer holds: its history, the phases and
/// the slowest one's cause; exit 0 when every task of it finished, 1 while one has not, and
/// 2 (one sentence) for a job this dispatcher never saw.
async fn explain_finished(
    a: &ExplainArgs,
    job: &Job,
    opened: &Opened,
    view: Option<&View>,
) -> Result<i32> {
    let query: Vec<(&str, String)> = match job {
        Job::Task(t) => vec![("task", t.to_string())],
        Job::Run {
            repository, run, ..
        } => vec![("repository", repository.clone()), ("run", run.to_string())],
    };
    let doc = opened.history(&query).await?;
    if doc.tasks.is_empty() {
        return Err(Error::bad_input(format!(
            "this dispatcher holds no task for {} and never saw it: its history (kept for history.max_age, at most history.max_tasks tasks) has none; check the job's URL, or ask the dispatcher that ran it",
            asked(job)
        )));
    }
    let tasks = match forge_created(view) {
        // One job at the forge, one task here: the forge's creation time is that task's.
        Some(created) if doc.tasks.len() == 1 => {
            vec![history::with_created(&doc.tasks[0], created)]
        }
        _ => doc.tasks,
    };
    if a.output.is_json() {
        output::print_json(&tasks)?;
    } else {
        for line in view
            .iter()
            .flat_map(|v| forge_view::lines(v, chrono::Utc::now()))
        {
            println!("{line}");
        }
        for t in &tasks {
            print!("{}", history::explain(t));
        }
    }
    Ok(if tasks.iter().all(|t| t.finished) {
        0
    } else {
        1
    })
}

/// When the forge created the job, where its view has exactly one job with that time.
fn forge_created(view: Option<&View>) -> Option<chrono::DateTime<chrono::Utc>> {
    match view {
        Some(View::Jobs { jobs, .. }) if jobs.len() == 1 => jobs[0].since,
        _ => None,
    }
}

/// The job asked about, checked before the dispatcher is asked (bad input: exit 2).
fn job(a: &ExplainArgs) -> Result<Option<Job>> {
    if let Some(url) = &a.url {
        return question::parse_url(url).map(Some).map_err(Error::bad_input);
    }
    if let (Some(repository), Some(run)) = (&a.repository, a.run) {
        if repository.split('/').filter(|p| !p.is_empty()).count() != 2 {
            return Err(Error::bad_input(format!(
                "--repository `{repository}` is not OWNER/NAME; give it as the job's URL shows it"
            )));
        }
        let (origin, repository, run) = (None, repository.clone(), run);
        return Ok(Some(Job::Run {
            origin,
            repository,
            run,
            job: None,
        }));
    }
    if let Some(task) = a.task {
        return Ok(Some(Job::Task(TaskId::new(task))));
    }
    if a.runs_on
        .as_ref()
        .is_none_or(|l| l.iter().all(|l| l.trim().is_empty()))
    {
        return Err(Error::bad_input(
            "name the job: its URL, --repository and --run, --task, or --runs-on LABELS for a job not yet created",
        ));
    }
    Ok(None)
}

/// One job's explanation, for `-o json`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Explained<'s> {
    task: Option<&'s TaskStatus>,
    runs_on: Vec<String>,
    will_run: bool,
    reasons: Vec<explain::Reason>,
    /// The executor Pod's Events, with --kubeconfig, when it waits for a node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<String>,
    /// The forge's view of the job, when it was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    forge: Option<ForgeSide>,
}

/// The forge's view in `-o json`: its jobs, or why it is missing.
#[derive(Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ForgeSide {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    jobs: Vec<tenantci_core::forge::jobs::ForgeJob>,
    #[serde(skip_serializing_if = "Option::is_none")]
    missing: Option<String>,
}

pub async fn explain(a: &ExplainArgs) -> Result<i32> {
    let job = job(a)?;
    let opened = a.reach.open().await?;
    let s = opened.status().await?;
    opened.announce(a.output.is_json());
    let view = match &job {
        Some(j) => forge_view(a, &s, j).await?,
        None => None,
    };
    // The forge's runs-on stand in for --runs-on when the dispatcher holds no task for it.
    let runs_on = a.runs_on.clone().or_else(|| match &view {
        Some(View::Jobs { jobs, .. }) => jobs.iter().find(|j| j.waits()).map(|j| j.runs_on.clone()),
        _ => None,
    });
    // A job it does not hold, no labels to try (none given, none waiting at the forge):
    // where its time went, if it ran here.
    if let Some(j) = &job
        && runs_on.is_none()
        && question::find(&s, j).is_empty()
    {
        question::check_forge(j, &s).map_err(Error::bad_input)?;
        return explain_finished(a, j, &opened, view.as_ref()).await;
    }
    let mut explained = explained(&s, job.as_ref(), runs_on.as_deref())?;
    if let Some(kubeconfig) = &a.reach.cluster.kubeconfig {
        // A status reader's grant (the Role tenantci-status-reader) reads no Events: the
        // reasons stand without them.
        let context = a.reach.cluster.context.as_deref();
        if let Err(e) = pod_events(&mut explained, kubeconfig, context, &a.executor_namespace).await
        {
            eprintln!("{}", e.render().replacen("error: ", "warning: ", 1));
        }
    }
    let side = view.as_ref().map(|v| match v {
        View::Jobs { jobs, .. } => ForgeSide {
            jobs: jobs.clone(),
            missing: None,
        },
        View::Missing(line) => ForgeSide {
            jobs: Vec::new(),
            missing: Some(line.clone()),
        },
    });
    for e in &mut explained {
        e.forge = side.clone();
    }
    if a.output.is_json() {
        output::print_json(&explained)?;
    } else {
        for line in view
            .iter()
            .flat_map(|v| forge_view::lines(v, chrono::Utc::now()))
        {
            println!("{line}");
        }
        for e in &explained {
            print!("{}", table::explanation(e.task, &e.runs_on, &e.reasons));
            for line in &e.events {
                println!("    event: {line}");
            }
        }
        if !s.leader {
            println!(
                "note: {} is a standby; the leader claims and holds the tasks",
                s.instance
            );
        }
    }
    Ok(if explained.iter().all(|e| e.will_run) {
        0
    } else {
        1
    })
}

fn explained<'s>(
    s: &'s Status,
    job: Option<&Job>,
    runs_on: Option<&[String]>,
) -> Result<Vec<Explained<'s>>> {
    let one = |task: Option<&'s TaskStatus>, labels: Vec<String>| {
        let reasons = explain::reasons(s, &labels, task);
        Explained {
            task,
            will_run: reasons.is_empty(),
            runs_on: labels,
            reasons,
            events: Vec::new(),
            forge: None,
        }
    };
    let Some(job) = job else {
        return Ok(vec![one(None, runs_on.unwrap_or_default().to_vec())]);
    };
    question::check_forge(job, s).map_err(Error::bad_input)?;
    let found = question::find(s, job);
    if found.is_empty() {
        return match runs_on {
            Some(labels) => Ok(vec![one(None, labels.to_vec())]),
            None => Err(Error::bad_input(format!(
                "this dispatcher holds no task for {}: not claimed yet, finished, or another dispatcher's; add --runs-on LABELS (the job's runs-on) to see why such a job would wait",
                asked(job)
            ))),
        };
    }
    Ok(found
        .into_iter()
        .map(|t| {
            one(
                Some(t),
                runs_on.map_or_else(|| t.runs_on.clone(), <[String]>::to_vec),
            )
        })
        .collect())
}

/// The forge's view of a job named by its run (a URL, or --repository and --run), after the
/// URL is checked to be this dispatcher's forge; None for a task id.
async fn forge_view(a: &ExplainArgs, s: &Status, job: &Job) -> Result<Option<View>> {
    let Job::Run {
        repository,
        run,
        job: index,
        ..
    } = job
    else {
        return Ok(None);
    };
    question::check_forge(job, s).map_err(Error::bad_input)?;
    let config = match &a.reach.config {
        Some(path) if a.reach.status_address.is_none() => Some(Config::load(path)?),
        _ => None,
    };
    let token_file = a.forge_token_file.clone().or_else(|| {
        config
            .as_ref()
            .and_then(|c| c.waiting_jobs.as_ref())
            .map(|w| w.token_file.clone())
    });
    let Some(token_file) = token_file else {
        return Ok(Some(View::Missing(
            "not read: give --forge-token-file FILE (a 0600 file with an API token of the forge) to see the job's status there; from the dispatcher's view:".to_string(),
        )));
    };
    let token = forge_view::read_token(&token_file)?;
    let ca_pem = match config.as_ref().and_then(|c| c.gitea.ca_file.as_deref()) {
        Some(ca) => Some(tenantci_core::pki::inspect::read_ca_file(
            "the Gitea CA file (gitea.ca_file)",
            ca,
            "put the CA certificate (PEM) that signed the forge's certificate into it",
        )?),
        None => None,
    };
    let asked = forge_view::Asked {
        forge_url: &s.summary.forge.url,
        ca_pem,
        repository,
        run: *run,
        job: *index,
    };
    forge_view::read(&asked, &token).await.map(Some)
}

/// The Events of each explained task whose executor Pod waits (reason `executor`).
async fn pod_events(
    explained: &mut [Explained<'_>],
    kubeconfig: &Path,
    context: Option<&str>,
    namespace: &str,
) -> Result<()> {
    let client = tenantci_dispatch::reach::client(Some(kubeconfig), context).await?;
    for e in explained {
        let Some(task) = e
            .task
            .filter(|_| e.reasons.iter().any(|r| r.kind == "executor"))
        else {
            continue;
        };
        let events = events::of_task(&client, namespace, task.task).await.map_err(|err| {
            Error::external(format!(
                "cannot read the Events of task {}'s executor Pod in namespace {namespace}; the reasons above stand without them",
                task.task
            ))
            .caused_by(err)
        })?;
        e.events = events.iter().map(kube_event::line).collect();
    }
    Ok(())
}

fn asked(job: &Job) -> String {
    match job {
        Job::Task(t) => format!("task {t}"),
        Job::Run {
            repository, run, ..
        } => format!("run {run} of {repository}"),
    }
}
