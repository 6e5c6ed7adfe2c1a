#!/usr/bin/env bash
# Burst pickup benchmark (issue 31): JOBS jobs released at once, picked up by one dispatcher
# against the Gitea double as Gitea (one task per FetchTask) and as Forgejo (up to the free
# slots per FetchTask), side by side in one run: FetchTask calls and time to the last
# executor Pod created. Writes the table into docs/benchmarks/forgejo.md between the markers.
# Usage: scripts/bench-forgejo.sh [JOBS=50] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
# Debug build, as the pickup benchmark: claims are loopback round trips, not CPU.
bench_bin debug bench_forgejo docs/benchmarks/forgejo.md "$@"
