//! Test and benchmark helpers for tenantci (not published, never linked into the product).
//!
//! - [`gitlab`]: the GitLab REST double.
//! - [`sim`]: the simulator as a process or in-process, and its Gitea double.
//! - [`opensandbox`]: the simulator's OpenSandbox double, its client and admin API.
//! - [`spire`]: the simulator's SPIRE stand-in: entry sockets, rotation, entry manifests.
//! - [`nats`]: a real nats-server with the queue's generated users.
//! - [`dispatch`]: `tenantci dispatch init` as the benchmarks run it.
//! - [`world`]: a dispatcher's world (simulator, Gitea double, nats-server, the dispatcher's
//!   inputs, `dispatch run` children), shared by the integration tests and the benchmarks.
//! - [`boot`]: a VM sandbox's boot script run for real with `/bin/sh`.
//! - [`cache`]: the shared cache's HTTP calls one at a time.
//! - [`executor`]: a Gitea executor played from the executor Secret's files.
//! - [`fake_executors`]: the dispatcher's backend layer in memory (a backend, the claim
//!   ledger, Gitea's reports, admission slots), for unit tests without NATS or a forge.
//! - [`moto`]: an S3-compatible server (moto) on loopback.
//! - [`forward`]: a fixed address in front of a server that restarts on another port.
//! - [`tls_front`]: an HTTPS front for a plain-HTTP double.
//! - [`kube`]: kubectl and kube-rs clients as a given identity.
//! - [`process`]: child processes that never outlive the test, and ready lines.
//! - [`wait`]: `eventually`, for conditions that have no event to wait on.
//! - [`snapshot`]: files and cluster objects before and after, for "nothing changed".
//! - [`procfs`]: a process's memory and CPU time, for the benchmarks.
//!
//! Helpers that run the `tenantci` binary take a `Command` for it: only the binary's own
//! tests know its path (`CARGO_BIN_EXE_tenantci`), a benchmark takes it as an argument.

#![warn(missing_docs)]

pub mod boot;
pub mod cache;
pub mod dispatch;
pub mod executor;
pub mod fake_executors;
pub mod forward;
pub mod gitlab;
pub mod kube;
pub mod moto;
pub mod nats;
pub mod opensandbox;
pub mod process;
pub mod procfs;
pub mod sim;
pub mod snapshot;
pub mod spire;
pub mod tls_front;
pub mod wait;
pub mod world;
