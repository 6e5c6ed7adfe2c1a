//! The write-ahead record of a runner creation at GitLab: `<config.toml>.tenantci-pending`,
//! beside config.toml, one entry per runner name. `runner gitlab-config` and `bootstrap
//! runner` write it (atomically, fsynced, 0600: it can hold the runner token) before each
//! step they rely on, and remove their entry once config.toml holds the token. A re-run that
//! finds an entry finishes that creation instead of starting another, so a crash (kill -9,
//! power loss) at any point leaves neither a second runner nor an orphan with a live token:
//!
//! | crash                                   | the record holds      | the re-run                   |
//! |-----------------------------------------|-----------------------|------------------------------|
//! | before the create request               | intent (marker)       | finds none, creates: created |
//! | after GitLab created, answer unrecorded | intent (marker)       | deletes it, creates: replaced|
//! | after the record, before config.toml    | runner id and token   | verifies it: reused          |
//! | after config.toml, before the removal   | the token config has  | removes the record: reused   |
//!
//! The create request's answer is the only copy of the token, so a runner whose answer was
//! lost cannot be reused: the intent's marker goes into the runner's description, and the
//! re-run lists the owner's runners at GitLab and deletes the ones carrying it. [`resume`]
//! decides from the record alone; the GitLab calls are [`super::token`]'s.
//!
//! Each entry carries `version` ([`KIND`], the one rule of `tenantci_core::record_version`:
//! none is 1). An entry a newer release wrote is not read with this release's meaning: our
//! runner's is refused with what to do (upgrade), another runner's is written back as it was.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::record_version::Kind;
use tenantci_core::{Error, Result};

/// An entry's kind for the version rule, and the version this release writes.
pub const KIND: Kind = Kind::new("pending_runner", 1);

/// What a run is creating for one runner name. Unknown fields are ignored (a later release
/// may add one this release can do without; anything else bumps [`KIND`]'s version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The entry's format ([`KIND`]); absent: 1.
    #[serde(default = "unversioned")]
    pub version: u32,
    /// The GitLab the runner is created at (`--gitlab-url`).
    pub gitlab_url: String,
    /// In the runner's description (`... [tenantci-<16 hex>]`), so a runner whose create
    /// answer was lost can be found at GitLab.
    pub marker: String,
    /// Set once GitLab's answer is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RecordedRunner>,
}

fn unversioned() -> u32 {
    tenantci_core::record_version::UNVERSIONED
}

/// A runner GitLab created, as its answer said.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRunner {
    /// The runner's id at GitLab.
    pub id: u64,
    /// The runner authentication token: until config.toml holds it, this is its only copy. `Debug`
    /// does not print it.
    pub token: String,
    /// When the token expires (RFC 3339), as GitLab answered; `None` when it does not.
    #[serde(default)]
    pub token_expires_at: Option<String>,
    /// RFC 3339: config.toml's `token_obtained_at`.
    pub obtained_at: String,
}

impl fmt::Debug for RecordedRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordedRunner")
            .field("id", &self.id)
            .field("token", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// What a re-run does about the record, decided without I/O.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume<'a> {
    /// No record: nothing was under way.
    Fresh,
    /// config.toml already holds the recorded token: only the record is left to remove.
    Finished,
    /// GitLab answered and the answer was recorded: verify that runner and reuse it.
    Verify(&'a RecordedRunner),
    /// The create request may have reached GitLab without its answer being recorded: delete
    /// the runners carrying this marker, then create.
    Clean(&'a str),
}

/// The decision for `record` given the token of our entry in config.toml (if any).
pub fn resume<'a>(record: Option<&'a Record>, config_token: Option<&str>) -> Resume<'a> {
    let Some(record) = record else {
        return Resume::Fresh;
    };
    match &record.runner {
        Some(runner) if config_token == Some(runner.token.as_str()) => Resume::Finished,
        Some(runner) => Resume::Verify(runner),
        None => Resume::Clean(&record.marker),
    }
}

/// A fresh marker: 64 random bits, so two runs never share one.
pub fn marker() -> String {
    format!("tenantci-{:016x}", rand::random::<u64>())
}

/// The description GitLab stores: the asked-for one with the marker appended.
pub fn described(description: Option<&str>, marker: &str) -> String {
    match description.map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => format!("{d} [{marker}]"),
        None => format!("[{marker}]"),
    }
}

/// The record file of one config.toml and the entry of one runner name in it.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
    name: String,
}

/// Bounds the file read: a record is a few hundred bytes per runner.
const MAX_RECORD_FILE: u64 = 1 << 20;

impl Ledger {
    /// The record file beside `config` (`<config>.tenantci-pending`) and the entry of the runner
    /// `name` in it. Reads nothing.
    pub fn for_entry(config: &Path, name: &str) -> Self {
        let mut path = config.as_os_str().to_owned();
        path.push(".tenantci-pending");
        Ledger {
            path: PathBuf::from(path),
            name: name.to_string(),
        }
    }

    /// The record file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Our runner's record, if a run left one; one a newer release wrote is refused (and
    /// left as it is).
    pub fn read(&self) -> Result<Option<Record>> {
        let Some(ours) = self.read_all()?.remove(&self.name) else {
            return Ok(None);
        };
        let bytes = ours.to_string();
        match KIND.check_json(bytes.as_bytes()) {
            Ok(Ok(_)) => {}
            Ok(Err(newer)) => {
                return Err(Error::check_failed(format!(
                    "{WHAT} `{}` of runner `{}`: {newer}",
                    self.path.display(),
                    self.name
                ))
                .hint("run the tenantci release that wrote it (or a later one) on this host to finish that creation; nothing was changed"));
            }
            Err(e) => return Err(self.not_ours(e)),
        }
        serde_json::from_value(ours)
            .map(Some)
            .map_err(|e| self.not_ours(e))
    }

    /// Replaces our runner's record (atomic, fsynced, 0600; the directory made 0700); every
    /// other runner's is written back as it was read.
    pub fn write(&self, record: &Record) -> Result<()> {
        let mut all = self.read_all()?;
        let value = serde_json::to_value(record)
            .map_err(|e| Error::external(format!("cannot encode {WHAT}")).caused_by(e))?;
        all.insert(self.name.clone(), value);
        self.store(&all)
    }

    /// Removes our runner's record (the file when it was the last); whether there was one.
    pub fn clear(&self) -> Result<bool> {
        let mut all = self.read_all()?;
        if all.remove(&self.name).is_none() {
            return Ok(false);
        }
        if all.is_empty() {
            std::fs::remove_file(&self.path).map_err(|e| self.unwritable(e))?;
            // The removal is durable before anything relies on it.
            std::fs::File::open(self.dir())
                .and_then(|d| d.sync_all())
                .map_err(|e| self.unwritable(e))?;
            return Ok(true);
        }
        self.store(&all).map(|()| true)
    }

    fn dir(&self) -> &Path {
        self.path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// Every runner's entry, as stored: only our own is read ([`Ledger::read`]).
    fn read_all(&self) -> Result<BTreeMap<String, serde_json::Value>> {
        if std::fs::symlink_metadata(&self.path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return Ok(BTreeMap::new());
        }
        let text = tenantci_core::input::read_text(WHAT, &self.path, MAX_RECORD_FILE)?;
        serde_json::from_str(&text).map_err(|e| self.not_ours(e))
    }

    fn not_ours(&self, e: serde_json::Error) -> Error {
        Error::bad_input(format!(
            "{WHAT} `{}` is not the JSON tenantci writes ({e})",
            self.path.display()
        ))
        .hint("it records a runner creation an interrupted run began: delete the runner whose description ends with `[tenantci-...]` in GitLab if there is one, then remove the file and run again; nothing was changed")
    }

    fn store(&self, all: &BTreeMap<String, serde_json::Value>) -> Result<()> {
        fsutil::create_dir_all(self.dir(), MODE_PRIVATE_DIR)
            .map_err(|e| Error::unwritable("the directory", self.dir(), e))?;
        let text = serde_json::to_vec_pretty(all)
            .map_err(|e| Error::external(format!("cannot encode {WHAT}")).caused_by(e))?;
        fsutil::write_atomic(&self.path, &text, MODE_SECRET).map_err(|e| self.unwritable(e))
    }

    fn unwritable(&self, e: std::io::Error) -> Error {
        Error::unwritable(WHAT, &self.path, e)
    }
}

const WHAT: &str = "the pending-runner record";

/// Test hook, in debug builds only: `TENANTCI_TEST_CRASH_AT=<point>` makes the process kill
/// itself with SIGKILL at `point`, so an integration test reproduces a crash exactly there
/// (a real kill: no destructor, no flush, no cleanup runs). Release builds ignore it.
pub fn crash_point(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("TENANTCI_TEST_CRASH_AT").is_ok_and(|p| p == point) {
        use nix::sys::signal::{Signal, kill};
        let _ = kill(nix::unistd::getpid(), Signal::SIGKILL);
        loop {
            std::thread::park();
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(runner: Option<RecordedRunner>) -> Record {
        Record {
            version: KIND.current,
            gitlab_url: "https://gitlab.example.com".into(),
            marker: "tenantci-00000000000000aa".into(),
            runner,
        }
    }

    fn recorded(token: &str) -> RecordedRunner {
        RecordedRunner {
            id: 4,
            token: token.into(),
            token_expires_at: None,
            obtained_at: "2026-12-04T21:00:00Z".into(),
        }
    }

    #[test]
    fn every_crash_point_resumes_the_creation_it_interrupted() {
        assert_eq!(resume(None, Some("glrt-a")), Resume::Fresh);
        let intent = record(None);
        assert_eq!(
            resume(Some(&intent), Some("glrt-a")),
            Resume::Clean("tenantci-00000000000000aa")
        );
        let answered = record(Some(recorded("glrt-b")));
        assert!(matches!(resume(Some(&answered), None), Resume::Verify(r) if r.id == 4));
        // config.toml holds an older token: the recorded runner is the one to finish.
        assert!(matches!(
            resume(Some(&answered), Some("glrt-a")),
            Resume::Verify(_)
        ));
        assert_eq!(resume(Some(&answered), Some("glrt-b")), Resume::Finished);
    }

    #[test]
    fn the_marker_is_appended_to_the_description() {
        assert_eq!(
            described(Some("tenant-ci"), "tenantci-1"),
            "tenant-ci [tenantci-1]"
        );
        assert_eq!(described(None, "tenantci-1"), "[tenantci-1]");
        assert_ne!(marker(), marker());
    }

    #[test]
    fn the_record_is_private_and_removed_with_its_last_entry() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("runner/config.toml");
        let ours = Ledger::for_entry(&config, "ours");
        let other = Ledger::for_entry(&config, "other");
        ours.write(&record(Some(recorded("glrt-secret")))).unwrap();
        other.write(&record(None)).unwrap();
        let mode = std::fs::metadata(ours.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!format!("{:?}", ours.read().unwrap()).contains("glrt-secret"));
        assert!(ours.clear().unwrap());
        assert!(!ours.clear().unwrap());
        assert_eq!(other.read().unwrap(), Some(record(None)));
        assert!(other.clear().unwrap());
        assert!(!ours.path().exists());
    }

    /// The version rule: an entry without `version` is version 1; a newer release's entry of
    /// our runner is refused with what to do, and another runner's is written back as it was.
    #[test]
    fn a_newer_releases_entry_is_refused_for_us_and_kept_for_others() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let (ours, other) = (
            Ledger::for_entry(&config, "ours"),
            Ledger::for_entry(&config, "other"),
        );
        let newer = r#"{"version":2,"gitlabUrl":"https://g","marker":"m","teleport":{"x":1}}"#;
        let unversioned = r#"{"gitlabUrl":"https://g","marker":"tenantci-1"}"#;
        std::fs::write(
            ours.path(),
            format!(r#"{{"other":{newer},"ours":{unversioned}}}"#),
        )
        .unwrap();
        assert_eq!(
            ours.read().unwrap().unwrap().version,
            1,
            "none is version 1"
        );
        ours.write(&record(None)).unwrap();
        let e = other.read().unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.message().contains("newer tenantci release"),
            "{}",
            e.message()
        );
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(ours.path()).unwrap()).unwrap();
        assert_eq!(
            kept["other"],
            serde_json::from_str::<serde_json::Value>(newer).unwrap()
        );
    }

    #[test]
    fn a_record_that_is_not_ours_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::for_entry(&dir.path().join("config.toml"), "ours");
        std::fs::write(ledger.path(), "{not json").unwrap();
        assert_eq!(ledger.read().unwrap_err().exit_code(), 2);
    }
}
