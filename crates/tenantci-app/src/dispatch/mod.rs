//! The Gitea dynamic runner: scheduler (claims tasks from Gitea), queue (JetStream), pod
//! backend (one executor Pod per task), facade (RunnerService towards executors) and the
//! lifecycle reconciler, composed by `runtime` (`dispatch run`); `init` sets it all up once
//! (`dispatch init`). The pure decisions live in `capability`, `routing`, `executor`,
//! `lifecycle` and `config`; the actors that do I/O build on them.

pub mod capability;
pub mod config;
pub mod executor;
pub mod facade;
pub mod facade_cert;
pub mod finished;
pub mod handout;
pub mod identity;
pub mod init;
pub mod leader;
pub mod lifecycle;
pub mod manifests;
pub mod metrics;
pub mod objects;
pub mod proxy;
pub mod reconciler;
pub mod recovery;
pub mod registration;
pub mod registry;
pub mod report;
pub mod resources;
pub mod routing;
pub mod runtime;
pub mod scheduler;
pub mod status;
pub mod term;
pub mod vm;
pub mod webhook;
pub mod worker;
