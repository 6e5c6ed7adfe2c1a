#!/usr/bin/env bash
# Cache benchmarks; each writes its table into docs/benchmarks/cache.md between its markers.
# - restore (issue 29): a restore of MIB MiB through the executor's proxy and the shared cache
#   against reading the same bytes from the cache's directory, side by side in one run, and
#   the cache server's peak RSS while four executors restore at once; then the same restore
#   from an S3 bucket (moto) with and without direct downloads.
# - commit (issue 45): COMMITTERS commits released at once, of one key and of distinct keys,
#   against a directory and a moto bucket, before the atomic commit (BENCH_CACHE_BEFORE, by
#   default abb830a: cloned and built in target/bench-cache-before/<rev>, its own target dir,
#   kept for the next run) and after (this tree), in one run, sides alternating.
# Usage: scripts/bench-cache.sh [restore [ROUNDS=3] [MIB=200] | commit [ROUNDS=5] [COMMITTERS=20]]
#   (no mode: both, the numbers given to restore); PROFILE=release for release figures.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
# The S3 rows read from moto (the S3-compatible server the cache's S3 test runs).
ensure_moto
export BENCH_CACHE_MOTO="$PWD/target/moto-venv/bin/moto_server"
profile=${PROFILE:-debug}
flag=()
[ "$profile" = release ] && flag=(--release)

restore() {
  bench_bin "$profile" bench_cache docs/benchmarks/cache.md "$@"
}

# before_server: the bench_cache program (its serve mode) of BENCH_CACHE_BEFORE, built in a
# clone of its own with a target dir of its own; prints its path. A revision from before
# crates/tenantci-bench has it as an example of the tenantci package.
before_server() {
  local rev dir
  rev=$(git rev-parse --short "${BENCH_CACHE_BEFORE:-abb830a}^{commit}")
  dir=$PWD/target/bench-cache-before/$rev
  if [ ! -d "$dir/src" ]; then
    git clone -q --no-checkout "$PWD" "$dir/src"
    git -C "$dir/src" checkout -q "$rev"
  fi
  if [ -d "$dir/src/crates/tenantci-bench" ]; then
    (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build --locked --quiet "${flag[@]}" \
      -p tenantci-bench --bin bench_cache) >&2
    echo "$dir/target/$profile/bench_cache"
  else
    (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build --locked --quiet "${flag[@]}" \
      --example bench_cache) >&2
    echo "$dir/target/$profile/examples/bench_cache"
  fi
}

commit() {
  local before target="${CARGO_TARGET_DIR:-target}" table
  before=$(before_server)
  cargo build --locked --quiet "${flag[@]}" -p tenantci-bench --bin bench_cache --bin bench_cache_commit
  table=$("$target/$profile/bench_cache_commit" "$before" \
    "$target/$profile/bench_cache" "$@")
  echo "$table"
  put_table docs/benchmarks/cache.md bench-cache-commit "$table"
}

case "${1:-}" in
  restore) shift; restore "$@" ;;
  commit) shift; commit "$@" ;;
  *) restore "$@"; commit ;;
esac
