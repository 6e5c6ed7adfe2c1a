#!/usr/bin/env bash
# Status API benchmark (issue 43): GET /v1/status and the page at / against GET /healthz on
# the same listener (the baseline), idle and with TASKS executors running, in one run on one
# `tenantci sim --gitea` and one nats-server. Writes the table into docs/benchmarks/status.md
# between the markers. Usage: scripts/bench-status.sh [TASKS=20] [REQUESTS=200]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
# Debug build, as the suite runs it: the figure is a ratio to the same listener's round trip.
bench_bin debug bench_status docs/benchmarks/status.md "$@"
