//! `tenantci front revoke`: what goes on the deny-list. A certificate is revoked on the clusters
//! whose ClientCA issued it (found among the clusters the front serves); a serial given alone
//! is revoked on the named `--cluster`, or on every cluster when none is named (a serial is
//! only unique per issuer, so the narrower entry is the default whenever the issuer is known).

use std::path::Path;

use tenantci_core::gateway::layout::StateDir;
use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result};

use super::config::FrontConfig;
use super::deny::{self, DenyList};

/// What `front revoke` was given.
pub enum Target<'a> {
    /// A PEM certificate (e.g. a leaked tls.crt).
    Cert(&'a Path),
    /// A serial in hex, as `openssl x509 -serial` prints it (colons and case ignored).
    Serial(&'a str),
}

/// The deny-list entries to add: one serial, on some clusters or on all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// None: every cluster the front serves.
    pub clusters: Option<Vec<String>>,
    /// Lower-case hex, as [`deny::normalize`] spells it.
    pub serial: String,
    /// The note beside each entry: the operator's, else the certificate's subject.
    pub note: String,
}

/// Works out the entry; refuses a cluster the front does not serve, a certificate none of
/// its clusters' ClientCAs issued, and a serial that is not hex.
pub fn plan(
    config: &FrontConfig,
    target: Target<'_>,
    cluster: Option<&str>,
    note: Option<&str>,
) -> Result<Revocation> {
    if let Some(c) = cluster
        && config.cluster(c).is_none()
    {
        return Err(Error::bad_input(format!(
            "--cluster `{c}` is not served by this front (its config names {})",
            served(config)
        ))
        .hint("name a [[cluster]] of the front config, or leave --cluster out to refuse the serial on every cluster"));
    }
    let (serial, cluster, subject) = match target {
        Target::Cert(path) => {
            let (info, der) = read_cert(path)?;
            let issuers = issuing_clusters(config, &info, &der, path)?;
            if let Some(c) = cluster.filter(|c| !issuers.iter().any(|i| i == c)) {
                return Err(Error::bad_input(format!(
                    "`{}` was issued by the ClientCA of {}, not `{c}`'s",
                    path.display(),
                    issuers.join(", ")
                ))
                .hint("leave --cluster out: the certificate names its own cluster"));
            }
            (info.serial_hex, Some(issuers), info.subject)
        }
        Target::Serial(s) => (
            s.to_string(),
            cluster.map(|c| vec![c.to_string()]),
            String::new(),
        ),
    };
    let serial = deny::normalize(&serial).ok_or_else(|| {
        Error::bad_input(format!("--serial `{serial}` is not hex"))
            .hint("give it as `openssl x509 -noout -serial` prints it, e.g. 1A2B:3C or 1a2b3c")
    })?;
    let note = note.map(str::to_string).unwrap_or(subject);
    Ok(Revocation {
        clusters: cluster,
        serial,
        note: note.replace('\n', " "),
    })
}

/// Adds `r` to the list at `path` (which must exist: see [`DenyList::load`]); false when it
/// was all there already, and then nothing is written.
pub fn apply(path: &Path, r: &Revocation) -> Result<bool> {
    let mut list = DenyList::load(path)?;
    let scopes: Vec<Option<String>> = match &r.clusters {
        None => vec![None],
        Some(clusters) => clusters.iter().cloned().map(Some).collect(),
    };
    let mut added = false;
    for scope in scopes {
        added |= list.add(scope, r.serial.clone(), r.note.clone());
    }
    if added {
        list.save(path)?;
    }
    Ok(added)
}

/// The certificate read back, and its DER.
fn read_cert(path: &Path) -> Result<(CertInfo, Vec<u8>)> {
    let pem = tenantci_core::input::read_text(
        "the certificate to revoke",
        path,
        tenantci_core::input::MAX_PEM,
    )?;
    let not_a_cert = |e: String| {
        Error::bad_input(format!("`{}` is not a certificate: {e}", path.display()))
            .hint("give the PEM certificate (tls.crt), or its serial with --serial")
    };
    let info = CertInfo::from_pem(&pem).map_err(not_a_cert)?;
    let der = pem::parse(pem.as_bytes())
        .map_err(|e| not_a_cert(e.to_string()))?
        .into_contents();
    Ok((info, der))
}

/// The served clusters whose ClientCA signed `info` (usually one; every one, should clusters
/// share a ClientCA), checked at its own start of validity so an expired certificate is
/// still placed.
fn issuing_clusters(
    config: &FrontConfig,
    info: &CertInfo,
    der: &[u8],
    path: &Path,
) -> Result<Vec<String>> {
    let state = StateDir::new(&config.state_dir);
    let at = info.not_before + time::Duration::seconds(1);
    let issuers: Vec<String> = config
        .clusters
        .iter()
        .filter(|rule| {
            let ca = state.cluster(&rule.name).client_ca_cert;
            std::fs::read_to_string(&ca)
                .is_ok_and(|pem| tenantci_core::pki::verify::chains_to(der, &pem, at).is_ok())
        })
        .map(|rule| rule.name.clone())
        .collect();
    if !issuers.is_empty() {
        return Ok(issuers);
    }
    Err(Error::bad_input(format!(
        "`{}` was not issued by the ClientCA of any cluster this front serves ({})",
        path.display(),
        served(config)
    ))
    .hint("pass its serial with --serial (and --cluster, if you know its cluster) to refuse it anyway"))
}

fn served(config: &FrontConfig) -> String {
    config
        .clusters
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
