//! `tenantci dispatch`: init and run against the simulator, its Gitea double and a real
//! nats-server.

mod after_end;
mod backends;
mod cache;
mod claims;
mod classes;
mod cluster;
mod executor_pod;
mod forgejo;
mod golden;
mod harness;
mod identity;
mod init;
mod init_any_cluster;
mod inputs;
mod ledger;
mod monitoring;
mod mounted;
mod passthrough;
mod proxy;
mod renew;
mod run;
mod stall;
mod vm;
mod vm_identity;
mod webhook;
