//! The VM backend: Gitea tasks in OpenSandbox sandboxes, beside the pod backend. `settings`
//! is its config section (`[vm]`) and the checks on it; the Lifecycle API client is core's
//! `opensandbox`.

pub mod api;
pub mod init;
pub mod settings;

pub use settings::Vm;
