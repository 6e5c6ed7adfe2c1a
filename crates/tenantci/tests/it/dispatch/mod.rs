//! `tenantci dispatch`: init and run against the simulator, its Gitea double and a real
//! nats-server.

mod claims;
mod executor_pod;
mod golden;
mod harness;
mod init;
mod inputs;
mod run;
mod vm;
mod webhook;
