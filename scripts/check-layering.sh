#!/usr/bin/env bash
# The crate graph is the architecture (docs/architecture.md): fails when a crate's normal
# (non-dev) dependencies include what its layer must not use, or when a module of
# tenantci-dispatch imports one on its own or a higher floor (scripts/lib/module_layers.py). Manifests are the only way to add
# a dependency, so this catches a manifest change that breaks the layering, at review speed
# (`cargo tree` reads Cargo.lock; nothing is compiled).
#
# LAYERING_LOCK (default --locked) replaces the lock flag: the layering test breaks a rule in a
# scratch copy of the manifests, which changes the lock, and runs this with --offline.
# FORBIDDEN_PROVIDERS (default: aws-lc-rs aws-lc-sys openssl-sys) lists the crypto crates that
# may not be linked anywhere; the test sets it to a crate that is there, since a manifest that
# brings aws-lc-rs back cannot be resolved offline on a machine that never downloaded it.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${LAYERING_LOCK:---locked}

# present DEPS NAME...: prints each NAME that is a line of DEPS (crate names, one a line).
present() {
  local deps=$1
  shift
  for name in "$@"; do grep -qx "$name" <<<"$deps" && echo "$name"; done
  return 0
}

# names CARGO-TREE-FLAGS...: the crate names of a `cargo tree`, one a line.
names() { cargo tree "$lock" "$@" --prefix none | awk '{print $1}' | sort -u; }

# forbid PACKAGE [FLAGS...] -- NAME...: PACKAGE's normal dependency tree contains none of NAME.
forbid() {
  local pkg=$1 flags=() found
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  found=$(present "$(names -p "$pkg" "${flags[@]}" -e normal)" "$@")
  for name in $found; do
    echo "layering: $pkg depends on $name (docs/architecture.md says it may not)" >&2
  done
  [ -z "$found" ]
}

# forbid_anywhere NAME...: nothing the workspace builds (tests and build scripts included) uses
# NAME. For the crypto provider: ring is the only one (docs/architecture.md); a second one
# costs every cold build its C compile (aws-lc-sys: ~90 s and cmake) and makes rustls refuse to
# pick a default.
forbid_anywhere() {
  local found
  found=$(present "$(names --workspace -e normal,build,dev)" "$@")
  for name in $found; do
    echo "layering: the workspace links $name, a second crypto provider (ring is the one; docs/architecture.md)" >&2
  done
  [ -z "$found" ]
}

status=0
# shellcheck disable=SC2086 # a list of names
forbid_anywhere ${FORBIDDEN_PROVIDERS:-aws-lc-rs aws-lc-sys openssl-sys} || status=1
forbid tenantci-core -- clap async-nats tenantci-runner tenantci-dispatch tenantci-sim tenantci-testkit || status=1
# The GitLab side, credentials and tenant RBAC: no queue, no dispatcher.
forbid tenantci-runner -- clap async-nats tenantci-dispatch tenantci-sim tenantci-testkit || status=1
forbid tenantci-dispatch -- clap tenantci-sim tenantci-testkit || status=1
forbid tenantci-sim -- clap tenantci-runner tenantci-dispatch tenantci-testkit || status=1
forbid tenantci --no-default-features -- tenantci-sim tenantci-testkit || status=1
forbid tenantci -- tenantci-testkit || status=1
# Inside tenantci-dispatch, modules have floors too (crates/tenantci-dispatch/layers.txt): every
# import points down, and no files import each other in a circle.
python3 scripts/lib/module_layers.py crates/tenantci-dispatch/src crates/tenantci-dispatch/layers.txt || status=1
[ $status = 0 ] && echo "layering: ok" >&2
exit $status
