#!/usr/bin/env bash
# The test suite a person runs: formatting, layering, clippy -D warnings, and every unit and
# integration test. Installs what it needs (nats-server, kubectl, promtool, ...) and exits
# non-zero on any failure. CI (.ci/run) also runs the version-skew tests afterwards
# (scripts/test-skew.sh: the previous release built beside this tree; the nextest default
# profile leaves them out here) and checks the reproducible image (scripts/check-image.sh: a
# fat-LTO release build, ~8 minutes), which this leaves out.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

ensure_rust
ensure_nats_server
ensure_kubectl
ensure_openssl
ensure_systemd_analyze
ensure_promtool
# jq and curl: the VM boot-script test's stand-in runner speaks the RunnerService with them.
ensure_jq
ensure_curl
ensure_actions_cache_client
ensure_moto
# The front's attack certificates (BMPString, T61String, two CNs) are made with pyca/cryptography.
ensure_pyca
# The status page's browser test renders it in headless Chromium.
ensure_chromium

log "cargo fmt --check"
cargo fmt --all -- --check

log "crate layering (docs/architecture.md)"
bash scripts/check-layering.sh

# Every kustomization (a Component renders only inside one). The server dry run of the base
# and of the built-in components at the simulator is the `ship::` test
# every_kustomization_renders_and_the_built_in_ones_pass_a_server_dry_run.
log "kubectl kustomize every kustomization under manifests/"
for k in $(grep -l '^kind: Kustomization' $(find manifests -name kustomization.yaml) | sort); do
  kubectl kustomize "$(dirname "$k")" >/dev/null || { echo "kustomize failed: $k" >&2; exit 1; }
done

# One build for clippy and the tests (scripts/lib/clippy.sh says why): every target that
# `cargo clippy --all-targets` would check is compiled with clippy's lints, -D warnings.
# No --workspace: the build and the tests are the default members (Cargo.toml), every crate
# but tenantci-bench, the benchmark programs, which scripts/bench.sh builds (and lints).
. scripts/lib/clippy.sh
clippy_while_building
log "build every target with clippy -D warnings"
cargo build --locked --all-targets

log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast
else
  cargo test --locked --no-fail-fast
fi
