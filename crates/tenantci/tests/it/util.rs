//! Helpers shared by the integration tests: a per-test scratch directory and a way to run the
//! real binary with a clean environment.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tenantci` binary cargo built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tenantci"))
}

/// The workspace's target directory (where tests keep the tools they install once).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// `bin` of a Python venv `target/<venv>` holding `requirement` from PyPI: scripts/lib/ensure.sh
/// installs it; a run without it installs it here, in place (a venv's scripts name its own
/// path). Each venv serves one test, so no two tests race its install.
pub fn pip_venv(venv: &str, requirement: &str, bin: &str) -> PathBuf {
    let venv = target_dir().join(venv);
    let path = venv.join("bin").join(bin);
    if !path.exists() {
        let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        assert!(ok(Command::new("python3").args(["-m", "venv"]).arg(&venv)));
        assert!(
            ok(Command::new(venv.join("bin/pip")).args(["install", "-q", requirement])),
            "pip install {requirement} (PyPI)"
        );
    }
    path
}

/// A `tenantci` command with the runbook's `SOCIALWEB_TENANTCREDENTIAL_*` and tenantci's own
/// variables removed, so the developer's shell cannot leak into a test.
pub fn tenantci() -> Command {
    tenantci_testkit::process::clean_command(&bin())
}

/// `tenantci bootstrap runner` for GitLab on cluster `ci` of the gateway at `state_dir`, its
/// credential in `credential_dir` and its entry in `config`: what every GitLab bootstrap test
/// starts from (each adds its token and GitLab flags).
pub fn bootstrap_gitlab(state_dir: &Path, credential_dir: &Path, config: &Path) -> Command {
    bootstrap_gitlab_by(tenantci(), state_dir, credential_dir, config)
}

/// [`bootstrap_gitlab`] run by `cmd`, a `tenantci` command (the previous release's, in the
/// skew tests).
pub fn bootstrap_gitlab_by(
    mut cmd: Command,
    state_dir: &Path,
    credential_dir: &Path,
    config: &Path,
) -> Command {
    cmd.args([
        "bootstrap",
        "runner",
        "--forge",
        "gitlab",
        "--cluster",
        "ci",
    ])
    .arg("--state-dir")
    .arg(state_dir)
    .arg("--credential-dir")
    .arg(credential_dir)
    .arg("--config")
    .arg(config);
    cmd
}

/// Runs `cmd` and returns its output; panics with the command line if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs `tenantci ARGS` and returns its output.
pub fn run_args<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(tenantci().args(args))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code, printing both streams when it differs.
#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit code\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}

/// A scratch directory on real disk, removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tenantci_testkit::process::scratch()
}

pub fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every file under `dir` with its contents ([`tenantci_testkit::snapshot::files`]), for
/// "nothing changed" assertions.
pub use tenantci_testkit::snapshot::files as snapshot;

/// A file of the repository (manifests/, runner-configs/), or of this crate when `rel`
/// starts with `tests/`.
pub fn repo_file(rel: &str) -> PathBuf {
    let krate = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if rel.starts_with("tests/") {
        krate.join(rel)
    } else {
        krate.join("../..").join(rel)
    }
}

/// `promtool test rules FILES...` in `dir`, or None (saying SKIPPED) where promtool is not
/// installed (scripts/lib/ensure.sh installs it).
pub fn promtool_test_rules(dir: &Path, files: &[&Path]) -> Option<Output> {
    match Command::new("promtool")
        .args(["test", "rules"])
        .args(files)
        .current_dir(dir)
        .output()
    {
        Ok(o) => Some(o),
        Err(_) => {
            eprintln!(
                "SKIPPED: promtool is not installed (apt-get install prometheus); the alert rules were not tested"
            );
            None
        }
    }
}
