#!/usr/bin/env bash
# Front benchmark (issue 44): a large LIST, small GETs and a stream of watch events straight to
# the simulator's tenant apiserver (the baseline) and through `tenantci front connect` + `front
# serve`, side by side in one run, and the front's memory with 500 open tunnels. Writes the
# table into docs/benchmarks/front.md between the markers.
# Usage: scripts/bench-front.sh [ROUNDS=11] [OBJECTS=6000] (PROFILE=release for release figures)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
bench_bin "${PROFILE:-debug}" bench_front docs/benchmarks/front.md "$@"
