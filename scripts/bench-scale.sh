#!/usr/bin/env bash
# Scale benchmark: one `tenantci dispatch run` with N = 100, 300, 1000 executors running at
# once, the baseline dispatcher (BASE, default abb830a: the pod backend LISTing every 2 s, built
# here in its own worktree and target directory) and this tree's, in one run on the same
# simulator (this tree's, which counts apiserver requests by verb) and nats-server. Prints the
# table and writes it into docs/benchmarks/scale.md between the markers.
# Usage: scripts/bench-scale.sh [--sizes 100,300,1000] [--window 20]
# Debug builds (dependencies at opt-level 0, docs/benchmarks/suite.md), both the same way: the
# CPU figures are pessimistic for both, their ratio is what compares.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server

base=${BASE:-abb830a}
target="${CARGO_TARGET_DIR:-target}"
wt="$target/bench-scale-base"
if [ ! -d "$wt" ]; then
  log "baseline $base: its own worktree $wt"
  git worktree add --detach "$wt" "$base" >&2
fi
git -C "$wt" checkout --quiet --detach "$base"
if [ ! -d "$wt/target/debug" ] && [ -d "$target/debug/deps" ]; then
  # Seeds the baseline's own target directory with the compiled dependencies (same lock file).
  mkdir -p "$wt/target"
  cp -a "$target/debug" "$wt/target/debug"
fi
log "building the baseline ($base) and this tree"
(cd "$wt" && CARGO_TARGET_DIR="$PWD/target" cargo build --locked --quiet --bin tenantci)
cargo build --locked --quiet --bin tenantci --example bench_scale
table=$("$target/debug/examples/bench_scale" "$target/debug/tenantci" \
  "before ($base)=$wt/target/debug/tenantci" "after=$target/debug/tenantci" "$@")
echo "$table"
put_table docs/benchmarks/scale.md bench-scale "$table"
