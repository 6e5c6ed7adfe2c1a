//! Certificates for tenant clusters: the cluster CAs (`ca`), issuing leaf certificates from a
//! CA (`issue`, with `subject` writing several O attributes), reading certificates back
//! (`inspect`), signing requests for renewal (`csr`), checking a credential's key and chain (`verify`), the policy a runner credential
//! must satisfy (`policy`), and the one reading of a certificate's subject, kube-apiserver's
//! (`kube_subject`).
//!
//! This module is a leaf: no CLI, no Kubernetes. It signs what it is asked to sign; refusing
//! `system:masters` and other dangerous requests is `policy`'s job, applied by its callers
//! (`credential`, the runner bootstrap, the dispatcher's renewal and init).

pub mod ca;
pub mod csr;
pub mod inspect;
pub mod issue;
pub mod kube_subject;
pub mod policy;
pub mod subject;
pub mod verify;

pub use ca::CertificateAuthority;
pub use issue::{ClientCertSpec, IssuedCert, KeyType};
