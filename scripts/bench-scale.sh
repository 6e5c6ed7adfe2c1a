#!/usr/bin/env bash
# Scale benchmark: one `tenantci dispatch run` with N = 100, 300, 1000 executors running at
# once, the baseline dispatcher (BASE, default abb830a: the pod backend LISTing every 2 s, built
# here in its own worktree and target directory) and this tree's, in one run on the same
# simulator (this tree's, which counts apiserver requests by verb) and nats-server; then the
# same with VM executors (the VM backend polling the simulator's OpenSandbox double, which counts
# its API calls by route). Prints the tables and writes them into docs/benchmarks/scale.md
# between the markers (`bench-scale` for Pods, `bench-scale-vm` for VMs).
# Usage: scripts/bench-scale.sh [--profile release-baseline] [--backends pod,vm]
#        [--sizes 100,300,1000] [--window 20]
# --profile: the cargo profile of every binary it runs (both dispatchers, the simulator and the
# players). The default, release-baseline (opt-level 3, no LTO; Cargo.toml), is what CPU and
# latency figures are quoted for; `dev` (dependencies at opt-level 0, docs/benchmarks/suite.md)
# builds faster and is pessimistic for both builds alike. A build whose burst has not reached N
# within the example's guard (300 s) is reported as the figure it reached.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh

profile=release-baseline
backends=pod,vm
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile)
      [ $# -ge 2 ] || { echo "error: --profile needs a cargo profile name (release-baseline, dev, release); nothing was built" >&2; exit 2; }
      profile=$2; shift 2 ;;
    --backends)
      [ $# -ge 2 ] || { echo "error: --backends needs a list such as pod,vm; nothing was built" >&2; exit 2; }
      backends=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
# Cargo's output directory for the profile: `dev` builds into debug/, any other into its name.
dir=$profile
[ "$profile" = dev ] && dir=debug
if ! grep -q "^\[profile\.$profile\]" Cargo.toml && [ "$profile" != dev ] && [ "$profile" != release ]; then
  echo "error: --profile $profile is not a profile of Cargo.toml; use release-baseline, dev or release (nothing was built)" >&2
  exit 2
fi

for b in ${backends//,/ }; do
  case "$b" in
    pod|vm) ;;
    *) echo "error: --backends $backends: \`$b\` is not a backend; use pod, vm or pod,vm (nothing was built)" >&2; exit 2 ;;
  esac
done

ensure_rust
ensure_nats_server

base=${BASE:-abb830a}
target="${CARGO_TARGET_DIR:-target}"
wt="$target/bench-scale-base"
if [ ! -d "$wt" ]; then
  log "baseline $base: its own worktree $wt"
  git worktree add --detach "$wt" "$base" >&2
fi
git -C "$wt" checkout --quiet --detach "$base"
log "building this tree ($profile)"
cargo build --locked --quiet --profile "$profile" -p tenantci --bin tenantci -p tenantci-bench --bin bench_scale
if [ ! -d "$wt/target/$dir" ] && [ -d "$target/$dir/deps" ]; then
  # Seeds the baseline's own target directory with the compiled dependencies (same lock file):
  # only its own crates are compiled again.
  mkdir -p "$wt/target"
  cp -a "$target/$dir" "$wt/target/$dir"
fi
log "building the baseline $base ($profile)"
# Not linted: the baseline is a past commit, measured, not shipped.
(cd "$wt" && env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_TARGET_DIR="$PWD/target" \
  cargo build --locked --quiet --profile "$profile" --bin tenantci)
for b in ${backends//,/ }; do
  log "measuring the $b backend"
  table=$("$target/$dir/bench_scale" "$target/$dir/tenantci" \
    "before ($base)=$wt/target/$dir/tenantci" "after=$target/$dir/tenantci" \
    --backend "$b" ${args[@]+"${args[@]}"})
  echo "$table"
  # Each backend and profile has its own table on the page: the Pods' release-baseline table
  # between the `bench-scale` markers, the VMs' between `bench-scale-vm`, another profile's
  # with `-PROFILE` added (left alone when the page has none).
  marker=bench-scale
  [ "$b" = pod ] || marker="$marker-$b"
  [ "$profile" = release-baseline ] || marker="$marker-$profile"
  put_table docs/benchmarks/scale.md "$marker" "$table"
done
