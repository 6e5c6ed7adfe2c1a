#!/usr/bin/env bash
# Pickup benchmark (issue 16): job created -> claimed p50/p95 and FetchTask calls per idle
# second, for an act_runner-style 2 s poll (the baseline), the poll-only defaults and the
# workflow_job webhook, side by side in one run on one `tenantci sim --gitea` and one
# nats-server. Writes the table into docs/benchmarks/pickup.md between the markers.
# Usage: scripts/bench-pickup.sh [JOBS=20] [IDLE=10]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
# Debug build: pickup is timers and loopback round trips, not CPU (docs/benchmarks/pickup.md).
bench_bin debug bench_pickup docs/benchmarks/pickup.md "$@"
