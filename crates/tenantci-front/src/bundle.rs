//! The runner host's one file: everything `front connect` and gitlab-runner need there (the
//! cluster, the front's address and CA, the runner's credential, the loopback port), written
//! once on the gateway host (`front bundle`, 0600, never over an existing file) and unpacked on
//! the runner host (`front unpack`). Does not open connections (`connect` does).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::secret::Secret;
use tenantci_core::{Error, Result};

/// The bundle format this tenantci writes and reads; [`Bundle::load`] refuses any other.
pub const VERSION: u32 = 1;
/// Where gitlab-runner's `host` points on the runner host by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:6443";

/// The bundle file (JSON, 0600): what the runner host needs, in one file. `Debug` omits the
/// key and the PEM texts.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bundle {
    /// The format, [`VERSION`].
    pub version: u32,
    /// The cluster the runner works in: the ALPN name `connect` asks the front for.
    pub cluster: String,
    /// The front's published `host:port`.
    pub front: String,
    /// The name the front's certificate is checked against (default: the host of `front`).
    pub front_server_name: String,
    /// The CA of the front's certificate (PEM): the only root `connect` trusts.
    pub front_ca: String,
    /// The tenant apiserver's serving CA: gitlab-runner's `ca_file`, unchanged.
    pub server_ca: String,
    /// The runner's client certificate (PEM): gitlab-runner's `cert_file`, and the one
    /// `connect` presents to the front.
    pub cert: String,
    /// The runner's private key (PEM): gitlab-runner's `key_file`.
    #[serde(with = "secret_text")]
    pub key: Secret,
    /// `front connect`'s loopback address: gitlab-runner's `host`.
    pub listen: SocketAddr,
    /// The namespace of the runner's job pods: gitlab-runner's `namespace`.
    pub namespace: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("cluster", &self.cluster)
            .field("front", &self.front)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

mod secret_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use tenantci_core::secret::Secret;

    pub fn serialize<S: Serializer>(s: &Secret, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.expose())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

/// What `front bundle` is given.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The cluster the runner works in.
    pub cluster: String,
    /// `credential mint`'s OUT_DIR: ca.crt, tls.crt, tls.key.
    pub credential_dir: PathBuf,
    /// The front's published `host:port`, as the runner host reaches it.
    pub front: String,
    /// The name checked in the front's certificate; `None`: the host of `front`.
    pub front_server_name: Option<String>,
    /// The CA of the front's certificate (`front init`'s front-ca.crt).
    pub front_ca: PathBuf,
    /// Where `front connect` listens on the runner host (loopback).
    pub listen: SocketAddr,
    /// The namespace of the runner's job pods.
    pub namespace: String,
}

/// The inputs that do not depend on the credential (the cluster's name, the addresses, the
/// front's CA), checked before a credential is minted for them.
pub fn check(inputs: &Inputs) -> Result<()> {
    tenantci_core::gateway::layout::validate_cluster_name(&inputs.cluster)?;
    check_listen(inputs.listen)?;
    front_host(&inputs.front)?;
    tenantci_core::input::read_text(
        "the front's CA",
        &inputs.front_ca,
        tenantci_core::input::MAX_PEM,
    )?;
    Ok(())
}

/// Reads and checks everything, then returns the bundle (the caller writes it).
pub fn build(inputs: &Inputs) -> Result<Bundle> {
    use tenantci_core::input::{MAX_PEM, read_private, read_text};
    check(inputs)?;
    let host = front_host(&inputs.front)?;
    let dir = &inputs.credential_dir;
    let cert = read_text("the runner's certificate", &dir.join("tls.crt"), MAX_PEM)?;
    let key = read_private("the runner's key", &dir.join("tls.key"), MAX_PEM)?;
    let server_ca = read_text("the apiserver's serving CA", &dir.join("ca.crt"), MAX_PEM)?;
    let front_ca = read_text("the front's CA", &inputs.front_ca, MAX_PEM)?;
    check_credential(&dir.join("tls.crt"), &cert, &key)?;
    Ok(Bundle {
        version: VERSION,
        cluster: inputs.cluster.clone(),
        front: inputs.front.clone(),
        front_server_name: inputs.front_server_name.clone().unwrap_or(host),
        front_ca,
        server_ca,
        cert,
        key: Secret::new(key),
        listen: inputs.listen,
        namespace: inputs.namespace.clone(),
    })
}

fn check_credential(path: &Path, cert: &str, key: &str) -> Result<()> {
    let info = CertInfo::from_pem(cert).map_err(|e| {
        Error::bad_input(format!("`{}` is not a certificate: {e}", path.display()))
            .hint("give the OUT_DIR of `tenantci credential mint`")
    })?;
    // The front's own reading (kube-apiserver's): a subject it refuses never makes a bundle.
    let identity = info.identity().map_err(|a| {
        Error::bad_input(format!(
            "`{}` is refused: {a}; the front never admits it",
            path.display()
        ))
        .hint("mint a scoped runner credential with `tenantci credential mint`")
    })?;
    if identity.groups.iter().any(|o| o.starts_with("system:")) {
        return Err(Error::bad_input(format!(
            "`{}` carries a system: group ({}): the front never admits it",
            path.display(),
            info.subject
        ))
        .hint("mint a scoped runner credential with `tenantci credential mint`"));
    }
    if !tenantci_core::pki::verify::key_matches(&info.spki_der, key).unwrap_or(false) {
        return Err(Error::bad_input(format!(
            "tls.key beside `{}` is not that certificate's key",
            path.display()
        ))
        .hint("give the directory `credential mint` wrote, unmixed"));
    }
    Ok(())
}

/// `front connect` listens on loopback only: the tunnel carries the runner's identity.
pub fn check_listen(listen: SocketAddr) -> Result<()> {
    if listen.ip().is_loopback() {
        return Ok(());
    }
    Err(Error::bad_input(format!(
        "--listen {listen} is not a loopback address: the tunnel would carry the runner's identity for anyone who reaches it"
    ))
    .hint("use 127.0.0.1:<port> (gitlab-runner runs on the same host)"))
}

fn front_host(front: &str) -> Result<String> {
    let (host, port) = front.rsplit_once(':').ok_or_else(|| bad_front(front))?;
    port.parse::<u16>().map_err(|_| bad_front(front))?;
    let host = host.trim_matches(['[', ']']);
    if host.is_empty() {
        return Err(bad_front(front));
    }
    Ok(host.to_string())
}

fn bad_front(front: &str) -> Error {
    Error::bad_input(format!("--front `{front}` is not host:port"))
        .hint("give the front's published address, e.g. front.example.com:7443")
}

impl Bundle {
    /// The file's bytes: pretty JSON, the key in clear (the caller writes it 0600).
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings always serializes.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Reads a bundle (0600 required: it holds the runner's key).
    pub fn load(path: &Path) -> Result<Self> {
        let text = tenantci_core::input::read_private(
            "the front bundle",
            path,
            tenantci_core::input::MAX_CONFIG,
        )?;
        let bundle: Bundle = serde_json::from_str(&text).map_err(|e| {
            Error::bad_input(format!("`{}` is not a front bundle", path.display()))
                .caused_by(e)
                .hint("copy the file `tenantci front bundle` wrote, unchanged")
        })?;
        if bundle.version != VERSION {
            return Err(Error::bad_input(format!(
                "`{}` is a version {} front bundle; this tenantci reads version {VERSION}",
                path.display(),
                bundle.version
            ))
            .hint("use the same tenantci version on both hosts"));
        }
        check_listen(bundle.listen)?;
        Ok(bundle)
    }

    /// gitlab-runner's `[runners.kubernetes]` connection keys, with the files in `dir`.
    pub fn config_section(&self, dir: &Path) -> String {
        let file = |name: &str| toml_edit::Value::from(dir.join(name).display().to_string());
        format!(
            "[runners.kubernetes]\n  host = {}\n  cert_file = {}\n  key_file = {}\n  ca_file = {}\n  namespace = {}\n",
            toml_edit::Value::from(format!("https://{}", self.listen)),
            file("tls.crt"),
            file("tls.key"),
            file("ca.crt"),
            toml_edit::Value::from(self.namespace.as_str()),
        )
    }

    /// Writes gitlab-runner's three files into `dir` (0700), each 0600 and renamed into place;
    /// a file that already holds those bytes at 0600 is left alone, so a re-run changes
    /// nothing (not even an mtime). With `dry_run`, nothing is written. Each path with
    /// whether it was (or would be) written.
    pub fn unpack(&self, dir: &Path, dry_run: bool) -> Result<Vec<(PathBuf, bool)>> {
        if !dry_run {
            tenantci_core::fsutil::create_dir_all(dir, 0o700)
                .map_err(|e| Error::unwritable("the credential directory", dir, e))?;
        }
        let files = [
            ("ca.crt", self.server_ca.as_bytes()),
            ("tls.crt", self.cert.as_bytes()),
            ("tls.key", self.key.expose().as_bytes()),
        ];
        let mut unpacked = Vec::new();
        for (name, body) in files {
            let path = dir.join(name);
            let changed = !holds(&path, body);
            if changed && !dry_run {
                tenantci_core::fsutil::write_atomic(&path, body, 0o600)
                    .map_err(|e| Error::unwritable("gitlab-runner's credential file", &path, e))?;
            }
            unpacked.push((path, changed));
        }
        Ok(unpacked)
    }
}

/// Whether `path` holds `body` already, private (0600).
fn holds(path: &Path, body: &[u8]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let private = std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600);
    private && std::fs::read(path).is_ok_and(|b| b == body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle() -> Bundle {
        Bundle {
            version: VERSION,
            cluster: "ci".into(),
            front: "front.example.com:7443".into(),
            front_server_name: "front.example.com".into(),
            front_ca: String::new(),
            server_ca: String::new(),
            cert: String::new(),
            key: Secret::new("-----BEGIN PRIVATE KEY-----"),
            listen: DEFAULT_LISTEN.parse().unwrap(),
            namespace: "gitlab-runner".into(),
        }
    }

    #[test]
    fn the_entry_points_at_the_tunnel_and_debug_hides_the_key() {
        let section = bundle().config_section(Path::new("/etc/gitlab-runner/tenant-ci"));
        assert!(
            section.contains("host = \"https://127.0.0.1:6443\""),
            "{section}"
        );
        assert!(section.contains("ca_file = \"/etc/gitlab-runner/tenant-ci/ca.crt\""));
        assert!(!format!("{:?}", bundle()).contains("PRIVATE KEY"));
    }

    #[test]
    fn only_loopback_listeners_and_host_port_fronts_pass() {
        assert!(check_listen("127.0.0.1:6443".parse().unwrap()).is_ok());
        assert!(check_listen("[::1]:6443".parse().unwrap()).is_ok());
        assert!(check_listen("0.0.0.0:6443".parse().unwrap()).is_err());
        assert_eq!(
            front_host("front.example.com:7443").unwrap(),
            "front.example.com"
        );
        assert_eq!(front_host("[2001:db8::1]:7443").unwrap(), "2001:db8::1");
        assert!(front_host("front.example.com").is_err());
        assert!(front_host(":7443").is_err());
    }
}
