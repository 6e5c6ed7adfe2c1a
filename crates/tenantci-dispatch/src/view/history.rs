//! Where finished tasks' time went, as `GET /v1/history` answers it, `dispatch status
//! --history` prints it, `dispatch explain` tells one and the status page draws it (pure):
//! [`build`] turns the task history's records (`task::history`) into a [`HistoryDoc`], the
//! newest first, each with its phases, durations and slowest phase with its likely cause.
//!
//! Invariant, as for the status: nothing secret (ids, names, times, a result name). The
//! field names are the `v1` contract (docs/cli.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::question::Job;
use crate::task::history::{Decoded, Mark, Record, VERSION};
use crate::task_id::TaskId;

/// `GET /v1/history`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryDoc {
    /// `v1`.
    pub api_version: String,
    /// The record version this dispatcher reads ([`VERSION`]).
    pub record_version: u32,
    /// The tasks asked for, the most recent first.
    pub tasks: Vec<TaskHistory>,
    /// Records this dispatcher cannot read (written by a newer release).
    #[serde(default)]
    pub unreadable: Vec<Unreadable>,
}

/// One task's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHistory {
    /// The forge's task id.
    pub task: TaskId,
    /// `owner/name`, where known.
    pub repository: Option<String>,
    /// The run's number, where known.
    pub run: Option<i64>,
    /// The backend it ran on.
    pub backend: Option<String>,
    /// Its resource class.
    pub class: Option<String>,
    /// The final result's proto name, once reported.
    pub result: Option<String>,
    /// The forge accepted its final state.
    pub finished: bool,
    /// Each mark passed (`claimed`, `scheduled`, ...) and when.
    pub marks: BTreeMap<Mark, DateTime<Utc>>,
    /// When its executor was first seen waiting for a node (a rented one booting); absent:
    /// it went to a node that was there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for_node: Option<DateTime<Utc>>,
    /// The phases between the marks, in order.
    pub phases: Vec<PhaseTime>,
    /// From its first mark to its last, in seconds.
    pub total_seconds: f64,
    /// The longest phase, with its likely cause.
    pub slowest: Option<Slowest>,
}

/// One phase of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    /// Its name (`scheduling`).
    pub phase: String,
    /// The mark it starts at (an earlier one than its own when marks are missing).
    pub from: Mark,
    /// The mark it ends at.
    pub to: Mark,
    /// When it started.
    pub start: DateTime<Utc>,
    /// How long it took.
    pub seconds: f64,
}

/// The longest phase and what it usually means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slowest {
    /// Its name.
    pub phase: String,
    /// How long it took.
    pub seconds: f64,
    /// Its likely cause, in the operator's words.
    pub cause: String,
}

/// A record this release does not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    /// Its task.
    pub task: TaskId,
    /// The version it carries.
    pub version: u64,
}

/// Which tasks `/v1/history` answers with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Only this task.
    pub task: Option<TaskId>,
    /// Only this repository (`owner/name`, any case).
    pub repository: Option<String>,
    /// Only this run (with `repository`).
    pub run: Option<i64>,
    /// Finished tasks only.
    pub finished: bool,
    /// At most this many, the most recent first.
    pub limit: usize,
}

impl Query {
    fn matches(&self, r: &Record) -> bool {
        self.task.is_none_or(|t| r.task == t)
            && self.repository.as_ref().is_none_or(|want| {
                r.repository
                    .as_ref()
                    .is_some_and(|have| have.eq_ignore_ascii_case(want))
            })
            && self.run.is_none_or(|run| r.run == Some(run))
            && (!self.finished || r.finished())
    }

    /// The query that finds `job` (every record of its run, or its task).
    pub fn of_job(job: &Job, limit: usize) -> Query {
        match job {
            Job::Task(t) => Query {
                task: Some(*t),
                limit,
                ..Query::default()
            },
            Job::Run {
                repository, run, ..
            } => Query {
                repository: Some(repository.clone()),
                run: Some(*run),
                limit,
                ..Query::default()
            },
        }
    }
}

/// The records `q` asks for, the most recent first (pure).
pub fn build<'a>(records: impl IntoIterator<Item = &'a Decoded>, q: &Query) -> HistoryDoc {
    let mut tasks = Vec::new();
    let mut unreadable = Vec::new();
    for d in records {
        match d {
            Decoded::Record(r) if q.matches(r) => tasks.push(r),
            Decoded::Record(_) => {}
            Decoded::Newer { task, version } => unreadable.push(Unreadable {
                task: *task,
                version: *version,
            }),
        }
    }
    tasks.sort_by_key(|r| std::cmp::Reverse((r.last_at(), r.task)));
    HistoryDoc {
        api_version: super::API_VERSION.to_string(),
        record_version: VERSION,
        tasks: tasks.into_iter().take(q.limit).map(task_history).collect(),
        unreadable,
    }
}

fn task_history(r: &Record) -> TaskHistory {
    TaskHistory {
        task: r.task,
        repository: r.repository.clone(),
        run: r.run,
        backend: r.backend.clone(),
        class: r.class.clone(),
        result: r.result.clone(),
        finished: r.finished(),
        marks: r.marks.clone(),
        waited_for_node: r.waited_for_node,
        phases: r
            .phases()
            .iter()
            .map(|s| PhaseTime {
                phase: s.phase.name().to_string(),
                from: s.from,
                to: s.to,
                start: s.start,
                seconds: s.took.as_secs_f64(),
            })
            .collect(),
        total_seconds: r.total().as_secs_f64(),
        slowest: r.slowest().map(|s| Slowest {
            phase: s.phase.name().to_string(),
            seconds: s.took.as_secs_f64(),
            cause: r.cause(s.phase).to_string(),
        }),
    }
}

/// `t` with the forge's own creation time of its job (`created`, from the forge's jobs API):
/// the `forge_queue` phase, from the job's creation to its claim, joins it (pure).
pub fn with_created(t: &TaskHistory, created: DateTime<Utc>) -> TaskHistory {
    let mut r = Record::new(t.task);
    r.repository.clone_from(&t.repository);
    r.run = t.run;
    r.backend.clone_from(&t.backend);
    r.class.clone_from(&t.class);
    r.result.clone_from(&t.result);
    r.marks.clone_from(&t.marks);
    r.waited_for_node = t.waited_for_node;
    r.marks
        .entry(Mark::Created)
        .and_modify(|at| *at = (*at).min(created))
        .or_insert(created);
    task_history(&r)
}

/// A duration as the tables show it: `0.4s`, `12s`, `3m05s`, `1h02m`.
pub fn short(seconds: f64) -> String {
    if seconds < 10.0 {
        return format!("{seconds:.1}s");
    }
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `dispatch status --history`'s text: one line per task, a column per phase (pure).
pub fn table(doc: &HistoryDoc) -> String {
    let mut out = String::new();
    if doc.tasks.is_empty() {
        out.push_str("no finished task in the history yet\n");
    } else {
        let phases = crate::task::history::Phase::ALL;
        let _ = write!(out, "{:<8} {:<24} {:<16}", "TASK", "JOB", "RESULT");
        for p in phases {
            let _ = write!(out, " {:>12}", p.name().to_uppercase());
        }
        let _ = writeln!(out, " {:>9}  SLOWEST", "TOTAL");
        for t in &doc.tasks {
            let job = match (&t.repository, t.run) {
                (Some(r), Some(n)) => format!("{r}#{n}"),
                (Some(r), None) => r.clone(),
                _ => "-".into(),
            };
            let result = t
                .result
                .as_deref()
                .unwrap_or("-")
                .trim_start_matches("RESULT_");
            let _ = write!(out, "{:<8} {job:<24} {result:<16}", t.task.get());
            for p in phases {
                let took = t.phases.iter().find(|x| x.phase == p.name());
                let cell = took.map_or("-".to_string(), |x| short(x.seconds));
                let _ = write!(out, " {cell:>12}");
            }
            let slowest = t.slowest.as_ref().map_or("-", |s| s.phase.as_str());
            let _ = writeln!(out, " {:>9}  {slowest}", short(t.total_seconds));
        }
    }
    for u in &doc.unreadable {
        let _ = writeln!(
            out,
            "task {}: written by a newer tenantci (history record version {}, this one reads {}); upgrade this command to read it",
            u.task.get(),
            u.version,
            doc.record_version
        );
    }
    out
}

/// `dispatch explain` on a finished task: its phases and the slowest one's cause (pure).
pub fn explain(t: &TaskHistory) -> String {
    let mut out = String::new();
    let job = match (&t.repository, t.run) {
        (Some(r), Some(n)) => format!(" ({r}, run {n})"),
        _ => String::new(),
    };
    let result = t.result.as_deref().unwrap_or("no result recorded");
    let state = if t.finished {
        "finished"
    } else {
        "not finished"
    };
    let _ = writeln!(
        out,
        "task {}{job}: {state}, {result}, {} in all",
        t.task.get(),
        short(t.total_seconds)
    );
    for p in &t.phases {
        let _ = writeln!(
            out,
            "  {:<13} {:>9}  {} -> {}",
            p.phase,
            short(p.seconds),
            p.from.name(),
            p.to.name()
        );
    }
    match &t.slowest {
        Some(s) => {
            let _ = writeln!(
                out,
                "slowest: {} ({}): {}",
                s.phase,
                short(s.seconds),
                s.cause
            );
        }
        None => out.push_str("slowest: unknown (fewer than two marks recorded)\n"),
    }
    out
}

#[cfg(test)]
mod tests;
