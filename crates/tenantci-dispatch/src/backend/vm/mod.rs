//! The VM backend: Gitea tasks in OpenSandbox sandboxes, beside the pod backend. `settings`
//! is its config section (`[vm]`) and the checks on it; `sandbox` the create request and
//! metadata of one task's sandbox (pure); `sandboxes` the executors through the Lifecycle API
//! (core's `opensandbox` client); `lifecycle` and `reconciler` what happens to a sandbox
//! after its start.

pub mod api;
pub mod init;
pub mod lifecycle;
pub mod reconciler;
pub mod sandbox;
pub mod sandboxes;
pub mod settings;

pub use settings::Vm;
