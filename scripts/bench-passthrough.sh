#!/usr/bin/env bash
# Passthrough benchmark (issue 29): an artifact upload straight to the Gitea double against the
# same upload through `tenantci executor-proxy --gitea-url`, side by side in one run, and the
# proxy's peak RSS. Writes the table into docs/benchmarks/passthrough.md between the markers.
# Usage: scripts/bench-passthrough.sh [ROUNDS=5] [MIB=64] (PROFILE=release for release figures)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
bench_bin "${PROFILE:-debug}" bench_passthrough docs/benchmarks/passthrough.md "$@"
