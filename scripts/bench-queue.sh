#!/usr/bin/env bash
# Queue benchmark: the capped consumer vs raw async-nats JetStream, side by side in one run on
# one loopback nats-server (started by the bench with the generated config). Prints the table and
# writes it into docs/benchmarks/queue.md between the markers.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
n="${1:-5000}"
table=$(cargo run --quiet --release -p tenantci-bench --bin bench_queue -- "$n")
echo "$table"
put_table docs/benchmarks/queue.md bench-queue "$table"
