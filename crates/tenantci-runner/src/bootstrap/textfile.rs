//! The renewal's result where node_exporter's textfile collector reads it: `bootstrap runner
//! --textfile PATH` (what `tenantci-credential-renew@.service` runs) writes, after every run
//! that got as far as trying, whether it succeeded, when it finished and when the runner's
//! certificate on disk expires. Alert rules: manifests/monitoring/runner-credential-alerts.yaml.
//!
//! [`render`] is pure; [`write()`] replaces the file atomically (node_exporter must never read
//! half a file) with mode 0644: the metrics carry no secret. Does not decide when a run
//! counts as failed (the caller passes the exit code) nor schedule anything (systemd).

use std::path::Path;

use time::OffsetDateTime;

use tenantci_core::pki::inspect::CertInfo;
use tenantci_core::{Error, Result, fsutil};

/// Metrics are not secret: node_exporter (another user) must read them.
const MODE_PUBLIC: u32 = 0o644;

/// One finished run of `bootstrap runner` for one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The tenant cluster's name: the metrics' `cluster` label.
    pub cluster: String,
    /// The process's exit code (0 success, 1 a check failed, 3 an external system failed).
    pub exit_code: i32,
    /// When the run finished.
    pub finished_at: OffsetDateTime,
    /// notAfter of the client certificate on disk after the run, if there is a readable one.
    pub credential_not_after: Option<OffsetDateTime>,
}

/// The textfile: Prometheus text exposition format, one gauge per fact, labelled by cluster.
pub fn render(r: &RunRecord) -> String {
    let labels = format!("{{cluster=\"{}\"}}", r.cluster);
    let mut gauges = vec![
        (
            "tenantci_credential_renew_last_run_timestamp_seconds",
            "When `tenantci bootstrap runner` last finished for this cluster (Unix seconds).",
            r.finished_at.unix_timestamp(),
        ),
        (
            "tenantci_credential_renew_success",
            "1 when the last run succeeded (exit 0), 0 when it failed.",
            i64::from(r.exit_code == 0),
        ),
        (
            "tenantci_credential_renew_exit_code",
            "The last run's exit code: 1 a check failed, 3 an external system failed.",
            i64::from(r.exit_code),
        ),
    ];
    if let Some(t) = r.credential_not_after {
        gauges.push((
            "tenantci_credential_expiry_timestamp_seconds",
            "notAfter of the runner's client certificate on disk (Unix seconds).",
            t.unix_timestamp(),
        ));
    }
    gauges
        .iter()
        .map(|(name, help, value)| {
            format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name}{labels} {value}\n")
        })
        .collect()
}

/// Refuses a path node_exporter would not read, before the run changes anything.
pub fn validate(path: &Path) -> Result<()> {
    let hint = "pass e.g. --textfile /var/lib/node_exporter/textfile_collector/tenantci_credential_renew_ci.prom";
    if !path.is_absolute() || path.extension().is_none_or(|e| e != "prom") {
        return Err(Error::bad_input(format!(
            "--textfile {} is not an absolute path ending in `.prom` (node_exporter reads only *.prom)",
            path.display()
        ))
        .hint(hint));
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        return Err(Error::bad_input(format!(
            "the directory of --textfile {} does not exist",
            path.display()
        ))
        .hint("create node_exporter's textfile directory (its --collector.textfile.directory) first, or point --textfile into it"));
    }
    Ok(())
}

/// notAfter of the certificate at `cert`, when there is a readable one.
pub fn credential_not_after(cert: &Path) -> Option<OffsetDateTime> {
    let pem = fsutil::read_bounded(cert, 1 << 20).ok()?;
    let info = CertInfo::from_pem(std::str::from_utf8(&pem).ok()?).ok()?;
    Some(info.not_after)
}

/// Replaces the textfile atomically, 0644.
pub fn write(path: &Path, record: &RunRecord) -> Result<()> {
    fsutil::write_atomic(path, render(record).as_bytes(), MODE_PUBLIC)
        .map_err(|e| Error::unwritable("the --textfile metrics", path, e))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn record(exit_code: i32, expiry: Option<i64>) -> RunRecord {
        RunRecord {
            cluster: "ci".into(),
            exit_code,
            finished_at: OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap(),
            credential_not_after: expiry.map(|t| OffsetDateTime::from_unix_timestamp(t).unwrap()),
        }
    }

    #[test]
    fn a_failed_run_reports_failure_its_code_and_the_expiry_still_on_disk() {
        let text = render(&record(3, Some(1_802_000_000)));
        assert!(text.contains("tenantci_credential_renew_success{cluster=\"ci\"} 0\n"));
        assert!(text.contains("tenantci_credential_renew_exit_code{cluster=\"ci\"} 3\n"));
        assert!(text.contains(
            "tenantci_credential_renew_last_run_timestamp_seconds{cluster=\"ci\"} 1800000000\n"
        ));
        assert!(
            text.contains(
                "tenantci_credential_expiry_timestamp_seconds{cluster=\"ci\"} 1802000000\n"
            )
        );
        assert_eq!(text.matches("# TYPE ").count(), 4);
    }

    #[test]
    fn without_a_certificate_the_expiry_is_left_out_and_success_is_one_on_exit_zero() {
        let text = render(&record(0, None));
        assert!(text.contains("tenantci_credential_renew_success{cluster=\"ci\"} 1\n"));
        assert!(!text.contains("expiry"));
    }

    #[test]
    fn only_an_absolute_prom_path_in_an_existing_directory_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(validate(&dir.path().join("renew.prom")).is_ok());
        for bad in [
            PathBuf::from("renew.prom"),
            dir.path().join("renew.txt"),
            dir.path().join("missing/renew.prom"),
        ] {
            let err = validate(&bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(err.message().contains("--textfile"), "{}", err.message());
        }
    }
}
