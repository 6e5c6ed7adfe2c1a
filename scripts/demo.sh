#!/usr/bin/env bash
# The main job on one machine: a local gateway (`tenantci sim`) with a tenant cluster whose
# nodes are rented on demand, `tenantci bootstrap runner` from the cluster name to a GitLab
# runner config, the runner's view with kubectl (what it may and may not do, a job-sized pod
# starting), an idempotent re-run, and the hand-back. Everything lives under a temporary
# directory removed at the end (KEEP=1 keeps it); the simulator is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust
ensure_kubectl

log "building tenantci"
cargo build --locked --quiet --bin tenantci
tenantci="$PWD/target/debug/tenantci"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/tenantci-demo.XXXXXX")
sim_pid=""
cleanup() {
  if [ -n "$sim_pid" ]; then kill -TERM "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; fi
  if [ "${KEEP:-0}" = 1 ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
state="$work/state"
creds="$work/etc/gitlab-runner/tenant-ci"
config="$work/etc/gitlab-runner/config.toml"

log "1. check the host before booting anything (runbook §3)"
mkdir -p -m 0700 "$state"
"$tenantci" check-host --role gateway --state-dir "$state" --min-free-gib 1 || true

log "2. start a local gateway: tenant cluster 'ci', nodes rented on demand"
exec 3< <(exec "$tenantci" sim --state-dir "$state" --cluster ci ${SIM_FLAGS:-} 2>"$work/sim.log")
sim_pid=$!
read -r ready <&3 || { echo "the simulator did not start:" >&2; cat "$work/sim.log" >&2; exit 3; }
admin="$state/admin.kubeconfig"
kubectl --kubeconfig "$admin" --cache-dir "$work/kcache" get clusters
url=$(kubectl --kubeconfig "$admin" --cache-dir "$work/kcache" get cluster ci -o jsonpath='{.status.url}')
echo "tenant apiserver: $url"

log "3. bootstrap the GitLab runner (credential, RBAC, verification, sizing, pre-warm, config.toml)"
mkdir -p "$(dirname "$config")"
printf 'glrt-demo-token\n' > "$work/runner.token" && chmod 600 "$work/runner.token"
bootstrap() {
  "$tenantci" bootstrap runner --forge gitlab --state-dir "$state" --cluster ci \
    --credential-dir "$creds" --config "$config" \
    --gitlab-url https://gitlab.example.com --runner-token-file "$work/runner.token" \
    --cpu-request 500m --memory-request 512Mi --prewarm 1 "$@"
}
bootstrap

log "4. the runner's view, with exactly the files config.toml names"
rk() {
  kubectl --server "$url" --certificate-authority "$creds/ca.crt" \
    --client-certificate "$creds/tls.crt" --client-key "$creds/tls.key" \
    --cache-dir "$work/kcache-runner" "$@"
}
for check in "create pods -n gitlab-runner" "create pods/exec -n gitlab-runner" \
             "get secrets -n kube-system" "create clusterrolebindings"; do
  # shellcheck disable=SC2086
  printf '  can-i %-36s %s\n' "$check" "$(rk auth can-i $check 2>/dev/null || true)"
done
rk run job-1 -n gitlab-runner --image registry.k8s.io/pause:3.10 --restart Never \
  --overrides '{"spec":{"containers":[{"name":"job-1","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"500m","memory":"512Mi"}}}]}}' >/dev/null
rk wait -n gitlab-runner --for=jsonpath='{.status.phase}'=Running pod/job-1 --timeout=120s
rk get pods -n gitlab-runner -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,PRIORITY:.spec.priorityClassName

log "5. run it again: nothing changes"
bootstrap

log "done: point gitlab-runner at $config on this host (docs/runbooks/gitlab-runner.md)"
