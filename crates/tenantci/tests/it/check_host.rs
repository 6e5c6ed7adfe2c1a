//! `check-host` on real disk and on tmpfs.

use std::path::Path;

use crate::util::{assert_exit, run, run_args, scratch, stdout, tenantci};

fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let o = run_args(args);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json report");
    (o.status.code().unwrap(), v)
}

fn status_of<'a>(report: &'a serde_json::Value, name: &str) -> &'a str {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))["status"]
        .as_str()
        .unwrap()
}

#[test]
fn check_host_fresh_state_dir_on_real_disk_passes() {
    let dir = scratch();
    let s = dir.path().to_str().unwrap();
    let (code, report) = json(&[
        "check-host",
        "--role",
        "gateway",
        "--state-dir",
        s,
        "--min-free-gib",
        "0",
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(status_of(&report, "state-dir-disk"), "ok");
    assert_eq!(status_of(&report, "gateway-json"), "ok");
    assert_eq!(status_of(&report, "clusters"), "ok");
}

#[test]
fn check_host_flags_a_missing_dir_too_little_space_and_a_loose_key() {
    let dir = scratch();
    let missing = dir.path().join("nope");
    let (code, report) = json(&[
        "check-host",
        "--role",
        "gateway",
        "--state-dir",
        missing.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&report, "state-dir-exists"), "fail");

    let s = dir.path().join("state");
    assert_exit(
        &run_args([
            "pki",
            "init-cluster",
            "--state-dir",
            s.to_str().unwrap(),
            "--cluster",
            "ci",
        ]),
        0,
    );
    let (code, report) = json(&[
        "check-host",
        "--role",
        "gateway",
        "--state-dir",
        s.to_str().unwrap(),
        "--min-free-gib",
        "100000000",
        "-o",
        "json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&report, "state-dir-free-space"), "fail");
    assert_eq!(status_of(&report, "cluster-ci-client-ca-key-mode"), "ok");
    assert_eq!(status_of(&report, "cluster-ci-client-ca-validity"), "ok");

    use std::os::unix::fs::PermissionsExt;
    let key = s.join("clusters/ci/pki/client-ca.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run_args([
        "check-host",
        "--role",
        "gateway",
        "--state-dir",
        s.to_str().unwrap(),
        "--min-free-gib",
        "0",
    ]);
    assert_exit(&o, 1);
    let text = stdout(&o);
    assert!(
        text.contains("FAIL  cluster-ci-client-ca-key-mode"),
        "{text}"
    );
    assert!(text.contains("fix: `chmod 600"), "{text}");
}

#[test]
fn check_host_flags_a_key_that_does_not_match_its_ca() {
    let dir = scratch();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    for s in [&a, &b] {
        assert_exit(
            &run_args([
                "pki",
                "init-cluster",
                "--state-dir",
                s.to_str().unwrap(),
                "--cluster",
                "ci",
            ]),
            0,
        );
    }
    std::fs::copy(
        b.join("clusters/ci/pki/client-ca.key"),
        a.join("clusters/ci/pki/client-ca.key"),
    )
    .unwrap();
    let (code, report) = json(&[
        "check-host",
        "--role",
        "gateway",
        "--state-dir",
        a.to_str().unwrap(),
        "--min-free-gib",
        "0",
        "-o",
        "json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&report, "cluster-ci-client-ca"), "fail");
}

fn is_tmpfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// On a real tmpfs, end to end (the verdict for any file system type is unit-tested in
/// tenantci-runner's check_host). A host without a tmpfs /dev/shm skips it, saying so on stderr,
/// which .config/nextest.toml shows even when the test passes.
#[test]
fn check_host_fails_a_state_dir_and_a_gateway_tmpdir_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if !is_tmpfs(shm) {
        eprintln!("SKIPPED: /dev/shm is not tmpfs on this host; nothing was checked");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let (code, report) = json(&[
        "check-host",
        "--role",
        "runner",
        "--state-dir",
        dir.path().to_str().unwrap(),
        "--min-free-gib",
        "0",
        "-o",
        "json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(status_of(&report, "state-dir-disk"), "fail");
    let fix = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "state-dir-disk")
        .unwrap()["fix"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(fix.contains("TMPDIR=/var/tmp"), "{fix}");

    // Gateway role: a TMPDIR on tmpfs fails even when the state dir is on real disk.
    let real = scratch();
    let o = run(tenantci()
        .args([
            "check-host",
            "--role",
            "gateway",
            "--state-dir",
            real.path().to_str().unwrap(),
            "--min-free-gib",
            "0",
            "-o",
            "json",
        ])
        .env("TMPDIR", dir.path()));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(status_of(&report, "tmpdir-disk"), "fail");
    assert_eq!(status_of(&report, "state-dir-disk"), "ok");
}

#[test]
fn check_host_runner_role_warns_about_missing_tools_without_failing() {
    let dir = scratch();
    let o = run(tenantci()
        .args([
            "check-host",
            "--role",
            "runner",
            "--state-dir",
            dir.path().to_str().unwrap(),
            "--min-free-gib",
            "0",
            "-o",
            "json",
        ])
        .env("PATH", dir.path()));
    assert_exit(&o, 0);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(status_of(&report, "tool-gitlab-runner"), "warn");
    assert_eq!(status_of(&report, "tool-kubectl"), "warn");
}
