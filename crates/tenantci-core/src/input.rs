//! Files an operator names, read as inputs: regular files only, each with a size bound, and
//! key files only when no other account can read them. One place, so every reader refuses a
//! FIFO (which blocks), a device or a symlink to `/dev/zero` (which never ends), an oversized
//! file and a world-readable key with the same sentence and the same fix.
//!
//! Boundary: reads and refuses; it does not parse (callers do) and never writes.
//! Invariant: nothing is read before the kind is known, and never more than `max + 1` bytes.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::{Error, Result};

/// PEM certificates, CA bundles and keys: far below it.
pub const MAX_PEM: u64 = 1 << 20;
/// Configs, kubeconfigs and JSON state files written by tenantci.
pub const MAX_CONFIG: u64 = 4 << 20;

/// How much of a bad value an error message echoes.
pub const SHOWN_CHARS: usize = 64;

/// `value` as an error message may echo it: whole when short, else its first
/// [`SHOWN_CHARS`] characters and its length (a 100 kB common name is not an error message).
pub fn shown(value: &str) -> String {
    if value.chars().count() <= SHOWN_CHARS {
        return value.to_string();
    }
    let head: String = value.chars().take(SHOWN_CHARS).collect();
    format!("{head}... ({} bytes)", value.len())
}

/// What a path is, when it is not a regular file ("a FIFO", "a directory").
fn kind_of(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Refuses what is not a regular file (after symlinks) by name, before anything opens it.
fn check_regular(what: &str, path: &Path) -> Result<Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| Error::unreadable(what, path, e))?;
    match kind_of(&meta) {
        None => Ok(meta),
        Some(kind) => Err(Error::bad_input(format!(
            "{what} `{}` is {kind}, not a regular file",
            path.display()
        ))
        .hint(format!("pass the path of {what} itself"))),
    }
}

/// The bytes of a regular file of at most `max` bytes, `what` naming it in errors (exit 2).
pub fn read_bytes(what: &str, path: &Path, max: u64) -> Result<Vec<u8>> {
    check_regular(what, path)?;
    crate::fsutil::read_bounded(path, max).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => Error::bad_input(format!(
            "{what} `{}` is larger than {}",
            path.display(),
            size(max)
        ))
        .hint(format!("pass the path of {what} itself, not a larger file")),
        io::ErrorKind::InvalidInput => {
            Error::bad_input(format!("{what} `{}` is not a regular file", path.display()))
                .hint(format!("pass the path of {what} itself"))
        }
        _ => Error::unreadable(what, path, e),
    })
}

/// The UTF-8 text of a regular file of at most `max` bytes.
pub fn read_text(what: &str, path: &Path, max: u64) -> Result<String> {
    String::from_utf8(read_bytes(what, path, max)?).map_err(|_| {
        Error::bad_input(format!("{what} `{}` is not UTF-8 text", path.display()))
            .hint(format!("pass the path of {what} itself"))
    })
}

/// [`read_text`] for a key or a token: refused first when another account may read it.
pub fn read_private(what: &str, path: &Path, max: u64) -> Result<String> {
    check_private(what, path)?;
    read_text(what, path, max)
}

/// Refuses a key file that others may read, and one that its group may read unless the group
/// is how this process reads it: a Kubernetes Secret volume with `fsGroup` is root-owned and
/// 0440 for the Pod's group, which is the only way a non-root container reads it.
pub fn check_private(what: &str, path: &Path) -> Result<()> {
    let meta = check_regular(what, path)?;
    let mode = meta.permissions().mode() & 0o777;
    let group_is_the_way_in = meta.uid() != nix::unistd::geteuid().as_raw()
        && meta.gid() == nix::unistd::getegid().as_raw();
    let open = mode & 0o007 != 0 || (mode & 0o070 != 0 && !group_is_the_way_in);
    if !open {
        return Ok(());
    }
    Err(Error::bad_input(format!(
        "{what} `{}` is open to other accounts (mode {mode:04o})",
        path.display()
    ))
    .hint(format!(
        "`chmod 600 {}` (a key or token file is for this account only)",
        path.display()
    )))
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Refuses, before a run writes anything, a file it could not write at its end: `path`'s
/// directory (or the nearest ancestor that exists, which the write would create it in) must
/// be a directory this user may write. A root-owned `/etc/gitlab-runner` is the usual case.
pub fn check_writable(what: &str, path: &Path) -> Result<()> {
    let absolute = std::path::absolute(path).map_err(|e| Error::unreadable(what, path, e))?;
    let mut dir = absolute.parent();
    while let Some(d) = dir {
        match std::fs::metadata(d) {
            Ok(meta) if !meta.is_dir() => {
                return Err(Error::bad_input(format!(
                    "cannot write {what} `{}`: `{}` is not a directory",
                    path.display(),
                    d.display()
                ))
                .hint(format!("pass another path for {what}")));
            }
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => dir = d.parent(),
            Err(e) => return Err(Error::unreadable("the directory", d, e)),
        }
    }
    let Some(dir) = dir else { return Ok(()) };
    let access = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
    nix::unistd::access(dir, access).map_err(|e| {
        Error::bad_input(format!(
            "cannot write {what} `{}`: this user may not write `{}`",
            path.display(),
            dir.display()
        ))
        .caused_by(io::Error::from(e))
        .hint(format!(
            "run as the user that owns `{}` (gitlab-runner's is usually root's), or pass another path",
            dir.display()
        ))
    })
}

/// The host of `url` when its scheme is one of `schemes` (brackets of an IPv6 address taken
/// off): what a certificate must cover, and the check that a URL names a host at all.
pub fn url_host(url: &str, schemes: &[&str]) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    if !schemes.contains(&uri.scheme_str()?) || url.contains(char::is_whitespace) {
        return None;
    }
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn fifos_devices_and_directories_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, kind) in [
            (fifo.as_path(), "is a FIFO"),
            (zero.as_path(), "is a character device"),
            (dir.path(), "is a directory"),
        ] {
            let e = read_text("the key", path, 10).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.message().contains(kind), "{}", e.message());
            assert!(e.hint_text().is_some());
        }
    }

    #[test]
    fn oversized_files_are_refused_with_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        fs::write(&big, vec![b'x'; 4097]).unwrap();
        let e = read_text("the token file", &big, 4096).unwrap_err();
        assert!(e.message().contains("larger than 4 KiB"), "{}", e.message());
        assert_eq!(read_text("the token file", &big, 4097).unwrap().len(), 4097);
    }

    #[test]
    fn keys_open_to_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        fs::write(&key, "k").unwrap();
        for mode in [0o644, 0o604, 0o640, 0o660] {
            fs::set_permissions(&key, fs::Permissions::from_mode(mode)).unwrap();
            let e = read_private("the sealing key", &key, 10).unwrap_err();
            assert!(
                e.message().contains(&format!("mode {mode:04o}")),
                "{}",
                e.message()
            );
            assert!(e.hint_text().unwrap().contains("chmod 600"));
        }
        for mode in [0o600, 0o400] {
            fs::set_permissions(&key, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(read_private("the sealing key", &key, 10).unwrap(), "k");
        }
    }

    #[test]
    fn long_values_are_shown_as_a_prefix() {
        assert_eq!(shown("runner"), "runner");
        let long = "a".repeat(100_000);
        let s = shown(&long);
        assert!(s.len() < 100, "{s}");
        assert!(s.ends_with("(100000 bytes)"), "{s}");
    }
}
