//! `credential mint`: a scoped runner credential from a cluster's ClientCA, the contract of
//! docs/cli.md (`tenantci credential mint`). Everything is checked before anything is written,
//! and the four files appear together or not at all.
//!
//! [`check`] makes [`mint`]'s checks without writing, for a caller that mints later in its run;
//! [`decision`] decides whether a credential already on disk is kept, minted anew, rotated or
//! refused (`bootstrap runner`, `dispatch init`).
//!
//! Does not decide where the inputs come from (flags, the runbook's variables: `cli`), nor
//! apply RBAC for the group (`tenant`).

pub mod decision;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::gateway::StateDir;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::{CertificateAuthority, ClientCertSpec, KeyType, policy};
use tenantci_core::{Error, Result, kubeconfig};

/// Where the ClientCA and serving CA come from.
#[derive(Debug, Clone)]
pub enum CaSource {
    /// The state-dir layout: `<state>/clusters/<cluster>/pki/...`.
    StateDir {
        /// The gateway's state directory.
        state_dir: PathBuf,
        /// The cluster whose `pki/` holds the CAs.
        cluster: String,
    },
    /// Explicit files.
    Files {
        /// The ClientCA's certificate (PEM), which signs the credential.
        client_ca_cert: PathBuf,
        /// The ClientCA's private key (PEM).
        client_ca_key: PathBuf,
        /// The CA that signed the tenant apiserver's serving certificate; copied to `ca.crt`.
        server_ca: PathBuf,
    },
}

impl CaSource {
    /// The ClientCA certificate, its key and the serving CA.
    pub fn paths(&self) -> Result<(PathBuf, PathBuf, PathBuf)> {
        match self {
            CaSource::StateDir { state_dir, cluster } => {
                tenantci_core::gateway::layout::validate_cluster_name(cluster)?;
                let c = StateDir::new(state_dir).cluster(cluster);
                if !c.dir.is_dir() {
                    return Err(Error::bad_input(format!(
                        "the state directory `{}` has no cluster `{cluster}` (no `{}`)",
                        state_dir.display(),
                        c.dir.display()
                    ))
                    .hint(
                        "check --cluster and --state-dir; `ls <state>/clusters` lists the clusters",
                    ));
                }
                Ok((c.client_ca_cert, c.client_ca_key, c.serving_ca_cert))
            }
            CaSource::Files {
                client_ca_cert,
                client_ca_key,
                server_ca,
            } => Ok((
                client_ca_cert.clone(),
                client_ca_key.clone(),
                server_ca.clone(),
            )),
        }
    }
}

/// What `credential mint` needs, however it was given.
#[derive(Debug, Clone)]
pub struct MintRequest {
    /// Where the ClientCA and the serving CA come from.
    pub ca: CaSource,
    /// The tenant apiserver's URL (`https://host:port`) the kubeconfig names.
    pub server: String,
    /// The certificate's CN: the Kubernetes user.
    pub common_name: String,
    /// The certificate's organizations: the Kubernetes groups, in order.
    pub organizations: Vec<String>,
    /// The directory the four files are written to; it must hold none of them (created 0700 when
    /// missing).
    pub out_dir: PathBuf,
    /// Raw Go duration; `None` means [`policy::DEFAULT_VALID_FOR`].
    pub valid_for: Option<String>,
    /// The algorithm of the credential's new key.
    pub key_type: KeyType,
}

/// The files a credential consists of, absolute paths.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CredentialFiles {
    /// `ca.crt`: the serving CA, with which the runner verifies the apiserver.
    #[serde(rename = "ca.crt")]
    pub ca: PathBuf,
    /// `tls.crt`: the client certificate.
    #[serde(rename = "tls.crt")]
    pub cert: PathBuf,
    /// `tls.key`: the client certificate's private key.
    #[serde(rename = "tls.key")]
    pub key: PathBuf,
    /// `kubeconfig`: names the server and the three files above.
    pub kubeconfig: PathBuf,
}

impl CredentialFiles {
    /// The four files' paths in `dir` (absolute when `dir` is).
    pub fn in_dir(dir: &Path) -> Self {
        CredentialFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            kubeconfig: dir.join("kubeconfig"),
        }
    }

    /// How many files a whole credential is.
    pub const COUNT: usize = 4;

    /// The four paths: `ca.crt`, `tls.crt`, `tls.key`, `kubeconfig`.
    pub fn all(&self) -> [&Path; Self::COUNT] {
        [&self.ca, &self.cert, &self.key, &self.kubeconfig]
    }
}

/// The hand-back: what the next step (RBAC, runner config) needs. `-o json` prints this.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandBack {
    /// The tenant apiserver's URL the kubeconfig names.
    pub server: String,
    /// The Kubernetes user (the certificate's CN).
    pub common_name: String,
    /// The Kubernetes groups (the certificate's organizations).
    pub groups: Vec<String>,
    /// The files written.
    pub files: CredentialFiles,
    /// Start of the certificate's validity, RFC 3339.
    pub not_before: String,
    /// End of the certificate's validity, RFC 3339.
    pub not_after: String,
    /// The lifetime as a Go duration, e.g. `720h`.
    pub valid_for: String,
    /// The certificate's serial number, hex.
    pub serial: String,
    /// The algorithm of the credential's key.
    pub key_type: KeyType,
}

/// Mints a credential: checks every input, then writes `ca.crt`, `tls.crt`, `tls.key` and
/// `kubeconfig` (0600) into the output directory (0700).
pub fn mint(req: &MintRequest) -> Result<HandBack> {
    // 1. Inputs that need no file system.
    let valid_for = check_values(req)?;

    // 2. The output directory: refuse before reading any key.
    let out_dir = absolute(&req.out_dir)?;
    let files = CredentialFiles::in_dir(&out_dir);
    check_out_dir(&out_dir, &files)?;

    // 3. The CAs.
    let (ca, server_ca_pem) = check_cas(req, valid_for)?;

    // 4. Sign, then write all or nothing.
    let issued = tenantci_core::pki::issue::client_cert(
        &ca,
        &ClientCertSpec {
            common_name: req.common_name.clone(),
            organizations: req.organizations.clone(),
            valid_for,
            key_type: req.key_type,
        },
    )?;
    check_reads_back(req, &issued.cert_pem)?;
    let kubeconfig = kubeconfig::render(
        &context_name(&req.common_name),
        &req.server,
        &kubeconfig::Material::Files {
            ca: &files.ca,
            cert: &files.cert,
            key: &files.key,
        },
    );
    write_all_or_nothing(
        &out_dir,
        &[
            (&files.ca, server_ca_pem.as_bytes()),
            (&files.cert, issued.cert_pem.as_bytes()),
            (&files.key, issued.key_pem.as_bytes()),
            (&files.kubeconfig, kubeconfig.as_bytes()),
        ],
    )?;
    tracing::info!(
        server = %req.server,
        common_name = %req.common_name,
        groups = ?req.organizations,
        serial = %issued.serial_hex,
        out_dir = %out_dir.display(),
        "minted a runner credential"
    );
    Ok(HandBack {
        server: req.server.clone(),
        common_name: req.common_name.clone(),
        groups: req.organizations.clone(),
        files,
        not_before: rfc3339(issued.not_before),
        not_after: rfc3339(issued.not_after),
        valid_for: tenantci_core::duration::format(valid_for),
        serial: issued.serial_hex,
        key_type: req.key_type,
    })
}

/// The signed certificate, read back as kube-apiserver reads it, is exactly the user and groups
/// asked for: nothing is written otherwise (the policy checked the names; this checks what the
/// certificate says of them).
fn check_reads_back(req: &MintRequest, cert_pem: &str) -> Result<()> {
    let fix = "nothing was written; report this with the names you passed";
    let identity = CertInfo::from_pem(cert_pem)
        .map_err(|e| Error::check_failed(format!("the minted certificate does not parse: {e}")))?
        .identity()
        .map_err(|a| {
            Error::check_failed(format!("the minted certificate is ambiguous: {a}")).hint(fix)
        })?;
    if identity.user != req.common_name || identity.groups != req.organizations {
        return Err(Error::check_failed(format!(
            "the minted certificate reads as user `{}` in {:?}, not the `{}` in {:?} asked for",
            identity.user, identity.groups, req.common_name, req.organizations
        ))
        .hint(fix));
    }
    Ok(())
}

/// Everything [`mint`] checks except the output directory, reading the CA files and writing
/// nothing: for a caller that mints later in its run (after moving old files aside).
pub fn check(req: &MintRequest) -> Result<()> {
    let valid_for = check_values(req)?;
    check_cas(req, valid_for).map(|_| ())
}

/// The names, the validity and the server URL; returns the validity.
fn check_values(req: &MintRequest) -> Result<Duration> {
    policy::check_common_name(&req.common_name)?;
    policy::check_organizations(&req.organizations)?;
    let valid_for = match &req.valid_for {
        Some(raw) => policy::parse_valid_for(raw)?,
        None => policy::DEFAULT_VALID_FOR,
    };
    check_server_url(&req.server)?;
    Ok(valid_for)
}

/// The ClientCA (its key matches its certificate, it is a CA, it outlasts `valid_for`) and
/// the serving CA's PEM.
fn check_cas(req: &MintRequest, valid_for: Duration) -> Result<(CertificateAuthority, String)> {
    let (ca_cert, ca_key, server_ca) = req.ca.paths()?;
    let ca = CertificateAuthority::load(&ca_cert, &ca_key)?;
    let server_ca_pem = read_server_ca(&server_ca)?;
    policy::check_within_ca(valid_for, OffsetDateTime::now_utc(), ca.not_after())?;
    Ok((ca, server_ca_pem))
}

/// A context name kubectl shows: the user, which is what the credential is.
fn context_name(cn: &str) -> String {
    cn.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn check_server_url(server: &str) -> Result<()> {
    let uri: http::Uri = server.parse().map_err(|_| {
        Error::bad_input(format!("the server `{server}` is not a URL"))
            .hint("pass --server (SOCIALWEB_TENANTCREDENTIAL_SERVER) as https://127.0.0.1:<port>, the Cluster's status.url")
    })?;
    if server.is_empty() || uri.scheme_str() != Some("https") || uri.host().is_none() {
        return Err(Error::bad_input(format!(
            "the server `{server}` is not an https:// URL with a host"
        ))
        .hint("pass --server (SOCIALWEB_TENANTCREDENTIAL_SERVER) as https://127.0.0.1:<port>; `kubectl --kubeconfig <admin> get cluster <name> -o jsonpath='{.status.url}'` prints it"));
    }
    Ok(())
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| {
        Error::bad_input(format!(
            "cannot resolve the output directory `{}`",
            p.display()
        ))
        .caused_by(e)
    })
}

fn check_out_dir(out_dir: &Path, files: &CredentialFiles) -> Result<()> {
    if out_dir.exists() && !out_dir.is_dir() {
        return Err(Error::bad_input(format!(
            "the output directory `{}` exists and is not a directory",
            out_dir.display()
        ))
        .hint("pass --out-dir (SOCIALWEB_TENANTCREDENTIAL_OUT_DIR) naming a directory, or a path that does not exist yet"));
    }
    let existing: Vec<String> = files
        .all()
        .iter()
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    if !existing.is_empty() {
        return Err(Error::bad_input(format!(
            "`{}` already holds {}; minting never overwrites a credential",
            out_dir.display(),
            existing.join(", ")
        ))
        .hint(format!(
            "to rotate, move the old files aside first (e.g. `mv {0} {0}.old-$(date +%Y%m%d%H%M%S)`), or pass another --out-dir",
            out_dir.display()
        )));
    }
    Ok(())
}

fn read_server_ca(path: &Path) -> Result<String> {
    let pem =
        tenantci_core::input::read_text("the serving CA", path, tenantci_core::input::MAX_PEM)?;
    CertInfo::from_pem(&pem).map_err(|e| {
        Error::bad_input(format!(
            "the serving CA `{}` is not a PEM certificate",
            path.display()
        ))
        .caused_by(e)
        .hint("pass --server-ca naming the CA that signed the tenant apiserver's certificate")
    })?;
    Ok(pem)
}

fn write_all_or_nothing(dir: &Path, files: &[(&PathBuf, &[u8])]) -> Result<()> {
    let created_dir = !dir.exists();
    fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
        .map_err(|e| Error::unwritable("the output directory", dir, e))?;
    let files: Vec<(&Path, &[u8])> = files.iter().map(|(p, c)| (p.as_path(), *c)).collect();
    fsutil::write_new_files(&files, MODE_SECRET).map_err(|(path, e)| {
        if created_dir {
            let _ = std::fs::remove_dir(dir);
        }
        Error::unwritable("the credential file", &path, e)
    })
}
