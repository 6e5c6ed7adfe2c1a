#!/usr/bin/env bash
# How long the suite takes a newcomer and CI (docs/benchmarks/suite.md, issue 32), one column
# per revision: a cold `.ci/run` (scripts/test.sh, then the image check; before issue 32 the
# image check was inside scripts/test.sh) in a fresh clone, split into its phases, then
# scripts/test.sh again after touching one file of the dispatcher (the warm re-run).
#
# Usage: scripts/bench-suite.sh [REV ...]      e.g. scripts/bench-suite.sh 6c3498e HEAD
# Each revision is cloned into a scratch directory with an empty target dir; the cargo registry
# cache is shared, so "cold" means every crate compiled, nothing downloaded. Run it on an
# otherwise idle machine. Prints the table; BENCH_KEEP=1 keeps the clones and their logs.
# SUITE_TESTS_ONLY=1 runs scripts/test.sh instead of .ci/run (no image check: the cold test
# suite alone, about 10 minutes a revision) and skips the warm re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
repo=$PWD
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tenantci-bench-suite.XXXXXX")
[ -n "${BENCH_KEEP:-}" ] || trap 'rm -rf "$scratch"' EXIT

# stamped LOG CMD...: CMD's output, each line prefixed with the seconds since it started.
stamped() {
  local log=$1 start
  shift
  start=$(date +%s)
  "$@" 2>&1 | while IFS= read -r line; do echo "$(($(date +%s) - start)) $line"; done >"$log"
  echo "$(($(date +%s) - start)) ==> end rc=${PIPESTATUS[0]}" >>"$log"
}

# at LOG PATTERN: the second of the first line matching PATTERN.
at() { grep -E -m1 "^[0-9]+ .*$2" "$1" | awk '{print $1}'; }

declare -A R
for rev in "${revs[@]}"; do
  short=$(git rev-parse --short "$rev^{commit}")
  dir=$scratch/$short
  git clone -q "$repo" "$dir"
  git -C "$dir" checkout -q "$short"
  entry=.ci/run
  [ -z "${SUITE_TESTS_ONLY:-}" ] || entry=scripts/test.sh
  log "$rev: cold $entry"
  (cd "$dir" && stamped "$scratch/$short-ci.log" bash "$entry")
  ci=$scratch/$short-ci.log
  lint=$(at "$ci" '==> (cargo clippy|build every target)')
  tests=$(at "$ci" '==> tests')
  start=$(at "$ci" 'Starting [0-9]+ tests')
  image=$(at "$ci" '==> (the OCI image|end)')
  end=$(at "$ci" '==> end')
  R[$rev,name]="$rev ($short)"
  R[$rev,lint]=$((tests - lint))
  R[$rev,build]=$((start - tests))
  R[$rev,run]=$((image - start))
  R[$rev,test]=$image
  R[$rev,image]=$((end - image))
  R[$rev,ci]=$end
  R[$rev,summary]=$(grep -oE '[0-9]+ tests run: [0-9]+ passed' "$ci" | tail -1)
  [ -z "${SUITE_TESTS_ONLY:-}" ] || continue
  log "$rev: scripts/test.sh after touching the dispatcher"
  touch "$dir/crates/tenantci-dispatch/src/lib.rs"
  (cd "$dir" && stamped "$scratch/$short-warm.log" bash scripts/test.sh)
  warm=$scratch/$short-warm.log
  # Before issue 32 scripts/test.sh also ran the image check; the warm figure stops before it.
  R[$rev,warm]=$(at "$warm" '==> (the OCI image|end)')
  R[$rev,warmbuild]=$(($(at "$warm" 'Starting [0-9]+ tests') - $(at "$warm" '==> (cargo clippy|build every target)')))
done

row() {
  local line="| $1 |"
  for rev in "${revs[@]}"; do line+=" ${R[$rev,$2]:-} |"; done
  echo "$line"
}
header="| figure |"
rule="|---|"
for rev in "${revs[@]}"; do header+=" ${R[$rev,name]} |"; rule+="---:|"; done
echo "$header"
echo "$rule"
row 'cold `scripts/test.sh` (s)' test
row '... clippy, or the build that runs clippy (s)' lint
row '... test build left after it (s)' build
row '... tests (s)' run
row 'the image check (s)' image
row 'cold `.ci/run` (s)' ci
row 'tests run' summary
row '`scripts/test.sh` after touching the dispatcher (s)' warm
row '... of which clippy and the build (s)' warmbuild
