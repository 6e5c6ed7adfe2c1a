//! Claiming: the scheduler takes tasks from Gitea with the one registration and queues each on
//! its backend's subject (`routing` picks the backend from `runs-on`, `class` the resource
//! class); the `workflow_job`
//! webhook wakes it (`nudge` paces how often, `deliveries` refuses a delivery seen before);
//! `registration` is the scheduler's Gitea credential.

pub mod class;
pub mod deliveries;
pub mod nudge;
pub mod registration;
pub mod routing;
pub mod scheduler;
pub mod webhook;
