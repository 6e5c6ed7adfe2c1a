//! `tenantci front status`: what the front admits and refuses, from its config and deny-list
//! (the running front reads the same files). Live counts are on its `/metrics`.

use serde::Serialize;

use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::{Error, Result};

use super::config::FrontConfig;
use super::deny::DenyList;

/// `front status`'s report (`-o json` prints it as is).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The public address of the config.
    pub listen: String,
    /// The metrics address; None: no metrics listener.
    pub metrics_listen: Option<String>,
    /// The serving certificate's subject and expiry.
    pub serving_cert: CertStatus,
    /// Each `[[cluster]]` with its allowed subjects.
    pub clusters: Vec<ClusterStatus>,
    /// Where the deny-list lives, and whether it reads (a running front keeps its last good
    /// list while it does not).
    pub deny_list: DenyListStatus,
    /// None when the list does not read: nothing is known of what is revoked.
    pub denied: Option<Vec<Denied>>,
}

/// The deny-list file and whether it reads.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DenyListStatus {
    /// The file the front reads.
    pub path: String,
    /// Why it cannot be read; None when it reads.
    pub problem: Option<String>,
}

/// The front's serving certificate, as `front status` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertStatus {
    /// Its subject, attribute by attribute.
    pub subject: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
}

/// One `[[cluster]]` of the config.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The Cluster's name (its ALPN name).
    pub name: String,
    /// `CN=..., O=...` per allowed subject; empty: the cluster is unreachable.
    pub allowed: Vec<String>,
}

/// One deny-list entry.
#[derive(Debug, Serialize)]
pub struct Denied {
    /// The cluster whose ClientCA issued it; None: refused on every cluster.
    pub cluster: Option<String>,
    /// The serial, lower-case hex.
    pub serial: String,
    /// The note written beside it.
    pub note: String,
}

/// Reads the config's serving certificate (its first PEM block) for its subject and expiry.
pub fn serving_cert(config: &FrontConfig) -> Result<CertInfo> {
    let pem = tenantci_core::input::read_text(
        "the front's serving certificate",
        &config.serving_cert,
        tenantci_core::input::MAX_PEM,
    )?;
    CertInfo::from_pem(&pem).map_err(|e| {
        Error::bad_input(format!(
            "`{}` is not a certificate: {e}",
            config.serving_cert.display()
        ))
        .hint("give the front's PEM serving certificate (`front init` writes tls.crt)")
    })
}

/// The status from the config and the files it names. An unreadable deny-list is reported in
/// the status, not an error; an unreadable serving certificate is.
pub fn read(config: &FrontConfig) -> Result<Status> {
    let cert = serving_cert(config)?;
    // Status is what an operator runs when something is wrong: an unreadable list is reported,
    // not a reason to show nothing.
    let (deny, problem) = match DenyList::load(config.deny_list_path()) {
        Ok(list) => (Some(list), None),
        Err(e) => (None, Some(e.message().to_string())),
    };
    Ok(Status {
        listen: config.listen.to_string(),
        metrics_listen: config.metrics_listen.map(|a| a.to_string()),
        serving_cert: CertStatus {
            subject: cert.subject,
            not_after: rfc3339(cert.not_after),
        },
        clusters: config
            .clusters
            .iter()
            .map(|c| ClusterStatus {
                name: c.name.clone(),
                allowed: c
                    .allow
                    .iter()
                    .map(|s| format!("CN={}, O={}", s.common_name, s.organization))
                    .collect(),
            })
            .collect(),
        deny_list: DenyListStatus {
            path: config.deny_list_path().display().to_string(),
            problem,
        },
        denied: deny.map(|list| {
            list.entries()
                .map(|e| Denied {
                    cluster: e.cluster.map(str::to_string),
                    serial: e.serial.into(),
                    note: e.note.into(),
                })
                .collect()
        }),
    })
}

/// The status as text, for the terminal.
pub fn render(s: &Status) -> String {
    let mut out = format!(
        "front: {} (certificate {}, expires {})\n",
        s.listen, s.serving_cert.subject, s.serving_cert.not_after
    );
    for c in &s.clusters {
        if c.allowed.is_empty() {
            out.push_str(&format!(
                "cluster {}: no subject allowed (unreachable)\n",
                c.name
            ));
        } else {
            out.push_str(&format!(
                "cluster {}: allows {}\n",
                c.name,
                c.allowed.join("; ")
            ));
        }
    }
    let denied = s.denied.as_deref().unwrap_or_default();
    match &s.deny_list.problem {
        None => out.push_str(&format!(
            "deny-list {}: {} {}\n",
            s.deny_list.path,
            denied.len(),
            if denied.len() == 1 { "entry" } else { "entries" }
        )),
        Some(why) => out.push_str(&format!(
            "deny-list {}: UNREADABLE: {why}\n  a running front keeps the list it last read; a front started now refuses to start\n",
            s.deny_list.path
        )),
    }
    for d in denied {
        let cluster = d.cluster.as_deref().unwrap_or("every cluster");
        out.push_str(&format!("  {cluster}  {}  {}\n", d.serial, d.note));
    }
    out
}
