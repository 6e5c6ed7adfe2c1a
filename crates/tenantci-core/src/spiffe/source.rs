//! Where a process gets its X509-SVID: `--spiffe-source workload-api|files:DIR`. Both kinds
//! answer [`SvidSource::current`] with the SVID to present now, so the TLS configs
//! (`spiffe::tls`) follow rotation without knowing which kind feeds them.

use std::path::PathBuf;
use std::sync::Arc;

use super::files::FilesSource;
use super::svid::SvidSource;
use super::workload::WorkloadSource;
use crate::{Error, Result};

/// The parsed `--spiffe-source` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// The Workload API at `SPIFFE_ENDPOINT_SOCKET` (or the endpoint given).
    WorkloadApi,
    /// A spiffe-helper style directory: `svid.pem`, `svid_key.pem` (0600), `svid_bundle.pem`.
    Files(PathBuf),
}

impl SourceSpec {
    /// Parses a `--spiffe-source` value given to `flag`: `workload-api` or `files:DIR` (a
    /// non-empty DIR); anything else is bad input naming the flag.
    pub fn parse(flag: &str, value: &str) -> Result<Self> {
        match value {
            "workload-api" => Ok(SourceSpec::WorkloadApi),
            v => match v.strip_prefix("files:") {
                Some(dir) if !dir.is_empty() => Ok(SourceSpec::Files(PathBuf::from(dir))),
                _ => Err(Error::bad_input(format!(
                    "{flag} `{}` is neither `workload-api` nor `files:DIR`",
                    crate::input::shown(value)
                ))
                .hint(format!(
                    "pass {flag} workload-api (SPIFFE_ENDPOINT_SOCKET) or files:/run/spiffe (spiffe-helper's svid.pem, svid_key.pem, svid_bundle.pem)"
                ))),
            },
        }
    }

    /// Opens the source and waits for its first SVID (at most `first_svid` for the Workload
    /// API; a directory is read at once). `endpoint` overrides `SPIFFE_ENDPOINT_SOCKET`.
    pub async fn open(
        &self,
        endpoint: Option<&str>,
        first_svid: std::time::Duration,
    ) -> Result<Arc<dyn SvidSource>> {
        Ok(match self {
            SourceSpec::WorkloadApi => {
                Arc::new(WorkloadSource::connect(endpoint, first_svid).await?)
            }
            SourceSpec::Files(dir) => Arc::new(FilesSource::open(dir)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_kinds_parse_and_anything_else_is_refused() {
        assert_eq!(
            SourceSpec::parse("--spiffe-source", "workload-api").unwrap(),
            SourceSpec::WorkloadApi
        );
        assert_eq!(
            SourceSpec::parse("--spiffe-source", "files:/run/spiffe").unwrap(),
            SourceSpec::Files("/run/spiffe".into())
        );
        for bad in ["files:", "workload", "file:/x", ""] {
            let err = SourceSpec::parse("--spiffe-source", bad).unwrap_err();
            assert!(err.message().contains("--spiffe-source"), "{bad}");
        }
    }
}
