#!/usr/bin/env bash
# Build figures of fresh clones, one column per revision (default: HEAD), written to
# docs/benchmarks/build.md: cold `scripts/test.sh` wall time, the critical path of a cold
# `cargo build --timings`, `cargo test --no-run` after touching one file in dispatch, the
# simulator and pki (and which workspace crates it recompiled), and the release binary's size
# with and without the `sim` feature.
#
# Usage: scripts/bench-build.sh [REV ...]     e.g. scripts/bench-build.sh 8935caa HEAD
# BENCH_BUILD_QUICK=1 measures the builds alone (a cold `cargo test --no-run`, then the three
# incremental ones), leaving out the cold `scripts/test.sh`, the `--timings` build and the
# release binaries: minutes instead of an hour a revision on 2 cores.
# Each revision is cloned into a scratch directory with an empty target dir; the cargo registry
# cache (~/.cargo) is shared, so "cold" means every crate compiled, nothing downloaded. Run it on
# an otherwise idle machine: other builds on the same 2 cores inflate every figure. A
# revision's figures are kept in target/bench-build/<commit>.txt, so a later run that names it
# again (the baseline) reuses them; delete the file to measure it again.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
. scripts/lib/put-table.sh
ensure_rust
repo=$PWD
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tenantci-bench-build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# seconds LOG CMD...: runs CMD with its output in LOG; prints the wall time in seconds.
seconds() {
  local log=$1 s e
  shift
  s=$(date +%s.%N)
  "$@" >"$log" 2>&1
  e=$(date +%s.%N)
  python3 -c "print(f'{$e - $s:.0f}')"
}

# The first existing path: the layout moved from src/ to crates/ (issue 13).
first() { for p in "$@"; do [ -e "$p" ] && { echo "$p"; return; }; done; echo "$1"; }

# recompiled LOG: the workspace crates a rebuild compiled, or "none".
recompiled() {
  local crates
  crates=$(grep -oE 'Compiling tenantci[a-z-]*' "$1" | awk '{print $2}' | sort -u | paste -sd' ')
  echo "${crates:-none}"
}

quick=${BENCH_BUILD_QUICK:-}
declare -A R
cache=$repo/target/bench-build
mkdir -p "$cache"
for rev in "${revs[@]}"; do
  short=$(git rev-parse --short "$rev^{commit}")
  R[$rev,name]="$rev ($short)"
  figures="$cache/$short${quick:+.quick}.txt"
  if [ -s "$figures" ]; then
    log "$rev: figures from $figures"
    while IFS=$'\t' read -r key value; do R[$rev,$key]=$value; done <"$figures"
    continue
  fi
  dir="$scratch/$rev"
  log "cloning $rev"
  git clone -q "$repo" "$dir"
  git -C "$dir" checkout -q "$rev"
  pushd "$dir" >/dev/null
  if [ -n "$quick" ]; then
    log "$rev: cold cargo test --no-run"
    R[$rev,cold]=$(seconds "$scratch/$rev-cold.log" cargo test --locked --no-run)
  else
    log "$rev: cold scripts/test.sh"
    R[$rev,test]=$(seconds "$scratch/$rev-test.log" bash scripts/test.sh)
    R[$rev,tests]=$(grep -oE '[0-9]+ tests run: [0-9]+ passed' "$scratch/$rev-test.log" | tail -1 || true)
  fi
  for area in dispatch sim pki; do
    case $area in
      dispatch) f=$(first crates/tenantci-dispatch/src/backend/worker.rs crates/tenantci-runner/src/dispatch/worker.rs src/dispatch/worker.rs) ;;
      sim) f=$(first crates/tenantci-sim/src/store.rs src/sim/store.rs) ;;
      pki) f=$(first crates/tenantci-core/src/pki/issue.rs src/pki/issue.rs) ;;
    esac
    touch "$f"
    R[$rev,$area]=$(seconds "$scratch/$rev-$area.log" cargo test --locked --no-run)
    R[$rev,$area-crates]=$(recompiled "$scratch/$rev-$area.log")
  done
  if [ -z "$quick" ]; then
    log "$rev: cold cargo build --timings"
    CARGO_TARGET_DIR="$scratch/$rev-timings" cargo build --locked --timings >"$scratch/$rev-timings.log" 2>&1
    html=$(ls "$scratch/$rev-timings"/cargo-timings/cargo-timing*.html | head -1)
    R[$rev,timings]=$(python3 "$repo/scripts/lib/critical_path.py" "$html" | sed -n 's/^timings_total //p')
    R[$rev,path]=$(python3 "$repo/scripts/lib/critical_path.py" "$html" | sed -n 's/^critical_path_ours //p')
    R[$rev,chain]=$(python3 "$repo/scripts/lib/critical_path.py" "$html" | sed -n 's/^critical_path_tail //p')
    rm -rf "$scratch/$rev-timings"
    log "$rev: release builds"
    if [ -d crates ]; then
      cargo build --locked --release -p tenantci >/dev/null 2>&1
      R[$rev,size]=$(stat -c %s target/release/tenantci)
      cargo build --locked --release -p tenantci --no-default-features >/dev/null 2>&1
      R[$rev,size-nosim]=$(stat -c %s target/release/tenantci)
    else
      cargo build --locked --release --bin tenantci >/dev/null 2>&1
      R[$rev,size]=$(stat -c %s target/release/tenantci)
      R[$rev,size-nosim]="(no feature)"
    fi
  fi
  popd >/dev/null
  rm -rf "$dir"
  for key in test tests cold timings path chain dispatch dispatch-crates sim sim-crates pki pki-crates size size-nosim; do
    printf '%s\t%s\n' "$key" "${R[$rev,$key]:-}"
  done >"$figures"
done

mib() { case $1 in "") ;; *[!0-9]*) echo "$1" ;; *) python3 -c "print(f'{$1/1048576:.1f} MiB')" ;; esac; }
row() { # row LABEL KEY [FORMAT]: a figure's row, left out when no revision measured it
  local label=$1 key=$2 line="| $1 |" measured=
  for rev in "${revs[@]}"; do
    local v=${R[$rev,$key]:-}
    [ -n "$v" ] && measured=1
    [ "${3:-}" = mib ] && v=$(mib "$v")
    line+=" ${v:-(not measured)} |"
  done
  [ -z "$measured" ] || echo "$line"
}
table=$(
  header="| figure |"; rule="|---|"
  for rev in "${revs[@]}"; do header+=" ${R[$rev,name]} |"; rule+="---:|"; done
  echo "$header"; echo "$rule"
  row "cold \`scripts/test.sh\` (s): fmt, clippy, build, tests" test
  row "tests run" tests
  row "cold \`cargo test --no-run\` (s)" cold
  row "cold \`cargo build --timings\` (s)" timings
  row "of which tenantci crates on the critical path (s)" path
  row "critical path, last units" chain
  row "\`cargo test --no-run\` after touching dispatch (s)" dispatch
  row "... crates recompiled" dispatch-crates
  row "after touching the simulator (s)" sim
  row "... crates recompiled" sim-crates
  row "after touching pki (s)" pki
  row "... crates recompiled" pki-crates
  row "release binary, default features" size mib
  row "release binary, \`--no-default-features\` (no simulator)" size-nosim mib
)
echo "$table"
mkdir -p docs/benchmarks
put_table docs/benchmarks/build.md "build${quick:+-quick}" "$table"
