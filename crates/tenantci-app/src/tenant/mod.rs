//! The runner-facing side of a tenant cluster: resource quantities, the node image, sizing a
//! job pod against it, and pre-warmed pause pods. Talks to the tenant apiserver through kube;
//! does not mint credentials (`pki`) or write runner config (`runner`).

pub mod access;
pub mod apply;
pub mod prewarm;
pub mod rbac;
pub mod sizing;
pub mod verify;
