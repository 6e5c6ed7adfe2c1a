#!/usr/bin/env bash
# Queue benchmark: the capped consumer vs raw async-nats JetStream, side by side in one run on
# one loopback nats-server (started by the bench with the generated config). Prints the table and
# writes it into docs/benchmarks/queue.md between the markers.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust
ensure_nats_server
n="${1:-5000}"
table=$(cargo run --quiet --release --example bench_queue -- "$n")
echo "$table"
doc=docs/benchmarks/queue.md
if [ -f "$doc" ] && grep -q '<!-- bench-queue:begin -->' "$doc"; then
  python3 - "$doc" "$table" <<'PY'
import sys
path, table = sys.argv[1], sys.argv[2]
s = open(path).read()
a = s.index("<!-- bench-queue:begin -->") + len("<!-- bench-queue:begin -->")
b = s.index("<!-- bench-queue:end -->")
open(path, "w").write(s[:a] + "\n" + table + "\n" + s[b:])
PY
fi
