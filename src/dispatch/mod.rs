//! The Gitea dynamic runner: scheduler (claims tasks from Gitea), queue (JetStream), pod
//! backend (one executor Pod per task), facade (RunnerService towards executors) and the
//! lifecycle reconciler. The pure decisions live in `capability`, `routing`, `executor` and
//! `lifecycle`; the actors that do I/O build on them.

pub mod capability;
pub mod config;
pub mod executor;
pub mod init;
pub mod leader;
pub mod lifecycle;
pub mod manifests;
pub mod registration;
pub mod routing;
pub mod runtime;
