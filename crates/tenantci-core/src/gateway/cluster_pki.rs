//! `pki init-cluster`: a tenant cluster's serving CA and ClientCA in the state-dir layout.
//! In production the gateway owns these files; the simulator and the tests create them here.
//! Refuses to replace any existing file: a new ClientCA silently invalidates every credential.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::layout::{StateDir, validate_cluster_name};
use crate::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use crate::pki::CertificateAuthority;
use crate::pki::inspect::rfc3339;
use crate::{Error, Result};

/// Default CA lifetime: ten years.
pub const DEFAULT_CA_VALID_FOR: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// What `pki init-cluster` reports.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPkiReport {
    /// The cluster the PKI was created for.
    pub cluster: String,
    /// Where the serving CA's certificate was written.
    pub serving_ca_cert: PathBuf,
    /// Where the serving CA's key was written (0600).
    pub serving_ca_key: PathBuf,
    /// Where the ClientCA's certificate was written.
    pub client_ca_cert: PathBuf,
    /// Where the ClientCA's key was written (0600).
    pub client_ca_key: PathBuf,
    /// When the CAs expire, RFC 3339 (both have the same lifetime).
    pub not_after: String,
}

/// Creates the cluster's PKI; fails (exit 2) without writing if any of its files exists.
pub fn init_cluster(
    state: &StateDir,
    cluster: &str,
    valid_for: Duration,
) -> Result<ClusterPkiReport> {
    validate_cluster_name(cluster)?;
    let paths = state.cluster(cluster);
    let targets = [
        &paths.serving_ca_cert,
        &paths.serving_ca_key,
        &paths.client_ca_cert,
        &paths.client_ca_key,
    ];
    if let Some(existing) = targets.iter().find(|p| p.symlink_metadata().is_ok()) {
        return Err(Error::bad_input(format!(
            "cluster `{cluster}` already has a PKI (`{}` exists); replacing a ClientCA would invalidate every credential it signed",
            existing.display()
        ))
        .hint("use the existing PKI, or remove the cluster's pki/ directory deliberately first"));
    }
    let serving = CertificateAuthority::generate(&format!("{cluster}-serving-ca"), valid_for)?;
    let client = CertificateAuthority::generate(&format!("{cluster}-client-ca"), valid_for)?;
    for dir in [
        state.root(),
        &state.clusters_dir(),
        &paths.dir,
        &paths.pki_dir,
    ] {
        fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
            .map_err(|e| Error::unwritable("the state directory", dir, e))?;
    }
    // Certificates are public, but 0600 costs nothing and keeps the directory uniform.
    let writes: [(&std::path::Path, &[u8]); 4] = [
        (&paths.serving_ca_key, serving.key_pem().as_bytes()),
        (&paths.client_ca_key, client.key_pem().as_bytes()),
        (&paths.serving_ca_cert, serving.cert_pem().as_bytes()),
        (&paths.client_ca_cert, client.cert_pem().as_bytes()),
    ];
    fsutil::write_new_files(&writes, MODE_SECRET)
        .map_err(|(path, e)| Error::unwritable("the cluster PKI file", &path, e))?;
    Ok(ClusterPkiReport {
        cluster: cluster.to_string(),
        serving_ca_cert: paths.serving_ca_cert.clone(),
        serving_ca_key: paths.serving_ca_key.clone(),
        client_ca_cert: paths.client_ca_cert.clone(),
        client_ca_key: paths.client_ca_key.clone(),
        not_after: rfc3339(client.not_after()),
    })
}
