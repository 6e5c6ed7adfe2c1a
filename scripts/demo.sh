#!/usr/bin/env bash
# The main job on one machine: a throwaway gateway state directory, a tenant cluster's PKI,
# the host checks, and a scoped runner credential with its hand-back.
# Everything happens under a temporary directory that is removed at the end
# (KEEP=1 keeps it and prints where it is).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust

log "building tenantci"
cargo build --locked --quiet --bin tenantci
tenantci="$PWD/target/debug/tenantci"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/tenantci-demo.XXXXXX")
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
state="$work/state"

log "1. a tenant cluster's PKI in the state directory (the gateway does this in production)"
"$tenantci" pki init-cluster --state-dir "$state" --cluster ci

log "2. check the host before booting anything (runbook §3)"
"$tenantci" check-host --role gateway --state-dir "$state" --min-free-gib 1 || true

log "3. mint the runner's credential with the runbook's variables (runbook §4)"
SOCIALWEB_TENANTCREDENTIAL_STATE_DIR="$state" \
SOCIALWEB_TENANTCREDENTIAL_CLUSTER=ci \
SOCIALWEB_TENANTCREDENTIAL_SERVER="https://127.0.0.1:6443" \
SOCIALWEB_TENANTCREDENTIAL_COMMON_NAME=gitlab-runner \
SOCIALWEB_TENANTCREDENTIAL_ORGANIZATIONS=gitlab-runner \
SOCIALWEB_TENANTCREDENTIAL_OUT_DIR="$work/gitlab-runner/tenant-ci" \
SOCIALWEB_TENANTCREDENTIAL_VALID_FOR=720h \
  "$tenantci" internal tenantcredential

log "4. the policy refuses a superuser credential (exit 2, nothing written)"
if "$tenantci" credential mint --state-dir "$state" --cluster ci --server https://127.0.0.1:6443 \
     --common-name gitlab-runner --organization system:masters --out-dir "$work/never"; then
  echo "unexpected: system:masters was accepted" >&2; exit 1
fi
[ ! -e "$work/never" ]

log "done: the hand-back above is what the runner configuration needs"
