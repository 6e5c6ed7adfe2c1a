//! The only I/O of config.toml handling: read the current file, write a changed plan.
//!
//! A write is atomic (temp file in the same directory, fsync, rename), mode 0600, the
//! directory created 0700 when missing. An unchanged plan writes nothing, so the file keeps its
//! mtime and gitlab-runner (which reloads on mtime) does not reload.

use std::path::Path;

use super::merge::Plan;
use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::{Error, Result};

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

/// Writes a secret-bearing file (0600, parent 0700) unless it already holds `contents`.
pub(crate) fn write_secret_file(
    path: &Path,
    contents: &[u8],
    changed: bool,
    what: &str,
) -> Result<bool> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
            .map_err(|e| Error::unwritable("the directory", dir, e))?;
    }
    if !changed
        && std::fs::metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.permissions().mode() & 0o7777 == MODE_SECRET
        })
    {
        return Ok(false);
    }
    fsutil::write_if_changed(path, contents, MODE_SECRET)
        .map_err(|e| Error::unwritable(what, path, e))
}
