#!/usr/bin/env bash
# Benchmarks: each writes its table to docs/benchmarks/<name>.md, then docs/benchmarks.md is
# assembled from them. Usage: scripts/bench.sh [mint ...]   (default: mint bootstrap prewarm
# dispatch; `executor-start` and `warm-pool` by name; `queue`, `sim`, `vm`, `identity`, `vm-svid`,
# `passthrough`, `cache`, `front`, `scale`, `status` and `build` run by
# name, each through scripts/bench-<name>.sh)
# The benchmark programs are the crate crates/tenantci-bench (src/bin/bench_*), which the test
# build leaves out (Cargo.toml's default-members); the build below is where they are linted.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust

benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(mint bootstrap prewarm dispatch)

# Every benchmark program and `tenantci`, compiled with clippy's lints, -D warnings, as
# scripts/test.sh compiles the rest (scripts/lib/clippy.sh); in a subshell, so the scripts
# below build as they do on their own.
log "building every benchmark with clippy -D warnings"
. scripts/lib/clippy.sh
(clippy_while_building && cargo build --locked -p tenantci --bin tenantci -p tenantci-bench)
debug="${CARGO_TARGET_DIR:-target}/debug"

for b in "${benches[@]}"; do
  case "$b" in
    mint)
      ensure_openssl
      TENANTCI_BIN="$debug/tenantci" "$debug/bench_mint"
      ;;
    prewarm)
      "$debug/bench_prewarm"
      ;;
    executor-start)
      "$debug/bench_executor_start"
      ;;
    warm-pool)
      "$debug/bench_warm_pool"
      ;;
    *)
      if [ -x "scripts/bench-$b.sh" ]; then "scripts/bench-$b.sh"; else echo "unknown benchmark: $b" >&2; exit 2; fi
      ;;
  esac
done

scripts/lib/assemble-benchmarks.sh
