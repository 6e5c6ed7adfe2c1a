//! The only I/O of config.toml handling: read the current file, write a changed plan.
//!
//! A write is atomic (temp file in the same directory, fsync, rename), mode 0600, the
//! directory created 0700 when missing. An unchanged plan writes nothing, so the file keeps its
//! mtime and gitlab-runner (which reloads on mtime) does not reload.

use std::path::Path;

use super::merge::Plan;
use crate::secret_file::write_secret_file;
use tenantci_core::Result;

/// The current text of `path`, or `None` when it does not exist.
pub fn read_existing(path: &Path) -> Result<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => tenantci_core::input::read_text(
            "the gitlab-runner config",
            path,
            tenantci_core::input::MAX_CONFIG,
        )
        .map(Some),
    }
}

/// Writes `plan` to `path` if it changed anything; returns whether a write happened.
/// A file with the right content but a wider mode is rewritten at 0600.
pub fn write_plan(path: &Path, plan: &Plan) -> Result<bool> {
    write_secret_file(
        path,
        plan.text.as_bytes(),
        plan.changed(),
        "the gitlab-runner config",
    )
}
