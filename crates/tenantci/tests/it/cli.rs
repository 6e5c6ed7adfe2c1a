//! The CLI surface: help lists every subcommand, version, usage errors exit 2.

use crate::util::{assert_exit, run_args, stderr, stdout};

#[test]
fn cli_help_lists_subcommands_and_version_prints() {
    let o = run_args(["--help"]);
    assert_exit(&o, 0);
    let help = stdout(&o);
    for cmd in ["pki", "credential", "check-host", "internal"] {
        assert!(help.contains(cmd), "{cmd} missing from --help:\n{help}");
    }
    let o = run_args(["--version"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).starts_with("tenantci "));
    let o = run_args(["credential", "mint", "--help"]);
    assert!(
        stdout(&o).contains("SOCIALWEB_TENANTCREDENTIAL_SERVER"),
        "flags show their variables"
    );
}

#[test]
fn cli_usage_errors_exit_2() {
    let o = run_args(["no-such-command"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no-such-command"));
}
