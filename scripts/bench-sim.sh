#!/usr/bin/env bash
# Simulator benchmark: kube-rs GET/create pod req/s and p99, RSS with 10k pods.
# Usage: scripts/bench-sim.sh [--dev]   (--dev: skip the release build, numbers are pessimistic)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
flag=--release
if [[ "${1:-}" == "--dev" ]]; then profile=debug; flag=; fi
cargo build $flag -p tenantci --bin tenantci -p tenantci-bench --bin bench_sim
target="${CARGO_TARGET_DIR:-target}"
"$target/$profile/bench_sim" "$target/$profile/tenantci"
