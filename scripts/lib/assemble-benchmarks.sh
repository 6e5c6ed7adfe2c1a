#!/usr/bin/env bash
# Assembles docs/benchmarks.md from the per-benchmark tables in docs/benchmarks/*.md, in file
# name order, except that a section continuing another is placed right after it (AFTER).
set -euo pipefail
cd "$(dirname "$0")/../.."
# What identity adds to a VM start reads as the sequel of the identity benchmark.
declare -A AFTER=([vm-svid]=identity)
section() {
  cat "$1"
  echo
}
{
  echo "# Benchmarks"
  echo
  echo "Every figure here was measured on the project's 2-core machines by the script named in"
  echo "its section, against a baseline run in the same process or script. Re-run with"
  echo "\`scripts/bench.sh\` (all) or \`scripts/bench.sh NAME\`; each run rewrites its section."
  echo
  for f in docs/benchmarks/*.md; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .md)
    # A sequel waits for its section (placed where its name sorts if that one is missing).
    [ -z "${AFTER[$name]:-}" ] || [ ! -e "docs/benchmarks/${AFTER[$name]}.md" ] || continue
    section "$f"
    for sequel in "${!AFTER[@]}"; do
      if [ "${AFTER[$sequel]}" = "$name" ] && [ -e "docs/benchmarks/$sequel.md" ]; then
        section "docs/benchmarks/$sequel.md"
      fi
    done
  done
} > docs/benchmarks.md
echo "wrote docs/benchmarks.md" >&2
