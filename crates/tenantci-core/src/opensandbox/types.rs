//! The Lifecycle API's JSON as tenantci sends and reads it: `CreateSandboxRequest` (only the
//! fields tenantci sets), `Sandbox`, the list page, the `{code, message}` error body, and the
//! lifecycle state, which tolerates values added after this was written.
//!
//! `Debug` of a create request omits the env values: they carry the executor's capability.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Secret;

/// A sandbox's lifecycle state. New values may be added by the API: kept as `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    Pending,
    Running,
    Pausing,
    Paused,
    Resuming,
    Stopping,
    Terminated,
    Failed,
    Other(String),
}

impl SandboxState {
    pub fn parse(s: &str) -> Self {
        match s {
            "Pending" => SandboxState::Pending,
            "Running" => SandboxState::Running,
            "Pausing" => SandboxState::Pausing,
            "Paused" => SandboxState::Paused,
            "Resuming" => SandboxState::Resuming,
            "Stopping" => SandboxState::Stopping,
            "Terminated" => SandboxState::Terminated,
            "Failed" => SandboxState::Failed,
            other => SandboxState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            SandboxState::Pending => "Pending",
            SandboxState::Running => "Running",
            SandboxState::Pausing => "Pausing",
            SandboxState::Paused => "Paused",
            SandboxState::Resuming => "Resuming",
            SandboxState::Stopping => "Stopping",
            SandboxState::Terminated => "Terminated",
            SandboxState::Failed => "Failed",
            SandboxState::Other(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for SandboxState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(SandboxState::parse(&String::deserialize(d)?))
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    pub state: SandboxState,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// A sandbox as the API describes it (env is never returned).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    pub id: String,
    pub status: SandboxStatus,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    pub page: u64,
    #[serde(default)]
    pub total_pages: u64,
    pub has_next_page: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SandboxPage {
    pub items: Vec<Sandbox>,
    pub pagination: Pagination,
}

/// The error body every non-2xx answer carries.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageSpec {
    pub uri: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    pub cpu: String,
    pub memory: String,
}

/// What tenantci asks for: an image by digest, an entrypoint, limits, a timeout in seconds
/// (at least 60), the env (secret values) and the metadata (the controller's index).
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    pub image: ImageSpec,
    pub entrypoint: Vec<String>,
    pub resource_limits: ResourceLimits,
    pub timeout: u64,
    #[serde(serialize_with = "expose_env")]
    pub env: BTreeMap<String, Secret>,
    pub metadata: BTreeMap<String, String>,
}

fn expose_env<S: serde::Serializer>(
    env: &BTreeMap<String, Secret>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(env.iter().map(|(k, v)| (k, v.expose())))
}

impl fmt::Debug for CreateSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateSandbox")
            .field("image", &self.image)
            .field("entrypoint", &self.entrypoint)
            .field("resource_limits", &self.resource_limits)
            .field("timeout", &self.timeout)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("metadata", &self.metadata)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sandbox_written_by_hand_with_an_unknown_state() {
        let text = r#"{"id":"s1","status":{"state":"Hibernating","reason":"x"},
            "metadata":{"tenantci.io/task-id":"9"},"entrypoint":["a"],
            "createdAt":"2026-01-01T00:00:00Z","image":{"uri":"i"}}"#;
        let s: Sandbox = serde_json::from_str(text).unwrap();
        assert_eq!(s.status.state, SandboxState::Other("Hibernating".into()));
        assert_eq!(s.metadata["tenantci.io/task-id"], "9");
        assert_eq!(s.expires_at, None);
    }

    #[test]
    fn create_request_wire_names_and_a_redacted_debug() {
        let req = CreateSandbox {
            image: ImageSpec {
                uri: "r/e@sha256:00".into(),
            },
            entrypoint: vec!["run".into()],
            resource_limits: ResourceLimits {
                cpu: "2".into(),
                memory: "4Gi".into(),
            },
            timeout: 10800,
            env: [("CAP".to_string(), Secret::new("hunter2"))].into(),
            metadata: [("tenantci.io/task-id".to_string(), "9".to_string())].into(),
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "image": {"uri": "r/e@sha256:00"},
                "entrypoint": ["run"],
                "resourceLimits": {"cpu": "2", "memory": "4Gi"},
                "timeout": 10800,
                "env": {"CAP": "hunter2"},
                "metadata": {"tenantci.io/task-id": "9"},
            })
        );
        let dbg = format!("{req:?}");
        assert!(dbg.contains("CAP") && !dbg.contains("hunter2"), "{dbg}");
    }
}
