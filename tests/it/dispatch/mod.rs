//! `tenantci dispatch`: the Gitea dynamic runner against the simulator, its Gitea double and
//! a real nats-server.

mod harness;
mod run;
