#!/usr/bin/env bash
# VM dispatch benchmark (issue 14): claim -> sandbox created through `tenantci dispatch run`
# with the VM backend against the raw Lifecycle API create (FetchTask + seal + create, no
# queue; once more with the worker's list-before-create), with the pod path beside them, in
# one run on one `tenantci sim --gitea --opensandbox` and one nats-server the bench starts.
# Prints the tables and writes them into docs/benchmarks/vm.md between the markers.
# Usage: scripts/bench-vm.sh [TASKS=400] [SEQUENTIAL=100]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
bench_bin release bench_vm docs/benchmarks/vm.md "$@"
