#!/usr/bin/env bash
# Executor identity benchmark (issue 15): facade request latency (UpdateLog calls of a
# claimed task) with server-only TLS and with SPIFFE mTLS, direct and through `tenantci
# executor-proxy`, kept-alive and with a new connection per call, in one run on one
# `tenantci sim --gitea --spire` and one nats-server the bench starts. Prints the tables and
# writes them into docs/benchmarks/identity.md between the markers.
# Usage: scripts/bench-identity.sh [CALLS=2000] [FRESH=300] [ROUNDS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
ensure_nats_server
bench_bin release bench_identity docs/benchmarks/identity.md "$@"
