//! `dispatch init`'s part for the shared actions cache, pure: the `--cache-*` flags checked and
//! the `[cache]` section they give. Without `--cache-dir` or `--cache-s3-bucket` an existing
//! section (an operator's, or an earlier init's) is kept as it is; with one, the storage is the
//! flags' and the limits are kept (or the defaults), so a re-run never resets a tuned limit.
//!
//! Reading the S3 credentials file is phase one's I/O (`init::local`).

use std::path::{Path, PathBuf};

use crate::cache::settings::CacheSettings;
use tenantci_core::{Error, Result};

/// The flags as typed.
#[derive(Debug, Clone, Default)]
pub struct CacheInputs {
    /// `--cache-dir`: a directory cache (made absolute).
    pub dir: Option<PathBuf>,
    /// `--cache-s3-bucket`: a bucket cache instead.
    pub s3_bucket: Option<String>,
    /// `--cache-s3-endpoint`.
    pub s3_endpoint: Option<String>,
    /// `--cache-s3-region`.
    pub s3_region: Option<String>,
    /// `--cache-s3-credentials-file` (made absolute).
    pub s3_credentials_file: Option<PathBuf>,
    /// `--cache-s3-direct-downloads`.
    pub s3_direct_downloads: bool,
    /// `--cache-max-size-mib`; None: the kept section's limit, or the default.
    pub max_size_mib: Option<u64>,
}

/// The `[cache]` section init writes: from the flags when they name a storage, else `kept`.
pub fn section(c: &CacheInputs, kept: Option<&CacheSettings>) -> Result<Option<CacheSettings>> {
    if c.s3_bucket.is_none() {
        let stray = [
            ("--cache-s3-endpoint", c.s3_endpoint.is_some()),
            ("--cache-s3-region", c.s3_region.is_some()),
            (
                "--cache-s3-credentials-file",
                c.s3_credentials_file.is_some(),
            ),
            ("--cache-s3-direct-downloads", c.s3_direct_downloads),
        ];
        if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
            return Err(Error::bad_input(format!("{flag} is given without --cache-s3-bucket"))
                .hint("pass --cache-s3-bucket NAME for a bucket cache, or --cache-dir DIR for a directory"));
        }
    }
    let mut cache = match (&c.dir, &c.s3_bucket) {
        (Some(_), Some(_)) => {
            return Err(Error::bad_input("--cache-dir and --cache-s3-bucket are both given; the cache keeps its entries in one of them")
                .hint("pass --cache-dir for one dispatcher replica, or --cache-s3-bucket for several"));
        }
        (None, None) => {
            if c.max_size_mib.is_some() && kept.is_none() {
                return Err(Error::bad_input(
                    "--cache-max-size-mib is given, but there is no shared cache to size",
                )
                .hint("pass --cache-dir DIR or --cache-s3-bucket NAME to turn the cache on"));
            }
            let mut kept = kept.cloned();
            if let (Some(cache), Some(mib)) = (kept.as_mut(), c.max_size_mib) {
                resize(cache, mib);
            }
            return checked(kept);
        }
        (Some(dir), None) => CacheSettings {
            dir: Some(absolute("--cache-dir", dir)?),
            ..limits_of(kept)
        },
        (None, Some(bucket)) => CacheSettings {
            dir: None,
            s3_bucket: Some(bucket.clone()),
            s3_endpoint: c
                .s3_endpoint
                .as_ref()
                .map(|e| e.trim_end_matches('/').to_string()),
            s3_region: c.s3_region.clone(),
            s3_credentials_file: c
                .s3_credentials_file
                .as_deref()
                .map(|f| absolute("--cache-s3-credentials-file", f))
                .transpose()?,
            s3_direct_downloads: c.s3_direct_downloads,
            ..limits_of(kept)
        },
    };
    if let Some(mib) = c.max_size_mib {
        resize(&mut cache, mib);
    }
    checked(Some(cache))
}

/// A section with no storage yet and `kept`'s limits (the defaults without one).
fn limits_of(kept: Option<&CacheSettings>) -> CacheSettings {
    let mut limits = kept.cloned().unwrap_or_else(|| CacheSettings::in_dir(""));
    limits.dir = None;
    limits.s3_bucket = None;
    limits.s3_endpoint = None;
    limits.s3_region = None;
    limits.s3_credentials_file = None;
    limits.s3_direct_downloads = false;
    limits
}

/// `--cache-max-size-mib`: one entry may be at most the whole cache, so a small cache lowers
/// the entry limit with it rather than refusing the flag over a default nobody typed.
fn resize(cache: &mut CacheSettings, mib: u64) {
    cache.max_size_mib = mib;
    cache.max_entry_size_mib = cache.max_entry_size_mib.min(mib);
}

fn checked(cache: Option<CacheSettings>) -> Result<Option<CacheSettings>> {
    if let Some(c) = &cache {
        c.validate().map_err(|why| {
            Error::bad_input(format!("the [cache] section init would write {why}"))
                .hint("fix the --cache-* flag that sets it, or the section in the existing config")
        })?;
    }
    Ok(cache)
}

fn absolute(flag: &str, p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| {
        Error::bad_input(format!("cannot resolve {flag} `{}`", p.display())).caused_by(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuned() -> CacheSettings {
        CacheSettings {
            max_size_mib: 4096,
            max_entry_size_mib: 1024,
            ..CacheSettings::in_dir("/var/cache/old")
        }
    }

    #[test]
    fn no_storage_flag_keeps_the_existing_section_or_none() {
        assert_eq!(section(&CacheInputs::default(), None).unwrap(), None);
        assert_eq!(
            section(&CacheInputs::default(), Some(&tuned())).unwrap(),
            Some(tuned())
        );
        let resized = CacheInputs {
            max_size_mib: Some(512),
            ..Default::default()
        };
        let c = section(&resized, Some(&tuned())).unwrap().unwrap();
        assert_eq!((c.max_size_mib, c.max_entry_size_mib), (512, 512));
        assert_eq!(c.dir, tuned().dir);
    }

    #[test]
    fn a_storage_flag_replaces_the_storage_and_keeps_the_limits() {
        let dir = CacheInputs {
            dir: Some("relative/cache".into()),
            ..Default::default()
        };
        let c = section(&dir, None).unwrap().unwrap();
        assert!(c.dir.unwrap().is_absolute());
        assert_eq!(c.max_size_mib, CacheSettings::in_dir("x").max_size_mib);

        let bucket = CacheInputs {
            s3_bucket: Some("ci-cache".into()),
            s3_endpoint: Some("http://minio:9000/".into()),
            s3_credentials_file: Some("s3.credentials".into()),
            s3_direct_downloads: true,
            ..Default::default()
        };
        let c = section(&bucket, Some(&tuned())).unwrap().unwrap();
        assert!(c.s3_direct_downloads);
        assert_eq!(c.dir, None);
        assert_eq!(c.s3_bucket.as_deref(), Some("ci-cache"));
        assert_eq!(c.s3_endpoint.as_deref(), Some("http://minio:9000"));
        assert!(c.s3_credentials_file.unwrap().is_absolute());
        assert_eq!((c.max_size_mib, c.max_entry_size_mib), (4096, 1024));
    }

    #[test]
    fn contradictory_or_stray_flags_are_refused_with_the_fix() {
        let cases = [
            (
                CacheInputs {
                    dir: Some("a".into()),
                    s3_bucket: Some("b".into()),
                    ..Default::default()
                },
                "both given",
            ),
            (
                CacheInputs {
                    s3_region: Some("eu".into()),
                    ..Default::default()
                },
                "--cache-s3-region is given without --cache-s3-bucket",
            ),
            (
                CacheInputs {
                    dir: Some("a".into()),
                    s3_direct_downloads: true,
                    ..Default::default()
                },
                "--cache-s3-direct-downloads is given without --cache-s3-bucket",
            ),
            (
                CacheInputs {
                    max_size_mib: Some(10),
                    ..Default::default()
                },
                "no shared cache to size",
            ),
            (
                CacheInputs {
                    s3_bucket: Some("b".into()),
                    s3_endpoint: Some("minio:9000".into()),
                    ..Default::default()
                },
                "not an http(s) URL",
            ),
            (
                CacheInputs {
                    dir: Some("a".into()),
                    max_size_mib: Some(0),
                    ..Default::default()
                },
                "at least 1 MiB",
            ),
        ];
        for (inputs, says) in cases {
            let e = section(&inputs, None).unwrap_err().to_string();
            assert!(e.contains(says), "{inputs:?}: {e}");
        }
    }
}
