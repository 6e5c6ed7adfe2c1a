//! Certificates for tenant clusters: the cluster CAs (`ca`), issuing leaf certificates from a
//! CA (`issue`), and the policy a runner credential must satisfy (`policy`).
//!
//! This module is a leaf: no CLI, no Kubernetes. It signs what it is asked to sign; refusing
//! `system:masters` and other dangerous requests is `policy`'s job, applied by `credential`.

pub mod ca;
pub mod inspect;
pub mod issue;
pub mod policy;
pub mod subject;
pub mod verify;

pub use ca::CertificateAuthority;
pub use issue::{ClientCertSpec, IssuedCert, KeyType};
