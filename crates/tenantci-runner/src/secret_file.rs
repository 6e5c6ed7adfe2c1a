//! Writing a secret-bearing file: 0600 in a 0700 directory, only when its bytes or its mode
//! differ. gitlab-runner's config.toml ([`crate::gitlab::config::write`]) and act_runner's
//! files ([`crate::act_runner`]) both hold a runner token, so both are written through here.

use std::path::Path;

use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::{Error, Result};

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
