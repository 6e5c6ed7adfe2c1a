#!/usr/bin/env bash
# Dispatch benchmark: claim -> executor Pod created through `tenantci dispatch run` (release
# build, a child process) against the raw path (FetchTask + Secret + Pod create, no queue), in
# one run on one `tenantci sim --gitea` and one nats-server the bench starts; and the
# dispatcher's RSS idle and with 1000 claimed assignments. Prints the tables and writes them
# into docs/benchmarks/dispatch.md between the markers.
# Usage: scripts/bench-dispatch.sh [TASKS=500] [HELD=1000] [SEQUENTIAL=100]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
bench_bin release bench_dispatch docs/benchmarks/dispatch.md "$@"
