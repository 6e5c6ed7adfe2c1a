//! The simulator: the runbook's steps against `tenantci sim` with real kubectl, kube-rs
//! against an in-process simulator, and the wire details (Status bodies, authn) over HTTPS.

mod kube_rs;
mod kubectl;
mod restart;
mod runbook;
mod wire;
