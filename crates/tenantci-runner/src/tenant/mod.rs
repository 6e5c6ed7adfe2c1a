//! The runner-facing side of a tenant cluster: the runner's RBAC (`rbac`) and its checks
//! (`verify`), access reviews asked of the apiserver (`access`, also the dispatcher's),
//! server-side apply that skips what is already as desired (`apply`), sizing a job pod against
//! the node image (`sizing`), and pre-warmed pause pods (`prewarm`). Talks to the tenant
//! apiserver through kube; does not mint credentials (`crate::credential`) or write runner
//! config (`crate::gitlab`, `crate::act_runner`). Quantities and the node image are
//! `tenantci_core`'s.

pub mod access;
pub mod apply;
pub mod prewarm;
pub mod rbac;
pub mod sizing;
pub mod verify;
