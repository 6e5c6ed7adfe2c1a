#!/usr/bin/env bash
# Runs the config.toml merge fuzz target briefly (default 60 s; FUZZ_SECONDS overrides).
# Needs cargo-fuzz and a nightly toolchain; skips (exit 0) when either is missing, because the
# same never-panic contract also runs on stable as a proptest
# (`cargo test --test it runner_prop_merge_never_panics`).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed (cargo install cargo-fuzz); skipping" >&2
    exit 0
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly); skipping" >&2
    exit 0
fi
# Seed the (git-ignored) corpus with the golden files and the example config.toml.
mkdir -p corpus/merge
cp ../crates/tenantci/tests/it/runner/golden/*.toml ../runner-configs/gitlab-runner/config.toml corpus/merge/
exec cargo +nightly fuzz run merge corpus/merge -- -max_total_time="$seconds"
