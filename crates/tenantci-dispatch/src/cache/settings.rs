//! `[cache]` of the dispatcher config: where the shared actions cache keeps its entries and
//! how large it may grow. Absent: no shared cache (each runner keeps its own, which dies with
//! its executor).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use tenantci_core::duration::GoDuration;

const MIB: u64 = 1 << 20;

/// The `[cache]` section; absent, no shared cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// The directory entries are kept in (a PersistentVolume in the cluster). Relative to the
    /// config file's directory. Exactly one of `dir` and `s3_bucket`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// An S3-compatible bucket instead of `dir`: what several dispatcher replicas share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_bucket: Option<String>,
    /// The S3 endpoint (absent: AWS's own for `s3_region`); `http://` allowed for a bucket on
    /// the same node or cluster network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// The bucket's region; absent: `AWS_REGION` or `AWS_DEFAULT_REGION` from the
    /// environment, else `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_region: Option<String>,
    /// A 0600 file with the access key id on its first line and the secret key on its second.
    /// Absent: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` from the environment. Never argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_credentials_file: Option<PathBuf>,
    /// Restores read the bucket directly: a lookup's `archiveLocation` is a presigned GET of
    /// the entry's object (valid 15 minutes), so restores cost the dispatcher nothing and run
    /// at the bucket's speed. Executors must reach `s3_endpoint` under the same name; a commit
    /// joins an entry's uploaded ranges into that one object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub s3_direct_downloads: bool,
    /// All repositories' entries together: past it the least recently used go.
    #[serde(default = "max_size_mib")]
    pub max_size_mib: u64,
    /// One entry's largest size: an upload past it is refused.
    #[serde(default = "max_entry_size_mib")]
    pub max_entry_size_mib: u64,
    /// An entry not restored for this long goes, whatever the size.
    #[serde(default = "max_age")]
    pub max_age: GoDuration,
    /// How long a task's cache grant opens its cache, from its executor's start: as long as
    /// the task may run (Gitea's `[actions] ENDLESS_TASK_TIMEOUT`, 3h by default) and the
    /// runner's last upload. Raise it with that timeout.
    #[serde(default = "grant_lifetime")]
    pub grant_lifetime: GoDuration,
}

fn max_size_mib() -> u64 {
    10 * 1024
}

fn max_entry_size_mib() -> u64 {
    2 * 1024
}

/// GitHub's own retention for an entry nobody restores.
fn max_age() -> GoDuration {
    std::time::Duration::from_secs(7 * 24 * 3600).into()
}

/// Gitea's 3h task limit and ten minutes for the runner's post steps (as `vm.timeout`).
fn grant_lifetime() -> GoDuration {
    "3h10m".parse().expect("a Go duration")
}

/// Shorter than any job: a grant that dies before its task's cache steps is a misconfiguration.
const MIN_GRANT_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10 * 60);

impl CacheSettings {
    /// A directory cache with the default limits.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        CacheSettings {
            dir: Some(dir.into()),
            s3_bucket: None,
            s3_endpoint: None,
            s3_region: None,
            s3_credentials_file: None,
            s3_direct_downloads: false,
            max_size_mib: max_size_mib(),
            max_entry_size_mib: max_entry_size_mib(),
            max_age: max_age(),
            grant_lifetime: grant_lifetime(),
        }
    }

    /// `max_size_mib` in bytes.
    pub fn max_size(&self) -> u64 {
        self.max_size_mib.saturating_mul(MIB)
    }

    /// `max_entry_size_mib` in bytes.
    pub fn max_entry_size(&self) -> u64 {
        self.max_entry_size_mib.saturating_mul(MIB)
    }

    /// Exactly one store, S3 keys only with a bucket, an http(s) endpoint, a grant lifetime of at
    /// least 10 minutes, and an entry limit of at least 1 MiB within the whole; the error is in the
    /// config's message form ("has ...").
    pub fn validate(&self) -> Result<(), String> {
        match (&self.dir, &self.s3_bucket) {
            (Some(_), Some(_)) => {
                return Err("has both cache.dir and cache.s3_bucket; keep one (a directory for one replica, a bucket for several)".into());
            }
            (None, None) => {
                return Err("has [cache] without cache.dir or cache.s3_bucket; set one (e.g. cache.dir = \"cache\")".into());
            }
            _ => {}
        }
        if self.s3_bucket.is_none()
            && (self.s3_endpoint.is_some()
                || self.s3_region.is_some()
                || self.s3_credentials_file.is_some()
                || self.s3_direct_downloads)
        {
            return Err(
                "has cache.s3_* settings without cache.s3_bucket; set the bucket or remove them"
                    .into(),
            );
        }
        if let Some(e) = &self.s3_endpoint
            && tenantci_core::input::url_host(e, &["http", "https"]).is_none()
        {
            return Err(format!(
                "has cache.s3_endpoint `{e}`, which is not an http(s) URL with a host"
            ));
        }
        if self.grant_lifetime.get() < MIN_GRANT_LIFETIME {
            return Err(format!(
                "has cache.grant_lifetime = {}, shorter than 10m; set it to the longest a task may run (Gitea's ENDLESS_TASK_TIMEOUT, 3h by default) plus 10m",
                self.grant_lifetime.as_str()
            ));
        }
        if self.max_entry_size_mib == 0 || self.max_size_mib < self.max_entry_size_mib {
            return Err(format!(
                "has cache.max_entry_size_mib = {} and cache.max_size_mib = {}; an entry must be at least 1 MiB and fit in the whole cache",
                self.max_entry_size_mib, self.max_size_mib
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_storage_and_sane_limits() {
        CacheSettings::in_dir("cache").validate().unwrap();
        let mut both = CacheSettings::in_dir("cache");
        both.s3_bucket = Some("b".into());
        assert!(both.validate().unwrap_err().contains("both"));
        let mut small = CacheSettings::in_dir("cache");
        small.max_size_mib = 1;
        assert!(small.validate().unwrap_err().contains("max_entry_size_mib"));
        let mut brief = CacheSettings::in_dir("cache");
        brief.grant_lifetime = "5m".parse().unwrap();
        assert!(brief.validate().unwrap_err().contains("grant_lifetime"));
        assert_eq!(
            CacheSettings::in_dir("c").grant_lifetime.get().as_secs(),
            190 * 60
        );
        let mut stray = CacheSettings::in_dir("cache");
        stray.s3_region = Some("eu".into());
        assert!(
            stray
                .validate()
                .unwrap_err()
                .contains("without cache.s3_bucket")
        );
    }
}
