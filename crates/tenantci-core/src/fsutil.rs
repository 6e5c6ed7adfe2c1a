//! Files that matter: written atomically with their final mode, never half-written.
//!
//! A write goes to a temp file in the destination directory, is fsynced, gets its mode, and is
//! renamed (or hard-linked, for no-clobber writes) into place; the directory is fsynced after.
//! A reader therefore sees the old file or the new one, never a prefix, and a secret is never
//! world-readable, not even for an instant.
//!
//! Also the two primitives underneath: a size-bounded read of a regular file
//! ([`read_bounded`]) and directory creation with a mode ([`create_dir_all`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode for secrets and everything a credential directory holds.
pub const MODE_SECRET: u32 = 0o600;
/// Mode for directories that hold secrets.
pub const MODE_PRIVATE_DIR: u32 = 0o700;

/// Reads a regular file of at most `max` bytes. A FIFO, a device or a directory would block,
/// never end, or mean a wrong path, so they are refused by kind before any read; a file
/// growing past `max` while read is refused too (the bound holds, not just the `stat`).
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let not_regular = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or directory)",
        )
    };
    // Checked before the open as well: opening a FIFO blocks until a writer comes.
    if !fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let mut out = Vec::with_capacity(meta.len().min(max) as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the limit of {max} bytes"),
        ));
    }
    Ok(out)
}

/// Creates `dir` and missing parents; `dir` itself gets exactly `mode`, parents this call
/// creates get `mode` as the umask narrows it.
/// An existing directory is left as it is (its mode is the operator's business).
pub fn create_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    // DirBuilder applies the umask; set the mode explicitly on the leaf.
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
}

fn temp_path(dest: &Path) -> io::Result<PathBuf> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let suffix: u64 = rand::random();
    Ok(dir.join(format!(".{}.tmp-{suffix:016x}", name.to_string_lossy())))
}

fn write_temp(dest: &Path, contents: &[u8], mode: u32) -> io::Result<PathBuf> {
    let tmp = temp_path(dest)?;
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed `mode`; the final mode must be exactly `mode`.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(contents)?;
        f.sync_all()
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn sync_parent(dest: &Path) -> io::Result<()> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Replaces `dest` atomically with `contents` at `mode`.
pub fn write_atomic(dest: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let tmp = write_temp(dest, contents, mode)?;
    if let Err(e) = fs::rename(&tmp, dest) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_parent(dest)
}

/// Writes `dest` atomically only if it does not exist yet (`AlreadyExists` otherwise).
/// The hard link is the no-clobber step: it fails instead of replacing a file that appeared
/// after any earlier existence check.
pub fn write_new_atomic(dest: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    link_new(dest, contents, mode)?;
    sync_parent(dest)
}

fn link_new(dest: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let tmp = write_temp(dest, contents, mode)?;
    let linked = fs::hard_link(&tmp, dest);
    let _ = fs::remove_file(&tmp);
    linked
}

/// Writes several new files (no clobber) all or nothing: on the first failure the files this
/// call created are removed again, and the error names the file that failed. The directories
/// are fsynced once at the end rather than after every file.
pub fn write_new_files(files: &[(&Path, &[u8])], mode: u32) -> Result<(), (PathBuf, io::Error)> {
    let mut written: Vec<&Path> = Vec::new();
    for (path, contents) in files {
        if let Err(e) = link_new(path, contents, mode) {
            for p in &written {
                let _ = fs::remove_file(p);
            }
            return Err((path.to_path_buf(), e));
        }
        written.push(path);
    }
    let mut synced: Vec<Option<&Path>> = Vec::new();
    for p in written {
        if !synced.contains(&p.parent()) {
            sync_parent(p).map_err(|e| (p.to_path_buf(), e))?;
            synced.push(p.parent());
        }
    }
    Ok(())
}

/// Writes `dest` atomically unless it already holds exactly `contents` with `mode`.
/// Returns whether a write happened (an unchanged file keeps its mtime, which matters for
/// programs that reload on mtime, such as gitlab-runner).
pub fn write_if_changed(dest: &Path, contents: &[u8], mode: u32) -> io::Result<bool> {
    if let Ok(meta) = fs::metadata(dest)
        && meta.permissions().mode() & 0o7777 == mode
        && fs::read(dest)? == contents
    {
        return Ok(false);
    }
    write_atomic(dest, contents, mode)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn bounded_reads_refuse_devices_directories_and_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        fs::write(&small, b"abc").unwrap();
        assert_eq!(read_bounded(&small, 3).unwrap(), b"abc");
        let err = read_bounded(&small, 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // A symlink to /dev/zero would otherwise be read until memory runs out.
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(
            read_bounded(&zero, 1 << 20).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            read_bounded(dir.path(), 10).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn atomic_write_sets_mode_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        write_atomic(&p, b"one", MODE_SECRET).unwrap();
        write_atomic(&p, b"two", MODE_SECRET).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(mode_of(&p), 0o600);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_new_refuses_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_new_atomic(&p, b"old", MODE_SECRET).unwrap();
        let err = write_new_atomic(&p, b"new", MODE_SECRET).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_if_changed_skips_identical_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        assert!(write_if_changed(&p, b"a", MODE_SECRET).unwrap());
        assert!(!write_if_changed(&p, b"a", MODE_SECRET).unwrap());
        assert!(write_if_changed(&p, b"b", MODE_SECRET).unwrap());
    }

    #[test]
    fn create_dir_all_sets_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b");
        create_dir_all(&p, MODE_PRIVATE_DIR).unwrap();
        assert_eq!(mode_of(&p), 0o700);
    }
}
