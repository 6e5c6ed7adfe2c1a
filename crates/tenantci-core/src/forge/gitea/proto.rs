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
    Unspecified = 0,
    Success = 1,
    Failure = 2,
    Cancelled = 3,
    Skipped = 4,
}

/// `runner.v1.RunnerStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RunnerStatus {
    Unspecified = 0,
    Idle = 1,
    Active = 2,
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

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PingRequest {
    #[prost(string, tag = "1")]
    pub data: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PingResponse {
    #[prost(string, tag = "1")]
    pub data: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Runner {
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub uuid: String,
    #[prost(string, tag = "3")]
    pub token: String,
    #[prost(string, tag = "4")]
    pub name: String,
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
    #[prost(string, tag = "8")]
    pub version: String,
    #[prost(string, repeated, tag = "9")]
    pub labels: Vec<String>,
    #[prost(bool, tag = "10")]
    pub ephemeral: bool,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    /// The registration token.
    #[prost(string, tag = "2")]
    pub token: String,
    #[prost(string, repeated, tag = "3")]
    #[serde(alias = "agent_labels")]
    pub agent_labels: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    #[serde(alias = "custom_labels")]
    pub custom_labels: Vec<String>,
    #[prost(string, tag = "5")]
    pub version: String,
    #[prost(string, repeated, tag = "6")]
    pub labels: Vec<String>,
    #[prost(bool, tag = "7")]
    pub ephemeral: bool,
    #[prost(string, repeated, tag = "8")]
    pub capabilities: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner: Option<Runner>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeclareRequest {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(string, repeated, tag = "2")]
    pub labels: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub capabilities: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeclareResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner: Option<Runner>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FetchTaskRequest {
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

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FetchTaskResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
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

    pub fn has_tasks(&self) -> bool {
        self.task.is_some() || !self.additional_tasks.is_empty()
    }
}

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
    #[prost(btree_map = "string, string", tag = "4")]
    pub secrets: BTreeMap<String, String>,
    /// Deprecated by Gitea; still on the wire.
    #[prost(string, tag = "5")]
    pub machine: String,
    #[prost(btree_map = "string, message", tag = "6")]
    pub needs: BTreeMap<String, TaskNeed>,
    #[prost(btree_map = "string, string", tag = "7")]
    pub vars: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskNeed {
    #[prost(btree_map = "string, string", tag = "1")]
    pub outputs: BTreeMap<String, String>,
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateTaskRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Only the outputs not yet sent.
    #[prost(btree_map = "string, string", tag = "2")]
    pub outputs: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateTaskResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    #[prost(string, repeated, tag = "2")]
    #[serde(alias = "sent_outputs")]
    pub sent_outputs: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskState {
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
    #[prost(message, optional, tag = "3")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "started_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<Timestamp>,
    #[prost(message, optional, tag = "4")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "stopped_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub stopped_at: Option<Timestamp>,
    #[prost(message, repeated, tag = "5")]
    pub steps: Vec<StepState>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StepState {
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64")]
    pub id: i64,
    #[prost(enumeration = "TaskResult", tag = "2")]
    #[serde(
        serialize_with = "json::enum_ser::<TaskResult, _>",
        deserialize_with = "json::enum_de::<TaskResult, _>"
    )]
    pub result: i32,
    #[prost(message, optional, tag = "3")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "started_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub started_at: Option<Timestamp>,
    #[prost(message, optional, tag = "4")]
    #[serde(
        with = "json::opt_timestamp",
        alias = "stopped_at",
        skip_serializing_if = "Option::is_none"
    )]
    pub stopped_at: Option<Timestamp>,
    #[prost(int64, tag = "5")]
    #[serde(with = "json::int64", alias = "log_index")]
    pub log_index: i64,
    #[prost(int64, tag = "6")]
    #[serde(with = "json::int64", alias = "log_length")]
    pub log_length: i64,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateLogRequest {
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64", alias = "task_id")]
    pub task_id: i64,
    /// Index of the first row in `rows`.
    #[prost(int64, tag = "2")]
    #[serde(with = "json::int64")]
    pub index: i64,
    #[prost(message, repeated, tag = "3")]
    pub rows: Vec<LogRow>,
    #[prost(bool, tag = "4")]
    #[serde(alias = "no_more")]
    pub no_more: bool,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdateLogResponse {
    #[prost(int64, tag = "1")]
    #[serde(with = "json::int64", alias = "ack_index")]
    pub ack_index: i64,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LogRow {
    #[prost(message, optional, tag = "1")]
    #[serde(with = "json::opt_timestamp", skip_serializing_if = "Option::is_none")]
    pub time: Option<Timestamp>,
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
