//! `tenantci dispatch`: init and run against the simulator, its Gitea double and a real
//! nats-server.

mod after_end;
mod backends;
pub(crate) mod cache;
mod claims;
mod classes;
mod cluster;
mod executor_pod;
mod explain_forge;
mod fake_backend;
mod forge_down;
mod forgejo;
mod golden;
pub(crate) mod harness;
mod history;
mod identity;
mod in_cluster;
mod init;
mod init_any_cluster;
mod inputs;
mod ledger;
mod monitoring;
mod mounted;
mod newer_records;
mod passthrough;
mod proxy;
mod renew;
mod run;
mod stall;
mod status;
mod status_page;
mod upgrade_check;
pub(crate) mod vm;
mod vm_identity;
mod watch;
mod webhook;
