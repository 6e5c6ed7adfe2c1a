//! `runner.v1` and `ping.v1` messages, derived by hand from the field table in
//! docs/gitea-protocol.md (no protoc here). Field numbers are the contract: the unit
//! tests pin every message against hand-encoded bytes, so a wrong tag fails.
//!
//! Every message also carries the protojson mapping Connect uses for `application/json`
//! (lowerCamelCase names, proto names accepted on input, int64 as strings, enums by name,
//! Timestamp as RFC 3339, bytes as base64, Struct as a JSON object); see `json`.
//! Maps are `BTreeMap` so encodings are deterministic.
//!
//! Naming: the proto enum `runner.v1.Result` is [`TaskResult`] here so it does not shadow
//! `std::result::Result`.

use std::collections::BTreeMap;

use prost_types::{Struct, Timestamp};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

use super::json;
pub use super::json::ProtoEnum;

/// `runner.v1.Result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum TaskResult {
    /// No result yet: the task or step is still running.
    Unspecified = 0,
    /// Finished successfully.
    Success = 1,
    /// Finished with a failure.
    Failure = 2,
    /// Cancelled (the answer to UpdateTask says so when the job was cancelled on the forge).
    Cancelled = 3,
    /// Skipped, not run (its condition was false, or a job it needs failed).
    Skipped = 4,
}

/// `runner.v1.RunnerStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RunnerStatus {
    /// No status given.
    Unspecified = 0,
    /// Online, running no task.
    Idle = 1,
    /// Running a task.
    Active = 2,
    /// Not seen for a while.
    Offline = 3,
}

impl ProtoEnum for TaskResult {
    const NAMES: &'static [(&'static str, i32)] = &[
        ("RESULT_UNSPECIFIED", 0),
        ("RESULT_SUCCESS", 1),
        ("RESULT_FAILURE", 2),
        ("RESULT_CANCELLED", 3),
        ("RESULT_SKIPPED", 4),
    ];
}

impl ProtoEnum for RunnerStatus {
    const NAMES: &'static [(&'static str, i32)] = &[
        ("RUNNER_STATUS_UNSPECIFIED", 0),
        ("RUNNER_STATUS_IDLE", 1),
        ("RUNNER_STATUS_ACTIVE", 2),
        ("RUNNER_STATUS_OFFLINE", 3),
    ];
}

impl TaskResult {
    /// A task whose result is set is finished.
    pub fn is_final(self) -> bool {
        self != TaskResult::Unspecified
    }
}

/// `ping.v1.PingRequest`: a reachability check that needs no credentials.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PingRequest {
    /// Any text; the server answers `Hello, <data>!`.
    #[prost(string, tag = "1")]
    pub data: String,
}

/// `ping.v1.PingResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PingResponse {
    /// The server's greeting, `Hello, <data>!`.
    #[prost(string, tag = "1")]
    pub data: String,
}

/// `runner.v1.Runner`: a registered runner as the forge records it.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Runner {
    /// The runner's database id on the forge.
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    /// The runner's UUID, sent as `x-runner-uuid` on every call after Register.
    #[prost(string, tag = "2")]
    pub uuid: String,
    /// The runner's secret token, sent as `x-runner-token`; a credential (prost's `Debug` prints
    /// it).
    #[prost(string, tag = "3")]
    pub token: String,
    /// The runner's display name on the forge.
    #[prost(string, tag = "4")]
    pub name: String,
    /// A [`RunnerStatus`] value, as its number.
    #[prost(enumeration = "RunnerStatus", tag = "5")]
    #[serde(
        serialize_with = "json::enum_ser::<RunnerStatus, _>",
        deserialize_with = "json::enum_de::<RunnerStatus, _>"
    )]
    pub status: i32,
    /// Deprecated by Gitea; still on the wire.
    #[prost(string, repeated, tag = "6")]
    #[serde(alias = "agent_labels")]
    pub agent_labels: Vec<String>,
    /// Deprecated by Gitea; still on the wire.
    #[prost(string, repeated, tag = "7")]
    #[serde(alias = "custom_labels")]
    pub custom_labels: Vec<String>,
    /// The runner software's version, as last registered or declared.
    #[prost(string, tag = "8")]
    pub version: String,
    /// The label names the runner takes jobs for (names only, no `:schema`).
    #[prost(string, repeated, tag = "9")]
    pub labels: Vec<String>,
    /// Whether the forge deletes the runner after its first task finishes.
    #[prost(bool, tag = "10")]
    pub ephemeral: bool,
}

/// `runner.v1.RegisterRequest`: registers a runner with a registration token.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterRequest {
    /// The display name for the new runner; the forge refuses an empty one.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The registration token.
    #[prost(string, tag = "2")]
    pub token: String,
    /// Deprecated by Gitea; an old runner's labels, read as `labels` when those are empty.
    #[prost(string, repeated, tag = "3")]
    #[serde(alias = "agent_labels")]
    pub agent_labels: Vec<String>,
    /// Deprecated by Gitea; an old runner's labels, read as `labels` when those are empty.
    #[prost(string, repeated, tag = "4")]
    #[serde(alias = "custom_labels")]
    pub custom_labels: Vec<String>,
    /// The runner software's version.
    #[prost(string, tag = "5")]
    pub version: String,
    /// The label names the runner takes jobs for.
    #[prost(string, repeated, tag = "6")]
    pub labels: Vec<String>,
    /// Whether the runner takes one task and is then deleted (tenantci never sets it).
    #[prost(bool, tag = "7")]
    pub ephemeral: bool,
    /// Features the runner supports (e.g. `cancelling`); Gitea 1.24+.
    #[prost(string, repeated, tag = "8")]
    pub capabilities: Vec<String>,
}

/// `runner.v1.RegisterResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterResponse {
    /// The registered runner, with the UUID and token for later calls (the client treats `None`
    /// as an undecodable answer).
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner: Option<Runner>,
}

/// `runner.v1.DeclareRequest`: a registered runner states its version and labels at start.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeclareRequest {
    /// The runner software's version.
    #[prost(string, tag = "1")]
    pub version: String,
    /// The label names the runner takes jobs for; they replace the registered ones.
    #[prost(string, repeated, tag = "2")]
    pub labels: Vec<String>,
    /// Features the runner supports (e.g. `cancelling`); Gitea 1.24+.
    #[prost(string, repeated, tag = "3")]
    pub capabilities: Vec<String>,
}

/// `runner.v1.DeclareResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeclareResponse {
    /// The runner as the forge records it after the declaration.
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner: Option<Runner>,
}

/// `runner.v1.FetchTaskRequest`: asks for the next waiting task (one call, never long-polled).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FetchTaskRequest {
    /// The latest tasks version the runner has seen (0 after it received a task); when it equals
    /// the forge's, the forge answers at once with no task.
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64", alias = "tasks_version")]
    pub tasks_version: i64,
    /// Forgejo only (proto3 `optional`): how many tasks this answer may carry. Gitea ignores
    /// the unknown field and picks one. Tag: docs/forgejo-protocol.md.
    #[prost(int64, optional, tag = "2")]
    #[serde(
        with = "json::opt_int64",
        alias = "task_capacity",
        skip_serializing_if = "Option::is_none"
    )]
    pub task_capacity: Option<i64>,
}

/// `runner.v1.FetchTaskResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FetchTaskResponse {
    /// The task assigned to the caller; `None` when no task waits.
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// The forge's current tasks version, for the next FetchTask.
    #[prost(int64, tag = "2")]
    #[serde(with = "json::int64", alias = "tasks_version")]
    pub tasks_version: i64,
    /// Forgejo only: the tasks beyond `task`, up to the request's `task_capacity` less one.
    /// Forgejo 14.0.0 and 14.0.1 could put every task here and leave `task` empty: read both.
    #[prost(message, repeated, tag = "3")]
    #[serde(alias = "additional_tasks", skip_serializing_if = "Vec::is_empty")]
    pub additional_tasks: Vec<Task>,
}

impl FetchTaskResponse {
    /// Every task this answer assigns: `task`, then `additional_tasks`.
    pub fn into_tasks(self) -> Vec<Task> {
        self.task.into_iter().chain(self.additional_tasks).collect()
    }

    /// Whether this answer assigns at least one task (in `task` or `additional_tasks`).
    pub fn has_tasks(&self) -> bool {
        self.task.is_some() || !self.additional_tasks.is_empty()
    }
}

/// `runner.v1.Task`: one job assigned to a runner.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Task {
    /// Never reused: a re-run is a new task id.
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    /// The expanded single-job workflow YAML.
    #[prost(bytes = "vec", optional, tag = "2")]
    #[serde(
        with = "json::opt_bytes",
        alias = "workflow_payload",
        skip_serializing_if = "Option::is_none"
    )]
    pub workflow_payload: Option<Vec<u8>>,
    /// The github-style context plus `token` (job token) and `gitea_runtime_token`.
    #[prost(message, optional, tag = "3")]
    #[serde(with = "json::opt_struct", skip_serializing_if = "Option::is_none")]
    pub context: Option<Struct>,
    /// The job's secrets by name.
    #[prost(btree_map = "string, string", tag = "4")]
    pub secrets: BTreeMap<String, String>,
    /// Deprecated by Gitea; still on the wire.
    #[prost(string, tag = "5")]
    pub machine: String,
    /// The results and outputs of the jobs this job needs, by job id.
    #[prost(btree_map = "string, message", tag = "6")]
    pub needs: BTreeMap<String, TaskNeed>,
    /// The configuration variables (`vars`) the job sees, by name.
    #[prost(btree_map = "string, string", tag = "7")]
    pub vars: BTreeMap<String, String>,
}

/// `runner.v1.TaskNeed`: what a needed job left for this one.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskNeed {
    /// The needed job's outputs by name.
    #[prost(btree_map = "string, string", tag = "1")]
    pub outputs: BTreeMap<String, String>,
    /// The needed job's [`TaskResult`], as its number.
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
}

/// `runner.v1.UpdateTaskRequest`: reports a task's progress or end, and new outputs.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateTaskRequest {
    /// The task's state; required (a call without one fails).
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Only the outputs not yet sent.
    #[prost(btree_map = "string, string", tag = "2")]
    pub outputs: BTreeMap<String, String>,
}

/// `runner.v1.UpdateTaskResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateTaskResponse {
    /// The task as the forge sees it: its `result` is `Cancelled` when the job was cancelled there.
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// The names of this request's outputs, now stored (the forge keeps the first value sent for
    /// each name).
    #[prost(string, repeated, tag = "2")]
    #[serde(alias = "sent_outputs")]
    pub sent_outputs: Vec<String>,
}

/// `runner.v1.TaskState`: a task's result, times and steps.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskState {
    /// The task id ([`Task::id`]).
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    /// A [`TaskResult`] value, as its number; any value but `Unspecified` finishes the task.
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
    /// When the task started; `None` if not yet.
    #[prost(message, optional, tag = "3")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "started_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<Timestamp>,
    /// When the task stopped; `None` while it runs.
    #[prost(message, optional, tag = "4")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "stopped_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub stopped_at: Option<Timestamp>,
    /// The state of each step, in step order.
    #[prost(message, repeated, tag = "5")]
    pub steps: Vec<StepState>,
}

/// `runner.v1.StepState`: one step's result, times and place in the task's log.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StepState {
    /// The step's index in the job.
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    /// A [`TaskResult`] value, as its number.
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
    /// When the step started; `None` if not yet.
    #[prost(message, optional, tag = "3")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "started_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<Timestamp>,
    /// When the step stopped; `None` while it runs.
    #[prost(message, optional, tag = "4")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "stopped_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub stopped_at: Option<Timestamp>,
    /// The index of the step's first row in the task's log.
    #[prost(int64, tag = "5")]
    #[serde(with = "json::int64", alias = "log_index")]
    pub log_index: i64,
    /// How many log rows the step wrote.
    #[prost(int64, tag = "6")]
    #[serde(with = "json::int64", alias = "log_length")]
    pub log_length: i64,
}

/// `runner.v1.UpdateLogRequest`: appends rows to a task's log.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateLogRequest {
    /// The task whose log this is ([`Task::id`]).
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64", alias = "task_id")]
    pub task_id: i64,
    /// Index of the first row in `rows`.
    #[prost(int64, tag = "2")]
    #[serde(with = "json::int64")]
    pub index: i64,
    /// The rows, in order, starting at row `index`.
    #[prost(message, repeated, tag = "3")]
    pub rows: Vec<LogRow>,
    /// The log is complete: the forge archives it and refuses further rows (`already_exists`).
    #[prost(bool, tag = "4")]
    #[serde(alias = "no_more")]
    pub no_more: bool,
}

/// `runner.v1.UpdateLogResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateLogResponse {
    /// How many rows the forge has stored: the index the next request starts at.
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64", alias = "ack_index")]
    pub ack_index: i64,
}

/// `runner.v1.LogRow`: one line of a task's log.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LogRow {
    /// When the line was written.
    #[prost(message, optional, tag = "1")]
    #[serde(with = "json::opt_timestamp", skip_serializing_if = "Option::is_none")]
    pub time: Option<Timestamp>,
    /// The line's text, without its line ending.
    #[prost(string, tag = "2")]
    pub content: String,
}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;

/// A protobuf Timestamp for `t` (times before 1970 become the epoch).
pub fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
