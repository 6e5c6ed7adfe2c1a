#!/usr/bin/env bash
# Checks scripts/image.sh end to end (.ci/run runs it after scripts/test.sh): two builds of this commit have
# one digest; the image unpacks with umoci; `tenantci --version` runs from the unpacked root
# under chroot; the config runs as uid 65532 with entrypoint tenantci and the OCI labels; the
# root holds no shell. Cleans up everything it creates.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log "image build 1"
first=$(IMAGE_OUT="$work/one" IMAGE_SKIP_BUILD=${IMAGE_SKIP_BUILD:-0} scripts/image.sh)
log "image build 2 (same commit)"
second=$(IMAGE_OUT="$work/two" IMAGE_SKIP_BUILD=1 scripts/image.sh)
[ "$first" = "$second" ] || { echo "FAIL: two builds differ: $first vs $second" >&2; exit 1; }
echo "reproducible: $first"

umoci unpack --image "$work/one:tenantci" "$work/bundle" >/dev/null
root="$work/bundle/rootfs"
for shell in bin/sh bin/bash usr/bin/sh usr/bin/bash bin/busybox; do
  [ ! -e "$root/$shell" ] || { echo "FAIL: the image has /$shell" >&2; exit 1; }
done
if [ "$(id -u)" = 0 ]; then
  got=$(chroot --userspec=65532:65532 "$root" /usr/local/bin/tenantci --version)
  want=$(target/release/tenantci --version)
  [ "$got" = "$want" ] || { echo "FAIL: chroot run printed \`$got\`, expected \`$want\`" >&2; exit 1; }
  echo "runs: $got (chroot, uid 65532)"
else
  echo "SKIPPED: chroot run (needs root)"
fi

python3 - "$work/one" "$(git rev-parse HEAD)" <<'PY'
import json, sys
layout, revision = sys.argv[1:3]
def blob(digest):
    algo, hexd = digest.split(":")
    return json.load(open(f"{layout}/blobs/{algo}/{hexd}"))
manifest = blob(json.load(open(f"{layout}/index.json"))["manifests"][0]["digest"])
config = blob(manifest["config"]["digest"])["config"]
labels = config.get("Labels", {})
problems = []
if config.get("User") != "65532:65532":
    problems.append(f"user is {config.get('User')!r}")
if config.get("Entrypoint") != ["/usr/local/bin/tenantci"]:
    problems.append(f"entrypoint is {config.get('Entrypoint')!r}")
for key in ("source", "version", "revision"):
    if not labels.get(f"org.opencontainers.image.{key}"):
        problems.append(f"label org.opencontainers.image.{key} missing")
if labels.get("org.opencontainers.image.revision") != revision:
    problems.append("the revision label is not this commit")
if problems:
    sys.exit("FAIL: " + "; ".join(problems))
print(f"config: user {config['User']}, entrypoint {config['Entrypoint']}, labels {sorted(labels)}")
PY
