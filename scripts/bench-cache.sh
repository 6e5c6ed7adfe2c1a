#!/usr/bin/env bash
# Cache benchmark (issue 29): a restore of MIB MiB through the executor's proxy and the shared
# cache against reading the same bytes from the cache's directory, side by side in one run,
# and the cache server's peak RSS while four executors restore at once; then the same restore
# from an S3 bucket (moto) with and without direct downloads. Writes the tables into
# docs/benchmarks/cache.md between the markers.
# Usage: scripts/bench-cache.sh [ROUNDS=3] [MIB=200] (PROFILE=release for release figures)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
# The S3 rows read from moto (the S3-compatible server the cache's S3 test runs).
ensure_moto
BENCH_CACHE_MOTO="$PWD/target/moto-venv/bin/moto_server" \
bench_example "${PROFILE:-debug}" bench_cache docs/benchmarks/cache.md "$@"
