//! The `[facade]` section: where the facade listens, the URL executors reach it at, and the
//! files of its capability key and serving certificate.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `[facade]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Facade {
    /// Where the facade listens (HTTPS).
    pub listen: SocketAddr,
    /// The base URL executors use; its host is in the serving cert (an IP SAN for an address).
    pub url: String,
    /// The HMAC key of the per-task capabilities, at least 32 bytes, 0600.
    pub capability_key_file: PathBuf,
    /// The facade's own CA, which each executor's proxy trusts the facade by (identity off:
    /// `ca.crt` in a Pod's Secret, an env variable in a sandbox).
    pub ca_cert_file: PathBuf,
    /// The serving certificate (PEM), issued by that CA for the host of `url`.
    pub cert_file: PathBuf,
    /// The serving certificate's private key (PEM), 0600.
    pub key_file: PathBuf,
}
