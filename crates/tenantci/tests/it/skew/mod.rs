//! Version skew: the previous release (the commit PREVIOUS_RELEASE names, built by
//! scripts/test-skew.sh, its binary in `TENANTCI_PREVIOUS_BIN`) beside this tree's binary, as an
//! operator runs them during an upgrade and a rollback. The previous release is fixed: it is
//! driven with the flags it has.
//!
//! Left out of scripts/test.sh's run by the nextest default profile (.config/nextest.toml);
//! selected by hand without the variable, each test says SKIPPED and checks nothing.

use std::path::PathBuf;

mod dispatcher;
mod gateway;

/// The previous release's `tenantci` binary, or `None` (saying SKIPPED) when the test was not
/// started by scripts/test-skew.sh.
fn previous_release() -> Option<PathBuf> {
    let Some(bin) = std::env::var_os("TENANTCI_PREVIOUS_BIN") else {
        eprintln!(
            "SKIPPED: TENANTCI_PREVIOUS_BIN is not set; scripts/test-skew.sh builds the previous \
             release and runs the skew tests"
        );
        return None;
    };
    let bin = PathBuf::from(bin);
    assert!(
        bin.is_file(),
        "TENANTCI_PREVIOUS_BIN names {}, which is no file; run scripts/test-skew.sh",
        bin.display()
    );
    Some(bin)
}

/// A command for the previous release's binary, without the shell's tenantci variables.
fn previous(bin: &std::path::Path) -> std::process::Command {
    tenantci_testkit::process::clean_command(bin)
}
