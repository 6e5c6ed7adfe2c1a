//! Checks on this host's files: the entry's files and their modes, the client certificate
//! (validity, key, chain to the cluster's ClientCA); and [`cluster_at`], the state directory's
//! cluster whose apiserver the entry names. No network.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use crate::checklist::Check;
use crate::gitlab::entry::EntryView;
use kube::config::Kubeconfig;
use tenantci_core::gateway::StateDir;
use tenantci_core::pki::inspect::{CertInfo, rfc3339};
use tenantci_core::pki::verify;

/// PEM files of a credential are a few kB.
const MAX_PEM_BYTES: u64 = 64 * 1024;
/// Below this fraction of its lifetime a certificate is renewed (as kubelet's rotation does).
const RENEW_AT_FRACTION: f64 = 1.0 / 3.0;

/// The cluster of the state dir whose tenant apiserver is the entry's `host`.
#[derive(Debug, Clone)]
pub struct ClusterFiles {
    /// The cluster's name in the state directory.
    pub name: String,
    /// The cluster's ClientCA certificate, to which the entry's client certificate must chain.
    pub client_ca: PathBuf,
    /// The cluster's `node-image.json`; a path that is not a file skips the checks against it.
    pub node_image: PathBuf,
}

/// Found by the `server` of each cluster's tenant-admin kubeconfig (a file read; no admin
/// request is made).
pub fn cluster_at(state: &StateDir, host: Option<&str>) -> Option<ClusterFiles> {
    let host = host?.trim_end_matches('/');
    state.cluster_names().ok()?.into_iter().find_map(|name| {
        let paths = state.cluster(&name);
        let kc = Kubeconfig::read_from(&paths.tenant_admin_kubeconfig).ok()?;
        let serves = kc.clusters.iter().any(|c| {
            c.cluster
                .as_ref()
                .and_then(|c| c.server.as_deref())
                .is_some_and(|s| s.trim_end_matches('/') == host)
        });
        serves.then_some(ClusterFiles {
            client_ca: paths.client_ca_cert,
            node_image: paths.node_image,
            name,
        })
    })
}

fn mode(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// The entry's files exist as regular files and the secrets in them are not readable by
/// others. Returns whether the credential files are usable.
pub fn files(config: &Path, view: &EntryView, lines: &mut Vec<Check>) -> bool {
    let mut problems = Vec::new();
    let literal_token = view.token.as_deref().is_some_and(|t| !t.starts_with('$'));
    if literal_token && mode(config).is_some_and(|m| m & 0o077 != 0) {
        problems.push(format!(
            "`{}` holds the runner token and has mode {:o}",
            config.display(),
            mode(config).unwrap_or_default()
        ));
    }
    if view.host.is_none() {
        lines.push(Check::fail(
            "files",
            "[runners.kubernetes] has no host: gitlab-runner would use its in-cluster config",
            "re-run `tenantci bootstrap runner` to write host, cert_file, key_file and ca_file",
        ));
        return false;
    }
    let named = [
        ("cert_file", &view.cert_file),
        ("key_file", &view.key_file),
        ("ca_file", &view.ca_file),
        ("tls-ca-file", &view.tls_ca_file),
    ];
    for (key, path) in named {
        match path {
            None if key != "tls-ca-file" => problems.push(format!("{key} is not set")),
            None => {}
            Some(p) if !p.is_absolute() => {
                problems.push(format!("{key} `{}` is not absolute", p.display()))
            }
            Some(p) if !p.is_file() => {
                problems.push(format!("{key} `{}` is not a readable file", p.display()))
            }
            Some(_) => {}
        }
    }
    if let Some(key) = &view.key_file
        && let Some(m) = mode(key).filter(|m| m & 0o077 != 0)
    {
        problems.push(format!(
            "key_file `{}` has mode {m:o}: others can read the runner's key",
            key.display()
        ));
    }
    if problems.is_empty() {
        lines.push(Check::ok(
            "files",
            "cert_file, key_file, ca_file present; secrets 0600",
        ));
        true
    } else {
        let fix = "chmod 600 the secret files; re-run `tenantci bootstrap runner` to restore missing ones";
        lines.push(Check::fail("files", problems.join("; "), fix));
        false
    }
}

fn read_pem(path: &Path) -> Result<String, String> {
    let raw = tenantci_core::fsutil::read_bounded(path, MAX_PEM_BYTES)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    String::from_utf8(raw).map_err(|_| format!("`{}` is not PEM text", path.display()))
}

const REMINT: &str = "re-mint with `tenantci bootstrap runner --rotate`";

/// The certificate's validity and remaining life, its key, and its chain to the ClientCA of
/// `cluster`. Returns the certificate when it parsed (later checks name its groups).
pub fn certificate(
    view: &EntryView,
    cluster: Option<&ClusterFiles>,
    now: OffsetDateTime,
    lines: &mut Vec<Check>,
) -> Option<CertInfo> {
    let (cert_path, key_path) = (view.cert_file.as_deref()?, view.key_file.as_deref()?);
    let parsed = read_pem(cert_path).and_then(|pem| {
        let info = CertInfo::from_pem(&pem)?;
        Ok((pem, info))
    });
    let (pem, info) = match parsed {
        Ok(p) => p,
        Err(e) => {
            lines.push(Check::fail("certificate", e, REMINT));
            return None;
        }
    };
    lines.push(validity(&info, now));
    if let Err(ambiguity) = info.identity() {
        // Checked as the front and the credential checks do: the apiserver may read this
        // subject as another identity than its text suggests.
        let what = format!("{}: {ambiguity}", info.subject);
        lines.push(Check::fail("certificate", what, REMINT));
    }
    lines.push(key_line(&info, key_path));
    lines.push(chain_line(&pem, &info, cluster));
    Some(info)
}

fn validity(info: &CertInfo, now: OffsetDateTime) -> Check {
    let who = format!("{} (expires {})", info.subject, rfc3339(info.not_after));
    if now >= info.not_after {
        return Check::fail(
            "certificate",
            format!("{who}: expired; the apiserver refuses it (401)"),
            REMINT,
        );
    }
    if now < info.not_before {
        return Check::fail(
            "certificate",
            format!("{who}: not valid before {}", rfc3339(info.not_before)),
            "check this host's clock, or re-mint",
        );
    }
    let left = info.remaining_fraction(now);
    let days = (info.not_after - now).whole_days();
    if left < RENEW_AT_FRACTION {
        return Check::warn(
            "certificate",
            format!(
                "{who}: {days} day(s) left ({:.0}% of its lifetime)",
                left * 100.0
            ),
            format!("renew now: {REMINT}"),
        );
    }
    Check::ok(
        "certificate",
        format!(
            "{who}: {days} day(s) left ({:.0}% of its lifetime)",
            left * 100.0
        ),
    )
}

fn key_line(info: &CertInfo, key_path: &Path) -> Check {
    let matched = read_pem(key_path).and_then(|pem| verify::key_matches(&info.spki_der, &pem));
    match matched {
        Ok(true) => Check::ok("key", "key_file is the certificate's key"),
        Ok(false) => Check::fail(
            "key",
            format!(
                "key_file `{}` is not the key of cert_file: TLS to the apiserver fails",
                key_path.display()
            ),
            "restore the key that belongs to the certificate, or re-mint both with --rotate",
        ),
        Err(e) => Check::fail("key", format!("key_file: {e}"), REMINT),
    }
}

fn chain_line(pem: &str, info: &CertInfo, cluster: Option<&ClusterFiles>) -> Check {
    let Some(cluster) = cluster else {
        return Check::skip(
            "client-ca",
            "no state dir cluster serves this host (pass --state-dir to check the chain)",
        );
    };
    let der = match pem::parse(pem) {
        Ok(p) => p.into_contents(),
        Err(e) => return Check::fail("client-ca", e.to_string(), REMINT),
    };
    // An instant inside the certificate's life: the chain alone is checked here, validity is
    // the `certificate` line's.
    let within = info.not_before + (info.not_after - info.not_before) / 2;
    let verdict = read_pem(&cluster.client_ca).and_then(|ca| verify::chains_to(&der, &ca, within));
    match verdict {
        Ok(()) => Check::ok(
            "client-ca",
            format!("signed by cluster `{}`'s ClientCA", cluster.name),
        ),
        Err(e) => Check::fail(
            "client-ca",
            format!(
                "the certificate does not chain to cluster `{}`'s ClientCA ({e}): the apiserver refuses it",
                cluster.name
            ),
            format!("the credential is for another cluster; {REMINT}"),
        ),
    }
}
