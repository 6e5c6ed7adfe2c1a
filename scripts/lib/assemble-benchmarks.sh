#!/usr/bin/env bash
# Assembles docs/benchmarks.md from the per-benchmark tables in docs/benchmarks/*.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
{
  echo "# Benchmarks"
  echo
  echo "Every figure here was measured on the project's 2-core machines by the script named in"
  echo "its section, against a baseline run in the same process or script. Re-run with"
  echo "\`scripts/bench.sh\` (all) or \`scripts/bench.sh NAME\`; each run rewrites its section."
  echo
  for f in docs/benchmarks/*.md; do
    [ -e "$f" ] || continue
    cat "$f"
    echo
  done
} > docs/benchmarks.md
echo "wrote docs/benchmarks.md" >&2
