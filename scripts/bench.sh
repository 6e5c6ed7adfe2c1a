#!/usr/bin/env bash
# Benchmarks: each writes its table to docs/benchmarks/<name>.md, then docs/benchmarks.md is
# assembled from them. Usage: scripts/bench.sh [mint ...]   (default: mint bootstrap prewarm
# dispatch; `executor-start` and `warm-pool` by name; `queue`, `sim`, `vm`, `identity`, `vm-svid`,
# `passthrough`, `cache`, `front`, `scale`, `status` and `build` run by
# name, each through scripts/bench-<name>.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust

benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(mint bootstrap prewarm dispatch)

log "building"
cargo build --locked --bin tenantci --examples

for b in "${benches[@]}"; do
  case "$b" in
    mint)
      ensure_openssl
      TENANTCI_BIN=target/debug/tenantci cargo run --locked --quiet --example bench_mint
      ;;
    prewarm)
      cargo run --locked --quiet --example bench_prewarm
      ;;
    executor-start)
      cargo run --locked --quiet --example bench_executor_start
      ;;
    warm-pool)
      cargo run --locked --quiet --example bench_warm_pool
      ;;
    *)
      if [ -x "scripts/bench-$b.sh" ]; then "scripts/bench-$b.sh"; else echo "unknown benchmark: $b" >&2; exit 2; fi
      ;;
  esac
done

scripts/lib/assemble-benchmarks.sh
