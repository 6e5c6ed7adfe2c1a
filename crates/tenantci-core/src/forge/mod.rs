//! Forge protocol adapters: the wire protocols tenantci speaks towards CI forges. Each submodule
//! is a leaf (no CLI, no Kubernetes): messages, a client, and the servers that speak the same
//! protocol towards executors. `kind` decides what differs between Gitea and Forgejo.

pub mod gitea;
pub mod kind;

pub use kind::Forge;
