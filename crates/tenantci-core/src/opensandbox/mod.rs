//! The OpenSandbox Lifecycle API as tenantci speaks it (docs/simulator.md, the double): the
//! metadata label rules (shared with the simulator's double), the JSON types and the client.
//!
//! Does not decide what a sandbox runs or when (the app's VM backend does).

pub mod client;
pub mod label;
pub mod types;

pub use client::{ApiError, ClientConfig, LifecycleClient, ListFilter};
pub use types::{CreateSandbox, ImageSpec, ResourceLimits, Sandbox, SandboxState};
