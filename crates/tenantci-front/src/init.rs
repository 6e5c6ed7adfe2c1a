//! `tenantci front init`: the front's own CA and serving certificate, its empty deny-list and
//! an explicit config naming the clusters and the one subject allowed to each. Writes every file
//! or none, never over an existing one. The CA key stays here for the next serving certificate;
//! runner hosts get only the CA certificate (in their bundle).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenantci_core::pki::{CertificateAuthority, issue};
use tenantci_core::{Error, Result};

use super::config::{ClusterRule, FrontConfig, Limits, Subject};

/// What `front init` is given.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Where every file goes (made 0700); none of them may exist yet.
    pub dir: PathBuf,
    /// The gateway's state directory, written into the config.
    pub state_dir: PathBuf,
    /// The clusters to serve, each a `[[cluster]]` of the config.
    pub clusters: Vec<String>,
    /// The one subject allowed to each cluster.
    pub subject: Subject,
    /// The public address of the config.
    pub listen: SocketAddr,
    /// The metrics address of the config; None: no metrics listener.
    pub metrics_listen: Option<SocketAddr>,
    /// DNS names and IP addresses the runner hosts reach the front by.
    pub names: Vec<String>,
    /// The lifetime of the front's CA and serving certificate.
    pub valid_for: Duration,
}

/// The config's file name in `dir`.
pub const CONFIG_FILE: &str = "front.toml";

/// The config `init` writes, pure (checked as `serve` will check it).
pub fn plan(inputs: &Inputs) -> Result<FrontConfig> {
    if inputs.names.is_empty() {
        return Err(Error::bad_input("no --name for the front's certificate")
            .hint("give the DNS name or IP address runner hosts use to reach the front, e.g. --name front.example.com"));
    }
    let config = FrontConfig {
        listen: inputs.listen,
        state_dir: inputs.state_dir.clone(),
        serving_cert: PathBuf::from("tls.crt"),
        serving_key: PathBuf::from("tls.key"),
        deny_list: Some(PathBuf::from(super::config::DENY_LIST_FILE)),
        metrics_listen: inputs.metrics_listen,
        limits: Limits::default(),
        renewal: super::config::Renewal::default(),
        clusters: inputs
            .clusters
            .iter()
            .map(|name| ClusterRule {
                name: name.clone(),
                allow: vec![inputs.subject.clone()],
            })
            .collect(),
    };
    config.check()?;
    Ok(config)
}

/// Writes front.toml, front-ca.crt/.key, tls.crt/.key and an empty deny-list into `dir`.
pub fn run(inputs: &Inputs) -> Result<Vec<PathBuf>> {
    let config = plan(inputs)?;
    let text = toml_edit::ser::to_string_pretty(&config)
        .map_err(|e| Error::bad_input("cannot render the front config").caused_by(e))?;
    let ca = CertificateAuthority::generate("tenantci front CA", inputs.valid_for)?;
    let leaf = issue::server_cert(&ca, "tenantci front", &inputs.names, inputs.valid_for)?;
    let deny = super::deny::DenyList::default().render();
    let dir = &inputs.dir;
    tenantci_core::fsutil::create_dir_all(dir, 0o700)
        .map_err(|e| Error::unwritable("the front's directory", dir, e))?;
    let names = [
        CONFIG_FILE,
        "front-ca.crt",
        "front-ca.key",
        "tls.crt",
        "tls.key",
        super::config::DENY_LIST_FILE,
    ];
    let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
    let bodies = [
        text.as_bytes(),
        ca.cert_pem().as_bytes(),
        ca.key_pem().as_bytes(),
        leaf.cert_pem.as_bytes(),
        leaf.key_pem.as_bytes(),
        deny.as_bytes(),
    ];
    let files: Vec<(&Path, &[u8])> = paths.iter().map(PathBuf::as_path).zip(bodies).collect();
    tenantci_core::fsutil::write_new_files(&files, 0o600).map_err(|(path, e)| {
        Error::bad_input(format!("cannot write `{}`", path.display()))
            .caused_by(e)
            .hint("`front init` never overwrites: pick an empty --dir, or move the old files aside")
    })?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planned_config_reads_back_as_serve_reads_it() {
        let inputs = Inputs {
            dir: "/etc/tenantci/front".into(),
            state_dir: "/var/lib/socialweb".into(),
            clusters: vec!["ci".into()],
            subject: Subject {
                common_name: "gitlab-runner".into(),
                organization: "gitlab-runner".into(),
            },
            listen: "0.0.0.0:7443".parse().unwrap(),
            metrics_listen: None,
            names: vec!["front.example.com".into()],
            valid_for: Duration::from_secs(86_400),
        };
        let text = toml_edit::ser::to_string_pretty(&plan(&inputs).unwrap()).unwrap();
        let back: FrontConfig = toml_edit::de::from_str(&text).unwrap();
        back.check().unwrap();
        assert_eq!(
            back.cluster("ci").unwrap().allow[0].common_name,
            "gitlab-runner"
        );
        let masters = Inputs {
            subject: Subject {
                common_name: "admin".into(),
                organization: "system:masters".into(),
            },
            ..inputs
        };
        assert!(plan(&masters).is_err());
    }
}
