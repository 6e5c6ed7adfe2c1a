//! tenantci-dispatch: the Gitea dynamic runner (`tenantci dispatch init` and `run`) and the NATS
//! JetStream queue it claims into. One module per concern:
//!
//! - [`config`]: the dispatcher's configuration file and its checks.
//! - [`init`]: `dispatch init`, everything `dispatch run` needs, in one idempotent run.
//! - [`run`]: `dispatch run`: leader election, the leadership term, the status API.
//! - [`claim`]: the scheduler that claims tasks from Gitea, their routing to a backend, the
//!   `workflow_job` webhook and the scheduler's registration.
//! - [`backend`]: where an assignment runs. The one [`backend::Backend`] trait, the generic
//!   worker, reconciler and recovery driven through it, and one folder per executor backend
//!   ([`backend::pod`], [`backend::vm`]).
//! - [`facade`]: the RunnerService executors call, with per-task capabilities, and the
//!   `executor-proxy` in front of it.
//! - [`identity`]: SPIFFE identity of executors and the facade (opt-in).
//! - [`queue`]: the JetStream queue (topology, permissions, producer, consumer, claim ledger).
//! - [`metrics`]: the dispatcher's Prometheus metrics.
//! - [`cache`]: the shared actions cache, isolated per repository, served beside the facade.
//!
//! Over `tenantci-runner` (credentials, tenant RBAC, runner files) and `tenantci-core`; no CLI:
//! the binary parses flags and calls in here.

pub mod backend;
pub mod cache;
pub mod capability;
pub mod claim;
pub mod config;
pub mod executor;
pub mod executor_proxy;
pub mod facade;
pub mod health;
pub mod identity;
pub mod init;
pub mod leader;
pub mod metrics;
pub mod provision;
pub mod queue;
pub mod renew;
pub mod run;
pub mod task;
