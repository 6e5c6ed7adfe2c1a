//! Gateway core: the state directory's layout (`gateway.json`, the admin kubeconfig, each
//! cluster's files), creating a cluster's serving CA and ClientCA (`pki init-cluster`), and
//! resolving a tenant cluster to its leased loopback port. The host checks are
//! `tenantci_runner::check_host`.

pub mod cluster_pki;
pub mod layout;
pub mod resolve;

pub use layout::{ClusterPaths, StateDir};
