//! `check-host`: can this host run the gateway or a runner? (runbook §3, docs/host-contract.md)
//!
//! Each check reads what it needs from the host and returns a [`Check`]; the verdict and the
//! exit code come from the list alone (`Report::exit_code`). A state dir without
//! `gateway.json` or clusters is a valid fresh host: the runbook checks before booting anything.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;

use tenantci_core::gateway::StateDir;
use tenantci_core::pki::CertificateAuthority;
use tenantci_core::pki::inspect::rfc3339;

/// Which host the checks are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The gateway host: state dir, node disks, ClientCAs.
    Gateway,
    /// A host that runs gitlab-runner against the tenant apiservers.
    Runner,
}

use crate::checklist;
pub use crate::checklist::{Check, Status};

/// Options of one run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which host: a gateway also has its TMPDIR checked, a runner its tools (kubectl,
    /// gitlab-runner).
    pub role: Role,
    /// The gateway's state directory, checked for either role.
    pub state_dir: PathBuf,
    /// The free space the state directory's file system must have, in GiB.
    pub min_free_gib: u64,
    /// The TMPDIR to judge (the environment's, or /tmp).
    pub tmpdir: PathBuf,
    /// Where to look for kubectl and gitlab-runner (the PATH).
    pub path_var: Option<std::ffi::OsString>,
}

/// The whole report, `-o json`'s shape.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The role the checks were for.
    pub role: Role,
    /// The state directory checked.
    pub state_dir: PathBuf,
    /// Every check, in the order run.
    pub checks: Vec<Check>,
    /// How many checks failed; any makes the exit code 1.
    pub failed: usize,
    /// How many checks warned (they do not fail the run).
    pub warnings: usize,
}

impl Report {
    fn new(role: Role, state_dir: PathBuf, checks: Vec<Check>) -> Self {
        let failed = checklist::count(&checks, Status::Fail);
        let warnings = checklist::count(&checks, Status::Warn);
        Report {
            role,
            state_dir,
            checks,
            failed,
            warnings,
        }
    }

    /// 1 when any check failed, else 0.
    pub fn exit_code(&self) -> i32 {
        if self.failed > 0 {
            tenantci_core::error::exit_code::CHECK_FAILED
        } else {
            tenantci_core::error::exit_code::SUCCESS
        }
    }
}

/// Warn when a ClientCA has less than this left.
pub const CA_WARN_DAYS: i64 = 30;

/// Runs every check for the role.
pub fn run(opts: &Options) -> Report {
    let mut checks = Vec::new();
    let dir = &opts.state_dir;
    let usable = state_dir_checks(dir, &mut checks);
    if usable {
        checks.push(disk_check("state-dir-disk", "the state directory", dir));
        checks.push(free_space_check(dir, opts.min_free_gib));
    }
    if opts.role == Role::Gateway {
        checks.push(disk_check("tmpdir-disk", "TMPDIR", &opts.tmpdir));
    }
    if usable {
        gateway_json_check(dir, &mut checks);
        cluster_checks(&StateDir::new(dir), OffsetDateTime::now_utc(), &mut checks);
    }
    if opts.role == Role::Runner {
        for (tool, why) in [
            (
                "kubectl",
                "to check the runner's credential against the tenant apiserver",
            ),
            (
                "gitlab-runner",
                "to run GitLab jobs with the Kubernetes executor",
            ),
        ] {
            checks.push(match find_on_path(tool, opts.path_var.as_deref()) {
                Some(p) => Check::ok(format!("tool-{tool}"), format!("{tool} is {}", p.display())),
                None => Check::warn(
                    format!("tool-{tool}"),
                    format!("{tool} is not on PATH (needed {why})"),
                    format!("install {tool} on this host, or add its directory to PATH"),
                ),
            });
        }
    }
    Report::new(opts.role, dir.clone(), checks)
}

/// Existence, type, owner and writability; returns whether later checks can look inside.
fn state_dir_checks(dir: &Path, checks: &mut Vec<Check>) -> bool {
    let shown = dir.display();
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) => {
            checks.push(Check::fail(
                "state-dir-exists",
                format!("the state directory {shown} cannot be read: {e}"),
                format!("create it on real disk: `mkdir -p -m 0700 {shown}`, or pass the right --state-dir"),
            ));
            return false;
        }
    };
    checks.push(Check::ok("state-dir-exists", format!("{shown} exists")));
    if !meta.is_dir() {
        checks.push(Check::fail(
            "state-dir-is-directory",
            format!("{shown} is not a directory"),
            "pass --state-dir naming a directory",
        ));
        return false;
    }
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() == uid {
        checks.push(Check::ok(
            "state-dir-owner",
            format!("owned by uid {uid} (this user)"),
        ));
    } else {
        checks.push(Check::fail(
            "state-dir-owner",
            format!(
                "{shown} is owned by uid {}, not by this user (uid {uid})",
                meta.uid()
            ),
            format!("run as the gateway's account, or `chown -R $(id -u):$(id -g) {shown}`"),
        ));
    }
    let probe = dir.join(format!(".check-host-{}", std::process::id()));
    match std::fs::write(&probe, b"probe").and_then(|_| std::fs::remove_file(&probe)) {
        Ok(()) => checks.push(Check::ok(
            "state-dir-writable",
            "a file can be created and removed",
        )),
        Err(e) => {
            let _ = std::fs::remove_file(&probe);
            checks.push(Check::fail(
                "state-dir-writable",
                format!("cannot write in {shown}: {e}"),
                format!(
                    "make it writable by this user (`chmod u+rwx {shown}`) or remount it read-write"
                ),
            ))
        }
    }
    true
}

/// File systems that live in RAM: node disks there vanish on reboot and fill memory.
pub fn ram_backed(fs_type: i64) -> Option<&'static str> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    match fs_type {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

fn disk_check(name: &str, what: &str, dir: &Path) -> Check {
    let fs_type = nix::sys::statfs::statfs(dir).map(|fs| fs.filesystem_type().0);
    disk_verdict(name, what, dir, fs_type)
}

/// The verdict on `dir` from its file system type (statfs's `f_type`), apart from the
/// statfs call so it can be tested for any file system on any host.
fn disk_verdict(name: &str, what: &str, dir: &Path, fs_type: nix::Result<i64>) -> Check {
    let shown = dir.display();
    match fs_type {
        Ok(fs_type) => match ram_backed(fs_type) {
            Some(kind) => Check::fail(
                name,
                format!(
                    "{what} {shown} is on {kind}, which is RAM: node disks and root filesystems there fill memory and vanish on reboot"
                ),
                format!(
                    "point {what} at the host's real disk, e.g. `TMPDIR=/var/tmp/kcp` and a state directory under /var/lib"
                ),
            ),
            None => Check::ok(name, format!("{what} {shown} is on real disk")),
        },
        Err(e) => Check::fail(
            name,
            format!("cannot statfs {what} {shown}: {e}"),
            format!("make sure {shown} exists and is readable"),
        ),
    }
}

fn free_space_check(dir: &Path, min_free_gib: u64) -> Check {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(vfs) => {
            let free = vfs.blocks_available() as u128 * vfs.fragment_size() as u128;
            let gib = free as f64 / (1u64 << 30) as f64;
            if free >= (min_free_gib as u128) << 30 {
                Check::ok(
                    "state-dir-free-space",
                    format!("{gib:.1} GiB free (at least {min_free_gib} GiB wanted)"),
                )
            } else {
                Check::fail(
                    "state-dir-free-space",
                    format!(
                        "only {gib:.1} GiB free in {}, less than {min_free_gib} GiB: a node boot fails partway as a full file system",
                        dir.display()
                    ),
                    "free space, or move the state directory to a larger disk (--min-free-gib sets the threshold)",
                )
            }
        }
        Err(e) => Check::fail(
            "state-dir-free-space",
            format!("cannot statvfs {}: {e}", dir.display()),
            "make sure the state directory is readable",
        ),
    }
}

fn gateway_json_check(dir: &Path, checks: &mut Vec<Check>) {
    let path = StateDir::new(dir).gateway_json();
    match tenantci_core::fsutil::read_bounded(&path, tenantci_core::input::MAX_CONFIG) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => checks.push(Check::ok(
            "gateway-json",
            "no gateway.json yet: a fresh host, ready for the gateway's first start",
        )),
        Err(e) => checks.push(Check::fail(
            "gateway-json",
            format!("cannot read {}: {e}", path.display()),
            "make gateway.json readable by this user",
        )),
        Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => match v.get("adminKubeconfig").and_then(|a| a.as_str()) {
                Some(admin) if Path::new(admin).is_file() => checks.push(Check::ok(
                    "gateway-json",
                    format!("gateway.json names the admin kubeconfig {admin}"),
                )),
                Some(admin) => checks.push(Check::fail(
                    "gateway-json",
                    format!("gateway.json names the admin kubeconfig {admin}, which does not exist"),
                    "start the gateway (it writes the admin kubeconfig), or fix adminKubeconfig in gateway.json",
                )),
                None => checks.push(Check::fail(
                    "gateway-json",
                    format!("{} has no adminKubeconfig field", path.display()),
                    "restore gateway.json from the gateway (it writes adminKubeconfig and stateDir)",
                )),
            },
            Err(e) => checks.push(Check::fail(
                "gateway-json",
                format!("{} is not valid JSON: {e}", path.display()),
                "restore gateway.json from the gateway or a backup",
            )),
        },
    }
}

fn cluster_checks(state: &StateDir, now: OffsetDateTime, checks: &mut Vec<Check>) {
    let names = match state.cluster_names() {
        Ok(n) => n,
        Err(e) => {
            checks.push(Check::fail(
                "clusters",
                format!("cannot list {}: {e}", state.clusters_dir().display()),
                "make the clusters directory readable by this user",
            ));
            return;
        }
    };
    if names.is_empty() {
        checks.push(Check::ok("clusters", "no tenant clusters yet"));
        return;
    }
    checks.push(Check::ok(
        "clusters",
        format!("{} tenant cluster(s): {}", names.len(), names.join(", ")),
    ));
    for name in names {
        let paths = state.cluster(&name);
        if !paths.client_ca_key.exists() && !paths.client_ca_cert.exists() {
            checks.push(Check::warn(
                format!("cluster-{name}-client-ca"),
                format!("cluster {name} has no ClientCA yet"),
                "the gateway creates it when the cluster is provisioned (`tenantci pki init-cluster` for the simulator)",
            ));
            continue;
        }
        checks.push(key_mode_check(&name, &paths.client_ca_key));
        match CertificateAuthority::load(&paths.client_ca_cert, &paths.client_ca_key) {
            Ok(ca) => checks.push(validity_check(&name, ca.not_after(), now)),
            Err(e) => checks.push(Check::fail(
                format!("cluster-{name}-client-ca"),
                format!("{e:#}"),
                e.hint_text()
                    .unwrap_or("restore the cluster's ClientCA files from the gateway")
                    .to_string(),
            )),
        }
    }
}

fn key_mode_check(name: &str, key: &Path) -> Check {
    let check = format!("cluster-{name}-client-ca-key-mode");
    match std::fs::metadata(key) {
        Ok(m) => {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 == 0 {
                Check::ok(check, format!("{} is {mode:04o}", key.display()))
            } else {
                Check::fail(
                    check,
                    format!(
                        "{} is {mode:04o}: other users can read the key that signs every credential of cluster {name}",
                        key.display()
                    ),
                    format!(
                        "`chmod 600 {}`, and rotate the ClientCA if the key may have been copied",
                        key.display()
                    ),
                )
            }
        }
        Err(e) => Check::fail(
            check,
            format!("cannot stat {}: {e}", key.display()),
            "restore the ClientCA key from the gateway",
        ),
    }
}

/// ClientCA lifetime: FAIL when expired, warn under [`CA_WARN_DAYS`].
pub fn validity_check(name: &str, not_after: OffsetDateTime, now: OffsetDateTime) -> Check {
    let check = format!("cluster-{name}-client-ca-validity");
    let left = not_after - now;
    if left <= time::Duration::ZERO {
        Check::fail(
            check,
            format!(
                "the ClientCA of cluster {name} expired at {}: no credential it signed is accepted",
                rfc3339(not_after)
            ),
            "rotate the cluster's ClientCA on the gateway, then mint new runner credentials",
        )
    } else if left < time::Duration::days(CA_WARN_DAYS) {
        Check::warn(
            check,
            format!(
                "the ClientCA of cluster {name} expires at {} ({} days left)",
                rfc3339(not_after),
                left.whole_days()
            ),
            "plan the ClientCA rotation now; credentials cannot outlive it",
        )
    } else {
        Check::ok(
            check,
            format!(
                "valid until {} ({} days left)",
                rfc3339(not_after),
                left.whole_days()
            ),
        )
    }
}

fn find_on_path(tool: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .map(|d| d.join(tool))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_file_systems_are_recognised() {
        assert_eq!(ram_backed(0x0102_1994), Some("tmpfs"));
        assert_eq!(ram_backed(0x8584_58f6), Some("ramfs"));
        assert_eq!(ram_backed(0xEF53), None); // ext4
    }

    #[test]
    fn a_directory_in_ram_fails_pointing_at_real_disk() {
        let dir = Path::new("/somewhere");
        let tmpfs = disk_verdict(
            "state-dir-disk",
            "the state directory",
            dir,
            Ok(0x0102_1994),
        );
        assert_eq!(tmpfs.status, Status::Fail);
        assert!(tmpfs.detail.contains("on tmpfs"), "{}", tmpfs.detail);
        let fix = tmpfs.fix.unwrap();
        assert!(fix.contains("TMPDIR=/var/tmp"), "{fix}");
        let ext4 = disk_verdict("tmpdir-disk", "TMPDIR", dir, Ok(0xEF53));
        assert_eq!((ext4.status, ext4.fix), (Status::Ok, None));
        let gone = disk_verdict("tmpdir-disk", "TMPDIR", dir, Err(nix::Error::ENOENT));
        assert_eq!(gone.status, Status::Fail);
        assert!(gone.detail.contains("cannot statfs"), "{}", gone.detail);
    }

    #[test]
    fn ca_validity_thresholds() {
        let now = OffsetDateTime::now_utc();
        assert_eq!(
            validity_check("ci", now - time::Duration::hours(1), now).status,
            Status::Fail
        );
        assert_eq!(
            validity_check("ci", now + time::Duration::days(29), now).status,
            Status::Warn
        );
        assert_eq!(
            validity_check("ci", now + time::Duration::days(31), now).status,
            Status::Ok
        );
    }

    #[test]
    fn any_failure_makes_exit_one() {
        let r = Report::new(
            Role::Gateway,
            PathBuf::from("/x"),
            vec![Check::ok("a", "b"), Check::warn("c", "d", "e")],
        );
        assert_eq!(r.exit_code(), 0);
        let r = Report::new(
            Role::Gateway,
            PathBuf::from("/x"),
            vec![Check::fail("a", "b", "c")],
        );
        assert_eq!(r.exit_code(), 1);
    }
}
