#!/usr/bin/env bash
# The facade's UpdateLog relay in one process (crates/tenantci-bench/src/bin/bench_relay.rs),
# the baseline's (BASE, default 1aadac4: before issue 57, its core with this tree's benchmark
# program copied in, in the scale benchmark's worktree) and this tree's, counted in
# instructions by `valgrind --tool=callgrind`: each build at CALLS_LOW and CALLS_HIGH calls,
# the slope between them the instructions per relayed call (handshakes and start-up cancel
# out). Instruction counts do not depend on what else the host runs; they weigh every
# instruction alike (a cache miss or a syscall's wait counts as nothing), so they measure the
# relay's work, not its wall time.
# Usage: scripts/bench-relay.sh [--profile release-baseline] [CALLS_LOW CALLS_HIGH] (multiples of
# 16, default 160 960)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

profile=release-baseline
if [ "${1:-}" = --profile ]; then
  [ $# -ge 2 ] || { echo "error: --profile needs a cargo profile name (release-baseline, dev); nothing was built" >&2; exit 2; }
  profile=$2; shift 2
fi
low=${1:-160}
high=${2:-960}
case "$low$high" in *[!0-9]*) echo "error: CALLS_LOW and CALLS_HIGH are numbers of calls, such as 200 1200; nothing was run" >&2; exit 2 ;; esac
[ $((low % 16)) -eq 0 ] && [ $((high % 16)) -eq 0 ] || { echo "error: CALLS_LOW and CALLS_HIGH must be multiples of 16 (the runners calling at once), such as 160 960; nothing was run" >&2; exit 2; }
[ "$low" -lt "$high" ] || { echo "error: CALLS_LOW ($low) must be below CALLS_HIGH ($high); nothing was run" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "error: valgrind is not installed (apt-get install valgrind); nothing was run" >&2; exit 2; }
dir=$profile
[ "$profile" = dev ] && dir=debug

ensure_rust
base=${BASE:-1aadac4}
target="${CARGO_TARGET_DIR:-target}"
wt="$target/bench-scale-base"
if [ ! -d "$wt" ]; then
  git worktree add --detach "$wt" "$base" >&2
fi
git -C "$wt" checkout --quiet --detach "$base"
# The baseline's core has no `update_log_received`: its relay is `update_log` alone.
sed '/issue-57:begin/,/issue-57:end/d' crates/tenantci-bench/src/bin/bench_relay.rs \
  >"$wt/crates/tenantci-bench/src/bin/bench_relay.rs"
log "building this tree's bench_relay ($profile)"
cargo build --locked --quiet --profile "$profile" -p tenantci-bench --bin bench_relay
if [ ! -d "$wt/target/$dir" ] && [ -d "$target/$dir/deps" ]; then
  mkdir -p "$wt/target" && cp -a "$target/$dir" "$wt/target/$dir"
fi
log "building the baseline's ($base)"
(cd "$wt" && env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_TARGET_DIR="$PWD/target" \
  cargo build --locked --quiet --profile "$profile" -p tenantci-bench --bin bench_relay)
rm -f "$wt/crates/tenantci-bench/src/bin/bench_relay.rs"

# Instructions of one run of BIN with CALLS calls (every thread).
instructions() {
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$1" "$2" 16 >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
  rm -f "$out"
}

echo "| build | instructions at $low calls | at $high calls | instructions per relayed UpdateLog (slope) |"
echo "|---|---|---|---|"
declare -A per
for b in "before ($base)=$wt/target/$dir/bench_relay" "after=$target/$dir/bench_relay"; do
  name=${b%%=*}; bin=${b#*=}
  a=$(instructions "$bin" "$low"); z=$(instructions "$bin" "$high")
  per[$name]=$(( (z - a) / (high - low) ))
  echo "| $name | $a | $z | ${per[$name]} |"
done
awk -v b="${per[before ($base)]}" -v a="${per[after]}" 'BEGIN { printf "after / before: %.2f\n", a / b }'
