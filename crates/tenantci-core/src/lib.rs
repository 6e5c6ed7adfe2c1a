//! tenantci-core: the leaves every other tenantci crate builds on. Errors and exit codes,
//! durations, careful file writes and bounded file reads, TLS set-up, the secret type, the PKI (ClientCA, issuing,
//! inspecting), the gateway's state directory and tenant-cluster resolution, kube clients from
//! kubeconfigs, DNS-name and Pod Security checks as Kubernetes makes them, resource
//! quantities, the node image, the forge protocols (the Gitea/Forgejo runner protocol,
//! waiting jobs, webhook deliveries, jobs over REST), the OpenSandbox Lifecycle API, SPIFFE
//! identity (SVID sources, mTLS configs), upstream error excerpts, v4 UUIDs and the rule for
//! reading a stored record's version.
//!
//! No CLI (clap) and no NATS (async-nats): the manifest does not list them, so a leaf cannot
//! grow a dependency on either without a visible manifest change.

#![warn(missing_docs)]

pub mod dns;
pub mod duration;
pub mod error;
pub mod forge;
pub mod fsutil;
pub mod gateway;
pub mod input;
pub mod kube_client;
pub mod kube_event;
pub mod kubeconfig;
pub mod kubectl_text;
pub mod node_image;
pub mod opensandbox;
pub mod pki;
pub mod pod_security;
pub mod quantity;
pub mod record_version;
pub mod secret;
pub mod spiffe;
pub mod tls;
pub mod upstream;
pub mod uuid;

pub use error::{Error, ErrorKind, Result};
pub use secret::Secret;
