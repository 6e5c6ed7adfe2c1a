//! Gateway core: the state directory, `gateway.json`, the admin kubeconfig, resolving a tenant
//! cluster, and the host checks. Does not talk to tenant apiservers (that is `tenant`).

pub mod check_host;
pub mod cluster_pki;
pub mod layout;
pub mod resolve;

pub use layout::{ClusterPaths, StateDir};
