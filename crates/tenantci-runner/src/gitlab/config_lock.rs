//! One writer at a time per gitlab-runner config.toml: `<config.toml>.tenantci-lock`, an
//! exclusive `flock` that `runner gitlab-config` and `bootstrap runner` hold from reading
//! config.toml and the pending-runner record ([`super::pending`]) until config.toml is written
//! and the record removed. Two runs at once (a systemd timer and an operator, two Ansible
//! runs) would otherwise both create a runner at GitLab; with it the second waits, then reads
//! what the first wrote and reuses its token, creating nothing.
//!
//! The lock file is empty, 0600, in the record's 0700 directory; it is never deleted (a
//! deletion while another run waits on the old inode would let a third run lock a new one).
//! The kernel releases the lock when its holder exits, so a killed run (kill -9) never leaves
//! it held. A dry run takes no lock: it writes nothing, so it need not wait behind a run that
//! does, and each file it reads is replaced atomically, so it never sees half a write.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use tenantci_core::fsutil::{self, MODE_PRIVATE_DIR, MODE_SECRET};
use tenantci_core::{Error, Result, duration};

/// How long a run waits for another to release the lock: long enough for a whole
/// `bootstrap runner` (apiserver, GitLab), short enough that a stuck holder is reported.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// Overrides [`DEFAULT_WAIT`] (a Go-style duration: `90s`, `10m`).
pub const WAIT_ENV: &str = "TENANTCI_CONFIG_LOCK_WAIT";

/// Held while alive; the lock is released when it is dropped (its file closed).
#[derive(Debug)]
pub struct ConfigLock {
    _held: Flock<File>,
}

/// `<config.toml>.tenantci-lock`.
pub fn lock_path(config: &Path) -> PathBuf {
    let mut path = config.as_os_str().to_owned();
    path.push(".tenantci-lock");
    PathBuf::from(path)
}

/// Takes the lock of `config` unless this is a dry run.
pub async fn acquire_unless_dry_run(config: &Path, dry_run: bool) -> Result<Option<ConfigLock>> {
    if dry_run {
        return Ok(None);
    }
    acquire(config).await.map(Some)
}

/// Takes the lock of `config`, waiting (said once on stderr) up to [`wait_limit`] for
/// another run to release it.
pub async fn acquire(config: &Path) -> Result<ConfigLock> {
    let wait = wait_limit(std::env::var(WAIT_ENV).ok().as_deref())?;
    acquire_within(config, wait).await
}

async fn acquire_within(config: &Path, wait: Duration) -> Result<ConfigLock> {
    let path = lock_path(config);
    let file = match Flock::lock(open(&path)?, FlockArg::LockExclusiveNonblock) {
        Ok(held) => return Ok(ConfigLock { _held: held }),
        Err((file, Errno::EWOULDBLOCK)) => file,
        Err((_, e)) => return Err(unlockable(&path, e)),
    };
    tracing::warn!(
        "waiting for the lock `{}`: another tenantci run holds it while it writes this config.toml; waiting up to {}, then using what it wrote",
        path.display(),
        duration::format(wait)
    );
    // A blocking flock, on a thread of its own (not tokio's blocking pool, which the
    // runtime's shutdown would wait for) so the wait can be bounded. A thread that gets the
    // lock after the bound drops it at once: its receiver is gone.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(lock_blocking(file));
    });
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(Ok(held))) => Ok(ConfigLock { _held: held }),
        Ok(Ok(Err(e))) => Err(unlockable(&path, e)),
        Ok(Err(_)) => Err(Error::external(format!(
            "the wait for the lock `{}` ended without an answer; nothing was changed",
            path.display()
        ))),
        Err(_) => Err(held_too_long(&path, wait)),
    }
}

/// The bound on the wait: [`WAIT_ENV`]'s value when set, else [`DEFAULT_WAIT`].
pub fn wait_limit(raw: Option<&str>) -> Result<Duration> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_WAIT);
    };
    duration::parse_positive(raw).map_err(|e| {
        Error::bad_input(format!(
            "{WAIT_ENV} `{}` is not a positive duration ({e})",
            tenantci_core::input::shown(raw)
        ))
        .hint("set it to a Go-style duration such as 90s or 10m, or unset it for the default 5m; nothing was changed")
    })
}

/// Opens (creating, 0600, its directory 0700) the lock file; a symlink or anything but a
/// regular file there is refused rather than followed.
fn open(path: &Path) -> Result<File> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fsutil::create_dir_all(dir, MODE_PRIVATE_DIR)
        .map_err(|e| Error::unwritable("the directory", dir, e))?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(MODE_SECRET)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| Error::unwritable(WHAT, path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::unreadable(WHAT, path, e))?;
    if !meta.is_file() {
        return Err(Error::bad_input(format!(
            "{WHAT} `{}` is not a regular file",
            path.display()
        ))
        .hint("remove it (tenantci creates it as an empty file) and run again; nothing was changed"));
    }
    Ok(file)
}

/// Waits for the lock; a signal that interrupts the wait does not end it.
fn lock_blocking(mut file: File) -> std::result::Result<Flock<File>, Errno> {
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(held) => return Ok(held),
            Err((again, Errno::EINTR)) => file = again,
            Err((_, e)) => return Err(e),
        }
    }
}

fn unlockable(path: &Path, e: Errno) -> Error {
    Error::external(format!("cannot lock {WHAT} `{}`", path.display()))
        .caused_by(e)
        .hint("the file system must support flock (a local file system does); nothing was changed")
}

fn held_too_long(path: &Path, wait: Duration) -> Error {
    Error::external(format!(
        "another tenantci run held {WHAT} `{}` for longer than {}; nothing was changed",
        path.display(),
        duration::format(wait)
    ))
    .hint(format!(
        "run again once it has finished (`fuser -v {}` names the process holding it), or set {WAIT_ENV} to wait longer",
        path.display()
    ))
}

const WHAT: &str = "the config.toml lock";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_for_the_first_and_a_stuck_one_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("runner/config.toml");
        let first = acquire(&config).await.unwrap();
        let mode = std::fs::metadata(lock_path(&config)).unwrap().permissions();
        assert_eq!(mode.mode() & 0o777, 0o600);
        let other = File::open(lock_path(&config)).unwrap();
        let other = match Flock::lock(other, FlockArg::LockExclusiveNonblock) {
            Err((other, Errno::EWOULDBLOCK)) => other,
            _ => panic!("a second open file description must not get the lock"),
        };
        drop(first);
        let held =
            Flock::lock(other, FlockArg::LockExclusiveNonblock).expect("released when dropped");
        assert!(lock_path(&config).exists(), "the lock file stays");

        let stuck = acquire_within(&config, Duration::from_millis(20)).await;
        assert_eq!(stuck.unwrap_err().exit_code(), 3, "held by `held`");
        drop(held);
        let waiter = tokio::spawn(async move { acquire_within(&config, DEFAULT_WAIT).await });
        waiter
            .await
            .unwrap()
            .expect("the waiter gets it once released");
    }

    #[test]
    fn the_wait_bound_is_a_positive_duration() {
        assert_eq!(wait_limit(None).unwrap(), DEFAULT_WAIT);
        assert_eq!(wait_limit(Some("90s")).unwrap(), Duration::from_secs(90));
        for bad in ["0s", "-1m", "soon", "9999999999999999999h"] {
            assert_eq!(wait_limit(Some(bad)).unwrap_err().exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn a_symlink_in_the_lock_files_place_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), lock_path(&config)).unwrap();
        assert!(open(&lock_path(&config)).is_err());
        assert!(!dir.path().join("elsewhere").exists());
    }
}
