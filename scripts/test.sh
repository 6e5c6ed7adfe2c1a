#!/usr/bin/env bash
# The test suite: formatting, lints, and every unit and integration test.
# Installs what it needs (nats-server, kubectl) and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

ensure_rust
ensure_nats_server
ensure_kubectl
ensure_openssl
ensure_systemd_analyze
ensure_promtool

log "cargo fmt --check"
cargo fmt --all -- --check

log "crate layering (docs/architecture.md)"
bash scripts/check-layering.sh

log "cargo clippy --all-targets -- -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings

log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --workspace --no-fail-fast
else
  cargo test --locked --workspace --no-fail-fast
fi

log "the OCI image (scripts/image.sh: release build, two builds, one digest)"
scripts/check-image.sh
