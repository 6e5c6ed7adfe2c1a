//! tenantci-dispatch: the Gitea dynamic runner (`tenantci dispatch init`, `run` and `renew`) and
//! the NATS JetStream queue it claims into. One module per concern, on floors: a module imports
//! only modules on a lower floor (`layers.txt` beside this crate's manifest, checked by
//! `scripts/check-layering.sh`; docs/architecture.md draws them). Lowest first:
//!
//! 1. [`backend_kind`]: a backend's name and the facts it registers, as data, so every floor
//!    above keys by backend without naming one; [`task_id`]: a Gitea task id, one type end to
//!    end; [`newer_records`]: records a newer release wrote, reported once each.
//! 2. Leaves: [`queue`] (JetStream topology, permissions, sealed assignments, producer,
//!    consumer), [`capability`] (per-task capabilities), [`health`] (what `/readyz` reports),
//!    [`http1`] (the plain HTTP/1.1 server with every wait bounded).
//! 3. [`metrics`]; [`sizing`] (the `[executor]` section, requests and limits, resource
//!    classes and their warm pools: picked once, by the scheduler); [`leader`] (Lease election).
//! 4. [`cache`] (the shared actions cache), [`identity`] (SPIFFE IDs and SPIRE entries),
//!    [`reach`] (an in-cluster dispatcher's status API through the leader's port-forward).
//! 5. [`task`]: a claimed task: the claim ledger (its truth), its assignment opened once, the
//!    term's registry, recovery's decision, what the dispatcher tells Gitea; the state table.
//! 6. [`backend`]: where an assignment runs: the [`backend::Backend`] traits, the worker,
//!    reconciler and keep-alive written once over them, the backends registered in
//!    [`backend::catalog`], one folder each ([`backend::pod`], [`backend::vm`]).
//! 7. [`claim`] (the scheduler, routing, the `workflow_job` webhook), [`facade`] (the
//!    RunnerService executors call), [`executor_proxy`] (the executor's side of it).
//! 8. [`config`]: composes the sections the modules own, checks the file; [`view`] (the
//!    operator's view: the model `/v1/status`, `dispatch status`, `explain` and the page
//!    show, pure; above `claim`).
//! 9. [`provision`]: what `init` sets up and `renew` keeps up (access, the facade's PKI).
//! 10. The orchestrations: [`run`], [`init`], [`renew`], [`check`] (what an upgrade needs);
//!     none reaches into another.
//!
//! Over `tenantci-runner` (credentials, tenant RBAC, runner files) and `tenantci-core`; no CLI:
//! the binary parses flags and calls in here.

#![warn(missing_docs)]

pub mod backend;
pub mod backend_kind;
pub mod cache;
pub mod capability;
pub mod check;
pub mod claim;
pub mod config;
pub mod executor_proxy;
pub mod facade;
pub mod health;
pub mod http1;
pub mod identity;
pub mod init;
pub mod leader;
pub mod metrics;
pub mod newer_records;
pub mod provision;
pub mod queue;
pub mod reach;
pub mod renew;
pub mod run;
pub mod sizing;
pub mod task;
pub mod task_id;
pub mod view;
