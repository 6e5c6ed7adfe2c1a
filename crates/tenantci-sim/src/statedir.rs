//! The simulator's state directory (docs/state-dir.md layout) created or reused: each
//! cluster's PKI, the gateway admin CA (`<state>/pki/admin-ca.{crt,key}`, a tenantci addition:
//! the admin apiserver's serving cert and `admin.kubeconfig`'s client cert are both signed by
//! it), the kubeconfigs, and `gateway.json` with the ports to reuse on the next start.
//!
//! Existing CAs are never replaced. A kubeconfig is rewritten only when its server URL changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::gateway::StateDir;
use tenantci_core::gateway::cluster_pki::{self, DEFAULT_CA_VALID_FOR};
use tenantci_core::gateway::layout::validate_cluster_name;
use tenantci_core::kubeconfig::{self, Material};
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, issue};
use tenantci_core::{Error, Result};

const LEAF_VALID_FOR: Duration = Duration::from_secs(365 * 24 * 3600);

/// `gateway.json` as the simulator writes it.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayJson {
    /// The gateway-admin kubeconfig.
    pub admin_kubeconfig: PathBuf,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The admin apiserver's URL.
    #[serde(default)]
    pub admin_url: String,
    /// The admin apiserver's port, reused on the next start.
    #[serde(default)]
    pub admin_port: u16,
    /// Each tenant cluster served.
    #[serde(default)]
    pub clusters: Vec<ClusterEntry>,
}

/// One tenant cluster in `gateway.json` and the ready line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEntry {
    /// The cluster's name.
    pub name: String,
    /// Its apiserver's URL (`https://127.0.0.1:PORT`).
    pub url: String,
    /// Its apiserver's port, reused on the next start.
    pub port: u16,
    /// Its tenant-admin kubeconfig.
    pub tenant_admin_kubeconfig: PathBuf,
}

/// The gateway admin CA's certificate and key files: `<state>/pki/admin-ca.{crt,key}`.
pub fn admin_ca_paths(state: &StateDir) -> (PathBuf, PathBuf) {
    let dir = state.root().join("pki");
    (dir.join("admin-ca.crt"), dir.join("admin-ca.key"))
}

/// Ports recorded by the previous run: ("" = admin, else cluster name) -> port.
pub fn previous_ports(state: &StateDir) -> HashMap<String, u16> {
    let mut out = HashMap::new();
    let Ok(text) = fsutil::read_bounded(&state.gateway_json(), tenantci_core::input::MAX_CONFIG)
    else {
        return out;
    };
    let Ok(g) = serde_json::from_slice::<GatewayJson>(&text) else {
        return out;
    };
    if g.admin_port != 0 {
        out.insert(String::new(), g.admin_port);
    }
    for c in g.clusters {
        out.insert(c.name, c.port);
    }
    out
}

fn mkdir(dir: &Path) -> Result<()> {
    fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
        .map_err(|e| Error::unwritable("the state directory", dir, e))
}

/// Creates the state root and returns it absolute.
pub fn open(root: &Path) -> Result<StateDir> {
    mkdir(root)?;
    let abs = std::fs::canonicalize(root)
        .map_err(|e| Error::unreadable("the state directory", root, e))?;
    Ok(StateDir::new(abs))
}

/// The cluster's serving CA and ClientCA PEM, created on first use.
pub fn cluster_cas(
    state: &StateDir,
    name: &str,
) -> Result<(CertificateAuthority, CertificateAuthority)> {
    validate_cluster_name(name)?;
    let paths = state.cluster(name);
    if !paths.client_ca_cert.exists() && !paths.serving_ca_cert.exists() {
        cluster_pki::init_cluster(state, name, DEFAULT_CA_VALID_FOR)?;
    }
    let serving = CertificateAuthority::load(&paths.serving_ca_cert, &paths.serving_ca_key)?;
    let client = CertificateAuthority::load(&paths.client_ca_cert, &paths.client_ca_key)?;
    Ok((serving, client))
}

/// The gateway admin CA, created on first use and loaded after (never replaced).
pub fn admin_ca(state: &StateDir) -> Result<CertificateAuthority> {
    let (cert, key) = admin_ca_paths(state);
    if cert.exists() {
        return CertificateAuthority::load(&cert, &key);
    }
    mkdir(&state.root().join("pki"))?;
    let ca = CertificateAuthority::generate("tenantci-sim-gateway-admin-ca", DEFAULT_CA_VALID_FOR)?;
    fsutil::write_new_atomic(&key, ca.key_pem().as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the admin CA key", &key, e))?;
    fsutil::write_new_atomic(&cert, ca.cert_pem().as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the admin CA certificate", &cert, e))?;
    Ok(ca)
}

/// A serving certificate for loopback (SANs 127.0.0.1 and localhost).
pub fn serving_cert(ca: &CertificateAuthority, cn: &str) -> Result<issue::IssuedCert> {
    issue::server_cert(
        ca,
        cn,
        &["127.0.0.1".to_string(), "localhost".to_string()],
        LEAF_VALID_FOR,
    )
}

fn kubeconfig_server(path: &Path) -> Option<String> {
    let text = fsutil::read_bounded(path, tenantci_core::input::MAX_CONFIG).ok()?;
    let kc: kube::config::Kubeconfig = serde_yaml::from_slice(&text).ok()?;
    kc.clusters.first()?.cluster.as_ref()?.server.clone()
}

/// Writes a system:masters kubeconfig for `server` unless one for that server exists.
pub fn ensure_kubeconfig(
    path: &Path,
    context: &str,
    server: &str,
    server_ca_pem: &str,
    client_ca: &CertificateAuthority,
    common_name: &str,
) -> Result<()> {
    if kubeconfig_server(path).as_deref() == Some(server) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        mkdir(dir)?;
    }
    let cert = issue::client_cert(
        client_ca,
        &ClientCertSpec {
            common_name: common_name.to_string(),
            organizations: vec!["system:masters".to_string()],
            valid_for: LEAF_VALID_FOR,
            key_type: KeyType::EcdsaP256,
        },
    )?;
    let text = kubeconfig::render(
        context,
        server,
        &Material::Inline {
            ca_pem: server_ca_pem,
            cert_pem: &cert.cert_pem,
            key_pem: &cert.key_pem,
        },
    );
    fsutil::write_atomic(path, text.as_bytes(), MODE_SECRET)
        .map_err(|e| Error::unwritable("the kubeconfig", path, e))
}

/// Writes `gateway.json` (0600), only when its content changed.
pub fn write_gateway_json(state: &StateDir, g: &GatewayJson) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(g).expect("gateway.json serializes");
    text.push(b'\n');
    let path = state.gateway_json();
    fsutil::write_if_changed(&path, &text, 0o600)
        .map(|_| ())
        .map_err(|e| Error::unwritable("gateway.json", &path, e))
}
