//! `tenantci front status`: what the front admits and refuses, from its config and deny-list
//! (the running front reads the same files). Live counts are on its `/metrics`.

use serde::Serialize;

use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::{Error, Result};

use super::config::FrontConfig;
use super::deny::DenyList;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub listen: String,
    pub metrics_listen: Option<String>,
    pub serving_cert: CertStatus,
    pub clusters: Vec<ClusterStatus>,
    /// Where the deny-list lives, and whether it reads (a running front keeps its last good
    /// list while it does not).
    pub deny_list: DenyListStatus,
    /// None when the list does not read: nothing is known of what is revoked.
    pub denied: Option<Vec<Denied>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DenyListStatus {
    pub path: String,
    /// Why it cannot be read; None when it reads.
    pub problem: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertStatus {
    pub subject: String,
    pub not_after: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub name: String,
    /// `CN=..., O=...` per allowed subject; empty: the cluster is unreachable.
    pub allowed: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Denied {
    /// The cluster whose ClientCA issued it; None: refused on every cluster.
    pub cluster: Option<String>,
    pub serial: String,
    pub note: String,
}

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
