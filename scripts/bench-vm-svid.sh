#!/usr/bin/env bash
# What executor identity adds to a VM start (issue 15): the dispatcher's SVID mint at the SPIRE
# Server API (kept-alive channel, a new connection each time, the client side alone) and mint +
# Lifecycle API create, against the create alone, in one run on one `tenantci sim --spire
# --opensandbox` the bench starts (no nats-server: no dispatcher runs). Prints the table and
# writes it into docs/benchmarks/vm-svid.md between the markers.
# Usage: scripts/bench-vm-svid.sh [N=200]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
bench_bin release bench_vm_svid docs/benchmarks/vm-svid.md "$@"
