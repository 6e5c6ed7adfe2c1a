# Sourced by scripts/test.sh: makes the build the tests need run clippy too, instead of a
# separate `cargo clippy`, which check-builds every dependency only for the test build to
# compile them all again (~250 s of a cold run on 2 cores; docs/benchmarks/build.md).
#
# This is what `cargo clippy` itself does, in check mode: it sets RUSTC_WORKSPACE_WRAPPER to
# clippy-driver, which lints the workspace's own crates and otherwise compiles exactly as rustc
# (dependencies are built by plain rustc), and passes clippy's arguments in CLIPPY_ARGS,
# separated by __CLIPPY_HACKERY__. ship::clippy_while_building_fails_the_build_on_a_lint keeps
# that interface honest: if a toolchain stops reading CLIPPY_ARGS, the test fails.

# clippy_while_building: export the wrapper for every later cargo command of this shell.
clippy_while_building() {
  local driver
  driver="$(rustc --print sysroot 2>/dev/null)/bin/clippy-driver"
  [ -x "$driver" ] || driver=$(command -v clippy-driver || true)
  if [ -z "$driver" ] || [ ! -x "$driver" ]; then
    echo "error: clippy-driver was not found; install clippy (rustup component add clippy)" >&2
    exit 2
  fi
  export RUSTC_WORKSPACE_WRAPPER="$driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}
