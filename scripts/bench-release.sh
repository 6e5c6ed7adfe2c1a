#!/usr/bin/env bash
# The shipped binary: size and the idle dispatcher's RSS for the release profile as it was
# (`release-baseline`: opt-level 3, no strip, no LTO) against the lean one (`release`: stripped,
# opt-level "z", fat LTO, one codegen unit), with and without the simulator feature, measured
# in one run on one simulator and queue (bench_dispatch --idle). Writes docs/benchmarks/release.md
# between the markers.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
target="${CARGO_TARGET_DIR:-target}"
log "building (three release builds: this takes a while)"
cargo build --locked --quiet --profile release-baseline -p tenantci
cargo build --locked --quiet --release -p tenantci --bin tenantci -p tenantci-bench --bin bench_dispatch
cp "$target/release/tenantci" "$target/release/tenantci-sim"
cargo build --locked --quiet --release -p tenantci --no-default-features
table=$("$target/release/bench_dispatch" --idle "$target/release/tenantci-sim" \
  "before (release-baseline, with sim)=$target/release-baseline/tenantci" \
  "lean (release, with sim)=$target/release/tenantci-sim" \
  "lean, no sim (shipped)=$target/release/tenantci")
echo "$table"
put_table docs/benchmarks/release.md bench-release "$table"
