//! The integration test binary: one binary, one module per capability, all running the real
//! `tenantci` binary (and, where the capability needs them, the simulator, kubectl and a real
//! nats-server). Shared helpers live in `util` and
//! the tenantci-testkit crate (simulator and nats-server processes, executors, `eventually`).

mod bootstrap;
mod bootstrap_crash;
mod check_host;
mod cli;
mod crd_schemas;
mod credential;
mod dispatch;
mod front;
mod gitea;
mod opensandbox;
mod packaging;
mod pki;
mod prewarm;
mod queue;
mod refusals;
mod renewal;
mod runner;
mod ship;
mod sim;
mod skew;
mod spiffe;
mod util;
