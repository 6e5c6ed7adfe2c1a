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
    /// Created, not yet running (booting).
    Pending,
    /// Running.
    Running,
    /// Being paused.
    Pausing,
    /// Paused.
    Paused,
    /// Being resumed from a pause.
    Resuming,
    /// Being stopped (deleted).
    Stopping,
    /// Stopped for good.
    Terminated,
    /// Failed; `SandboxStatus::reason` and `message` say why.
    Failed,
    /// A state this code does not know, as the API spelled it.
    Other(String),
}

impl SandboxState {
    /// The state the API calls `s`; an unknown name is [`SandboxState::Other`].
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

    /// The API's name for the state (`Running`); also `Display`.
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

/// A sandbox's `status`: its state and, when the API gives them, why.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// The lifecycle state.
    pub state: SandboxState,
    /// A machine-readable cause (e.g. `runtime_error` for Failed); `None` when absent.
    #[serde(default)]
    pub reason: Option<String>,
    /// A sentence about the state for people; `None` when absent.
    #[serde(default)]
    pub message: Option<String>,
}

/// A sandbox as the API describes it (env is never returned).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The sandbox id the API assigned, used in every later call.
    pub id: String,
    /// Where the sandbox is in its lifecycle.
    pub status: SandboxStatus,
    /// The metadata labels set at creation or by a later patch.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// When the sandbox was created, RFC 3339 as the API wrote it; `None` when absent.
    #[serde(default)]
    pub created_at: Option<String>,
    /// When the sandbox expires and is deleted, RFC 3339; `None` when absent.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// Where a list page sits among all pages.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    /// This page's number, from 1.
    pub page: u64,
    /// How many pages the list has (0 when the API leaves it out).
    #[serde(default)]
    pub total_pages: u64,
    /// Whether a further page follows.
    pub has_next_page: bool,
}

/// One page of `GET /sandboxes`.
#[derive(Debug, Clone, Deserialize)]
pub struct SandboxPage {
    /// The sandboxes on this page.
    pub items: Vec<Sandbox>,
    /// Where this page sits.
    pub pagination: Pagination,
}

/// The error body every non-2xx answer carries.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorBody {
    /// A machine-readable code such as `SANDBOX_NOT_FOUND`; empty when absent.
    #[serde(default)]
    pub code: String,
    /// The API's explanation; empty when absent.
    #[serde(default)]
    pub message: String,
}

/// The image a sandbox boots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageSpec {
    /// The image reference (tenantci passes one pinned by digest).
    pub uri: String,
}

/// The most CPU and memory a sandbox may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    /// CPU as a Kubernetes quantity (`2`, `500m`).
    pub cpu: String,
    /// Memory as a Kubernetes quantity (`4Gi`).
    pub memory: String,
}

/// What tenantci asks for: an image by digest, an entrypoint, limits, a timeout in seconds
/// (at least 60), the env (secret values) and the metadata (the controller's index).
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandbox {
    /// The image to boot.
    pub image: ImageSpec,
    /// The command and its arguments, run in the sandbox.
    pub entrypoint: Vec<String>,
    /// The sandbox's CPU and memory limits.
    pub resource_limits: ResourceLimits,
    /// Lifetime in seconds (at least 60): the sandbox expires after it unless renewed.
    pub timeout: u64,
    /// Environment variables; their values are secret (the executor's capability) and are
    /// left out of `Debug`.
    #[serde(serialize_with = "expose_env")]
    pub env: BTreeMap<String, Secret>,
    /// Metadata labels (Kubernetes label rules, see `label`), by which tenantci lists its
    /// sandboxes again.
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
