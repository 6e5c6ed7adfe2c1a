//! `tenantci front status`: what the running front has in force and in flight, read from it
//! over its local socket (`live`): the clusters and allowed subjects of the rules in force, the
//! deny-list, the open tunnels per cluster and subject with their age and bytes, the next
//! expiry among the client credentials it has admitted, and how the last reload went. The
//! document carries a version; a `front status` of another version refuses it clearly.

use std::path::Path;

use serde::{Deserialize, Serialize};

use tenantci_core::{Error, Result};

use super::reload::Reload;

/// The status document's format; [`fetch`] refuses another.
pub const VERSION: u32 = 1;

/// `front status`'s report (`-o json` prints it as is).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The format, [`VERSION`].
    pub version: u32,
    /// The public address the front listens on.
    pub listen: String,
    /// The metrics address; None: no metrics listener.
    pub metrics_listen: Option<String>,
    /// The serving certificate a new client is shown.
    pub serving_cert: CertStatus,
    /// Each `[[cluster]]` in force with its allowed subjects.
    pub clusters: Vec<ClusterStatus>,
    /// Where the deny-list lives, and whether it reads (the front keeps its last good list
    /// while it does not).
    pub deny_list: DenyListStatus,
    /// The deny-list in force.
    pub denied: Vec<Denied>,
    /// Open tunnels per cluster and subject.
    pub subjects: Vec<SubjectStatus>,
    /// Each open tunnel, oldest first.
    pub tunnels: Vec<TunnelStatus>,
    /// The admitted client credential that expires next; None: none seen, or all expired.
    pub next_expiry: Option<ExpiryStatus>,
    /// The last reload of the config and the files it names.
    pub reload: Reload,
}

/// The deny-list file and whether it reads.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DenyListStatus {
    /// The file the front reads.
    pub path: String,
    /// Why it cannot be read; None when it reads.
    pub problem: Option<String>,
}

/// The front's serving certificate, as `front status` shows it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertStatus {
    /// Its subject, attribute by attribute.
    pub subject: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
}

/// One `[[cluster]]` of the rules in force.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The Cluster's name (its ALPN name).
    pub name: String,
    /// `CN=..., O=...` per allowed subject; empty: the cluster is unreachable.
    pub allowed: Vec<String>,
}

/// One deny-list entry.
#[derive(Debug, Serialize, Deserialize)]
pub struct Denied {
    /// The cluster whose ClientCA issued it; None: refused on every cluster.
    pub cluster: Option<String>,
    /// The serial, lower-case hex.
    pub serial: String,
    /// The note written beside it.
    pub note: String,
}

/// One open tunnel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TunnelStatus {
    /// The cluster it reaches.
    pub cluster: String,
    /// The client certificate's subject, `CN=..., O=...`.
    pub subject: String,
    /// Its serial, lower-case hex.
    pub serial: String,
    /// The client's address.
    pub peer: String,
    /// Seconds since it opened.
    pub age_seconds: i64,
    /// Bytes from the runner to the apiserver so far.
    pub bytes_up: u64,
    /// Bytes from the apiserver to the runner so far.
    pub bytes_down: u64,
}

/// The open tunnels of one subject to one cluster.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectStatus {
    /// The cluster.
    pub cluster: String,
    /// The subject, `CN=..., O=...`.
    pub subject: String,
    /// Tunnels open.
    pub open: u32,
    /// Bytes up over those tunnels.
    pub bytes_up: u64,
    /// Bytes down over those tunnels.
    pub bytes_down: u64,
}

/// The admitted credential that expires next.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpiryStatus {
    /// The cluster it was admitted to.
    pub cluster: String,
    /// Its subject.
    pub subject: String,
    /// Its serial.
    pub serial: String,
    /// When it expires (RFC 3339).
    pub not_after: String,
}

/// Asks the front answering on `socket` (the one serving `config`) for its status. No front
/// there is bad input: the sentence names the socket and how to start one.
pub fn fetch(config: &Path, socket: &Path) -> Result<Status> {
    use std::io::Read;
    let not_running = |e: std::io::Error| {
        Error::bad_input(format!(
            "no front is running for `{}`: nothing answers on `{}` ({e})",
            config.display(),
            socket.display()
        ))
        .hint(format!(
            "start it with `tenantci front serve --config {}` (or pass the --config it runs with)",
            config.display()
        ))
    };
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(not_running)?;
    let timeout = Some(std::time::Duration::from_secs(10));
    let _ = stream.set_read_timeout(timeout);
    let mut body = Vec::new();
    stream
        .take(tenantci_core::input::MAX_CONFIG)
        .read_to_end(&mut body)
        .map_err(|e| {
            Error::external(format!(
                "the front on `{}` did not answer",
                socket.display()
            ))
            .caused_by(e)
            .hint("is it overloaded or stopping? try again, or look at its log")
        })?;
    let version = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["version"].as_u64());
    if version != Some(u64::from(VERSION)) {
        return Err(Error::bad_input(format!(
            "the front on `{}` answers with status version {}; this tenantci reads version {VERSION}",
            socket.display(),
            version.map_or("none".to_string(), |v| v.to_string())
        ))
        .hint("run the `tenantci front status` of the same release as the running front"));
    }
    serde_json::from_slice(&body).map_err(|e| {
        Error::external(format!(
            "the front on `{}` answered with a status that does not read",
            socket.display()
        ))
        .caused_by(e)
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
    let denied = &s.denied;
    match &s.deny_list.problem {
        None => out.push_str(&format!(
            "deny-list {}: {} {}\n",
            s.deny_list.path,
            denied.len(),
            if denied.len() == 1 { "entry" } else { "entries" }
        )),
        Some(why) => out.push_str(&format!(
            "deny-list {}: UNREADABLE: {why}\n  the running front keeps the list it last read ({} {}); a front started now refuses to start\n",
            s.deny_list.path,
            denied.len(),
            if denied.len() == 1 { "entry" } else { "entries" }
        )),
    }
    for d in denied {
        let cluster = d.cluster.as_deref().unwrap_or("every cluster");
        out.push_str(&format!("  {cluster}  {}  {}\n", d.serial, d.note));
    }
    render_live(s, &mut out);
    out
}

fn render_live(s: &Status, out: &mut String) {
    out.push_str(&format!("open tunnels: {}\n", s.tunnels.len()));
    for x in &s.subjects {
        out.push_str(&format!(
            "  {}  {}  {} open  {} B up  {} B down\n",
            x.cluster, x.subject, x.open, x.bytes_up, x.bytes_down
        ));
    }
    for t in &s.tunnels {
        out.push_str(&format!(
            "  {}  {}  serial {}  from {}  {}s  {} B up  {} B down\n",
            t.cluster, t.subject, t.serial, t.peer, t.age_seconds, t.bytes_up, t.bytes_down
        ));
    }
    match &s.next_expiry {
        Some(e) => out.push_str(&format!(
            "next client expiry: {} ({}, serial {}, cluster {})\n",
            e.not_after, e.subject, e.serial, e.cluster
        )),
        None => out.push_str("next client expiry: none seen\n"),
    }
    match &s.reload.error {
        None => out.push_str(&format!(
            "last reload: applied at {} ({})\n",
            s.reload.at, s.reload.trigger
        )),
        Some(why) => out.push_str(&format!(
            "last reload: NOT APPLIED at {} ({}): {why}\n  the front serves with the rules it had\n",
            s.reload.at, s.reload.trigger
        )),
    }
}
