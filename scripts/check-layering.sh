#!/usr/bin/env bash
# The crate graph is the architecture (docs/architecture.md): fails when a crate's normal
# (non-dev) dependencies include what its layer must not use. Manifests are the only way to add
# a dependency, so this catches a manifest change that breaks the layering, at review speed
# (`cargo tree` reads Cargo.lock; nothing is compiled).
#
# LAYERING_LOCK (default --locked) replaces the lock flag: the layering test breaks a rule in a
# scratch copy of the manifests, which changes the lock, and runs this with --offline.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${LAYERING_LOCK:---locked}

# forbid PACKAGE [FLAGS...] -- NAME...: PACKAGE's normal dependency tree contains none of NAME.
forbid() {
  local pkg=$1 flags=() bad=0
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  local deps
  deps=$(cargo tree "$lock" -p "$pkg" "${flags[@]}" -e normal --prefix none | awk '{print $1}' | sort -u)
  for name in "$@"; do
    if grep -qx "$name" <<<"$deps"; then
      echo "layering: $pkg depends on $name (docs/architecture.md says it may not)" >&2
      bad=1
    fi
  done
  return $bad
}

status=0
forbid tenantci-core -- clap async-nats tenantci-app tenantci-dispatch tenantci-sim tenantci-testkit || status=1
# The GitLab side, credentials and tenant RBAC: no queue, no dispatcher.
forbid tenantci-app -- clap async-nats tenantci-dispatch tenantci-sim tenantci-testkit || status=1
forbid tenantci-dispatch -- clap tenantci-sim tenantci-testkit || status=1
forbid tenantci-sim -- clap tenantci-app tenantci-dispatch tenantci-testkit || status=1
forbid tenantci --no-default-features -- tenantci-sim tenantci-testkit || status=1
forbid tenantci -- tenantci-testkit || status=1
[ $status = 0 ] && echo "layering: ok" >&2
exit $status
