#!/usr/bin/env bash
# The main job on one machine: a local gateway (`tenantci sim`) with a tenant cluster whose
# nodes are rented on demand, `tenantci bootstrap runner` from the cluster name to a GitLab
# runner config (the runner created at the testkit's GitLab double, run as
# crates/tenantci/examples/gitlab_double.rs), the runner's view with kubectl (what it may and
# may not do, a job-sized pod starting), an idempotent re-run, `runner status` and
# `runner explain` on a job whose tag the runner lacks, and the hand-back. Then one Gitea task through the
# dispatcher: the simulator's Gitea double, a real nats-server, `tenantci dispatch init` and
# `dispatch run`, and an executor played from the executor Secret's files
# (crates/tenantci/examples/demo_executor.rs). Everything lives under a temporary directory removed at the end
# (KEEP=1 keeps it); the simulator, the dispatcher and nats-server are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust
ensure_kubectl
ensure_nats_server
ensure_jq

log "building tenantci"
cargo build --locked --quiet --bin tenantci --example demo_executor --example gitlab_double
target="${CARGO_TARGET_DIR:-$PWD/target}"
tenantci="$target/debug/tenantci"
demo_executor="$target/debug/examples/demo_executor"
gitlab_double="$target/debug/examples/gitlab_double"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/tenantci-demo.XXXXXX")
sim_pid=""
dispatch_pid=""
proxy_pid=""
nats_pid=""
gitlab_pid=""
stop() { # SIGTERM one process this script started, and wait for it
  if [ -n "$1" ]; then kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; fi
}
cleanup() {
  stop "$proxy_pid"
  stop "$dispatch_pid"
  stop "$nats_pid"
  stop "$sim_pid"
  stop "$gitlab_pid"
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
exec 3< <(exec "$tenantci" sim --state-dir "$state" --cluster ci --gitea --opensandbox ${SIM_FLAGS:-} 2>"$work/sim.log")
sim_pid=$!
read -r ready <&3 || { echo "the simulator did not start:" >&2; cat "$work/sim.log" >&2; exit 3; }
admin="$state/admin.kubeconfig"
kubectl --kubeconfig "$admin" --cache-dir "$work/kcache" get clusters
url=$(kubectl --kubeconfig "$admin" --cache-dir "$work/kcache" get cluster ci -o jsonpath='{.status.url}')
echo "tenant apiserver: $url"

log "3. bootstrap the GitLab runner (credential, RBAC, verification, sizing, pre-warm, config.toml)"
mkdir -p "$(dirname "$config")"
# GitLab is the testkit's double: the runner is created there through its REST API.
exec 4< <(exec "$gitlab_double" "$work" 2>"$work/gitlab.log")
gitlab_pid=$!
read -r gitlab_ready <&4 || { echo "the GitLab double did not start:" >&2; cat "$work/gitlab.log" >&2; exit 3; }
gitlab_url=$(jq -r .url <<<"$gitlab_ready")
gitlab_admin=$(jq -r .admin <<<"$gitlab_ready")
echo "GitLab double: $gitlab_url"
bootstrap() {
  "$tenantci" bootstrap runner --forge gitlab --state-dir "$state" --cluster ci \
    --credential-dir "$creds" --config "$config" \
    --gitlab-url "$gitlab_url" --gitlab-api-token-file "$work/gitlab-create.token" \
    --runner-type instance_type --tag-list pod \
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
# A job Pod as gitlab-runner 15.9+ creates it: its GitLab job in the annotations.
rk run job-1 -n gitlab-runner --image registry.k8s.io/pause:3.10 --restart Never \
  --overrides '{"metadata":{"annotations":{"job.runner.gitlab.com/id":"1000","job.runner.gitlab.com/name":"build","job.runner.gitlab.com/ref":"main","project.runner.gitlab.com/id":"42"}},"spec":{"containers":[{"name":"job-1","image":"registry.k8s.io/pause:3.10","resources":{"requests":{"cpu":"500m","memory":"512Mi"}}}]}}' >/dev/null
rk wait -n gitlab-runner --for=jsonpath='{.status.phase}'=Running pod/job-1 --timeout=120s
rk get pods -n gitlab-runner -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,PRIORITY:.spec.priorityClassName

log "5. run it again: nothing changes"
bootstrap

log "5b. what the runner runs, and why a job whose tag it lacks is pending (runbook: \"A job is pending\")"
# gitlab-runner's poll (its job request) is what GitLab counts as the runner's contact.
token=$(sed -n 's/^ *token = "\(glrt-[^"]*\)"$/\1/p' "$config")
# From the environment, not jq's argv: a token on a command line is visible in ps.
GLRT="$token" jq -n '{token: env.GLRT, system_id: "s_000000000001", info: {version: "18.10.0"}}' |
  curl -fsS -o /dev/null -H 'content-type: application/json' "$gitlab_url/api/v4/jobs/request" -d @-
unset token
"$tenantci" runner status --config "$config" --gitlab-api-token-file "$work/gitlab-read.token"
job_url=$(curl -fsS -H 'content-type: application/json' "$gitlab_admin/jobs" \
  -d '{"id": 1001, "name": "build", "ref": "main", "tags": ["gpu"]}' | jq -r .web_url)
rc=0
"$tenantci" runner explain "$job_url" --config "$config" \
  --gitlab-api-token-file "$work/gitlab-read.token" || rc=$?
[ "$rc" = 1 ] || { echo "runner explain exited $rc, not 1 (the job waits for its tag)" >&2; exit 1; }

log "GitLab part done: point gitlab-runner at $config on this host (docs/runbooks/gitlab-runner.md)"

log "6. Gitea: one task through the dispatcher (docs/runbooks/gitea-dispatcher.md)"
free_port() { # a loopback port nothing listens on
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }
  done
}
gitea_url=$(jq -r .url "$state/gitea.json")
gitea_admin=$(jq -r .adminUrl "$state/gitea.json")
echo "Gitea double: $gitea_url (admin API $gitea_admin)"
nats_dir="$work/nats"
mkdir -p -m 0700 "$nats_dir"
"$tenantci" queue nats-config --secrets-dir "$nats_dir/secrets" --out "$nats_dir/auth.conf"
nats_url="nats://127.0.0.1:$(free_port)"
cat > "$nats_dir/nats-server.conf" <<CONF
listen: "${nats_url#nats://}"
jetstream { store_dir: "$nats_dir/jetstream" }
include ./auth.conf
CONF
nats-server -c "$nats_dir/nats-server.conf" -l "$nats_dir/nats.log" &
nats_pid=$!
for _ in $(seq 100); do grep -q 'Server is ready' "$nats_dir/nats.log" 2>/dev/null && break; sleep 0.1; done
grep -q 'Server is ready' "$nats_dir/nats.log" || { echo "nats-server did not start:" >&2; cat "$nats_dir/nats.log" >&2; exit 3; }
echo "nats-server at $nats_url (JetStream under $nats_dir/jetstream)"
"$tenantci" queue init --nats "$nats_url" --user ci-admin \
  --password-file "$nats_dir/secrets/ci-admin.password" --pod-capacity 2

# The registration token goes through a 0600 file, never argv.
(umask 077; jq -r .registrationToken "$state/gitea.json" > "$work/gitea-registration-token")
dispatch_dir="$work/etc/tenantci/dispatch"
# The workflow_job webhook's secret, as it would be typed into Gitea's webhook settings.
(umask 077; head -c 24 /dev/urandom | base64 > "$work/webhook.secret")
# The simulator has no kubelet: the image is never pulled, but it must be pinned by digest.
"$tenantci" dispatch init --gitea-url "$gitea_url" \
  --registration-token-file "$work/gitea-registration-token" \
  --state-dir "$state" --cluster ci --namespace dynamic-runner \
  --nats "$nats_url" --nats-secrets-dir "$nats_dir/secrets" --pod-capacity 2 \
  --facade-listen 127.0.0.1:0 \
  --webhook-listen 127.0.0.1:0 --webhook-secret-file "$work/webhook.secret" \
  --labels self-hosted,pod,vm --vm-capacity 1 \
  --opensandbox-url "$(jq -r .url "$state/opensandbox.json")" \
  --opensandbox-api-key-file "$(jq -r .apiKeyFile "$state/opensandbox.json")" \
  --executor-image gitea/act_runner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
  --proxy-image tenantci@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
  --out "$dispatch_dir/config.toml"
rm -f "$work/gitea-registration-token"

# Port 0: the dispatcher picks free ports and prints them in one JSON line on stdout; the
# executors are given the facade's bound port.
TENANTCI_DISPATCH_STATUS_LISTEN=127.0.0.1:0 \
  "$tenantci" -v dispatch run --config "$dispatch_dir/config.toml" >"$work/dispatch.out" 2>"$work/dispatch.log" &
dispatch_pid=$!
for _ in $(seq 100); do [ -s "$work/dispatch.out" ] && break; sleep 0.2; done
[ -s "$work/dispatch.out" ] || { echo "the dispatcher did not start:" >&2; cat "$work/dispatch.log" >&2; exit 3; }
status=$(jq -r .status "$work/dispatch.out")
echo "dispatcher listening: $(jq -c 'del(.type)' "$work/dispatch.out")"
for _ in $(seq 100); do curl -fsS "http://$status/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://$status/readyz" >/dev/null || { echo "the dispatcher is not ready:" >&2; cat "$work/dispatch.log" >&2; exit 3; }
echo "dispatcher up (pid $dispatch_pid), leader, status API on $status"
grep -o 'FetchTask rate: [^"]*' "$work/dispatch.log" | head -1 || true
# The Gitea double delivers workflow_job webhooks, signed as Gitea signs them, to the
# receiver: the job below is picked up by that nudge, not by the 5 s safety-net poll.
webhook=$(jq -r .webhook "$work/dispatch.out")
jq -n --arg url "http://$webhook/webhooks/gitea" --arg secret "$(cat "$work/webhook.secret")" \
  '{url: $url, secret: $secret}' | curl -fsS -H 'content-type: application/json' "$gitea_admin/hooks" -d @- >/dev/null
echo "webhook registered at the Gitea double: http://$webhook/webhooks/gitea (event workflow_job)"

job=$(curl -fsS -H 'content-type: application/json' "$gitea_admin/jobs" -d @- <<'JOB' | jq -r .job_id
{"name": "demo",
 "runs_on": ["self-hosted", "pod"],
 "workflow_payload": "name: demo\njobs:\n  test:\n    runs-on: [self-hosted, pod]\n    steps:\n      - run: make test\n",
 "secrets": {"DEPLOY_KEY": "demo-secret-never-in-clear"}}
JOB
)
echo "enqueued job $job at the Gitea double"
task=""
for _ in $(seq 100); do
  task=$(curl -fsS "$gitea_admin/jobs/$job" | jq -r '.task_id // empty')
  [ -n "$task" ] && break
  sleep 0.1
done
[ -n "$task" ] || { echo "the dispatcher did not claim job $job" >&2; exit 1; }
echo "the dispatcher claimed it as task $task ($(curl -fsS "$gitea_admin/jobs/$job" | jq -r .created_at) created)"
curl -fsS "http://$status/metrics" | grep '^tenantci_dispatch_webhook_deliveries_total' || true
tk() { kubectl --kubeconfig "$state/clusters/ci/tenant-admin.kubeconfig" --cache-dir "$work/kcache" -n dynamic-runner "$@"; }
tk wait --for=create "secret/gitea-task-$task" --timeout=60s
tk wait --for=create "pod/gitea-task-$task" --timeout=60s
tk get pods,secrets -l app.kubernetes.io/component=gitea-executor
echo "what the dispatcher holds (tenantci dispatch status; the same as a page at http://$status/):"
"$tenantci" dispatch status --status-address "$status" -o wide
echo "why a job with a mistyped label would wait (tenantci dispatch explain; exit 1 = it waits):"
"$tenantci" dispatch explain --status-address "$status" --runs-on self-hosted,podd || true

# Play the Pod: its executor-proxy sidecar with the Pod's own flags (on a free port), and the
# official runner from the Secret's `.runner`, talking plain HTTP to the proxy.
exec_dir="$work/executor"
(umask 077; mkdir -p "$exec_dir"
 tk get secret "gitea-task-$task" -o jsonpath='{.data.\.runner}' | base64 -d > "$exec_dir/.runner"
 tk get secret "gitea-task-$task" -o jsonpath='{.data.ca\.crt}' | base64 -d > "$exec_dir/ca.crt")
facade_url=$(tk get pod "gitea-task-$task" -o json \
  | jq -r '.spec.initContainers[] | select(.name == "executor-proxy") | .command as $c
           | $c[($c | index("--facade-url")) + 1]')
"$tenantci" executor-proxy --listen 127.0.0.1:0 --facade-url "$facade_url" \
  --facade-ca "$exec_dir/ca.crt" > "$work/proxy.out" 2> "$work/proxy.log" &
proxy_pid=$!
for _ in $(seq 100); do grep -q '^listening ' "$work/proxy.out" 2>/dev/null && break; sleep 0.1; done
proxy_url=$(sed -n 's/^listening //p' "$work/proxy.out")
[ -n "$proxy_url" ] || { echo "executor-proxy did not start" >&2; cat "$work/proxy.log" >&2; exit 1; }
echo "executor-proxy (the Pod's sidecar) on $proxy_url -> $facade_url"
"$demo_executor" "$exec_dir/.runner" "$proxy_url"
stop "$proxy_pid"; proxy_pid=""

echo "the task at the Gitea double:"
curl -fsS "$gitea_admin/tasks/$task" | jq -c '{id, state, result, logs}'
tk wait --for=delete "pod/gitea-task-$task" "secret/gitea-task-$task" --timeout=60s
echo "executor Pod and Secret deleted by the dispatcher:"
tk get pods,secrets -l app.kubernetes.io/component=gitea-executor 2>&1
echo "dispatcher metrics:"
curl -fsS "http://$status/metrics" | grep -E '^tenantci_dispatch_(tasks_|leader|capacity|queue_depth|in_use)' || true
grep -E 'claimed and queued|executor started|task done' "$work/dispatch.log" || true

log "7. a vm task: an OpenSandbox sandbox instead of a Pod (the simulator's Lifecycle API double)"
sandbox_admin=$(jq -r .adminUrl "$state/opensandbox.json")
vm_job=$(curl -fsS -H 'content-type: application/json' "$gitea_admin/jobs" -d @- <<'JOB' | jq -r .job_id
{"name": "demo-vm",
 "runs_on": ["self-hosted", "vm"],
 "workflow_payload": "name: demo-vm\njobs:\n  test:\n    runs-on: [self-hosted, vm]\n    steps:\n      - run: make test\n",
 "secrets": {"DEPLOY_KEY": "demo-secret-never-in-clear"}}
JOB
)
vm_task=""
for _ in $(seq 100); do
  vm_task=$(curl -fsS "$gitea_admin/jobs/$vm_job" | jq -r '.task_id // empty')
  [ -n "$vm_task" ] && break
  sleep 0.1
done
[ -n "$vm_task" ] || { echo "the dispatcher did not claim vm job $vm_job" >&2; exit 1; }
sandbox=""
for _ in $(seq 100); do
  sandbox=$(curl -fsS "$sandbox_admin/sandboxes" \
    | jq -c --arg t "$vm_task" 'map(select(.metadata["tenantci.io/task-id"] == $t)) | first // empty')
  [ -n "$sandbox" ] && break
  sleep 0.1
done
[ -n "$sandbox" ] || { echo "no sandbox for vm task $vm_task" >&2; exit 1; }
echo "task $vm_task runs in sandbox $(jq -r .id <<<"$sandbox"): image $(jq -r .image.uri <<<"$sandbox"), metadata $(jq -c .metadata <<<"$sandbox")"
# Play the sandbox's boot script: its files from the env (0600), executor-proxy, the runner.
vm_dir="$work/vm-executor"
(umask 077; mkdir -p "$vm_dir"
 jq -r '.env.TENANTCI_RUNNER' <<<"$sandbox" > "$vm_dir/.runner"
 jq -r '.env.TENANTCI_FACADE_CA' <<<"$sandbox" > "$vm_dir/ca.crt")
"$tenantci" executor-proxy --listen 127.0.0.1:0 --facade-url "$(jq -r .env.TENANTCI_FACADE_URL <<<"$sandbox")" \
  --facade-ca "$vm_dir/ca.crt" > "$work/vm-proxy.out" 2> "$work/vm-proxy.log" &
proxy_pid=$!
for _ in $(seq 100); do grep -q '^listening ' "$work/vm-proxy.out" 2>/dev/null && break; sleep 0.1; done
proxy_url=$(sed -n 's/^listening //p' "$work/vm-proxy.out")
[ -n "$proxy_url" ] || { echo "executor-proxy did not start" >&2; cat "$work/vm-proxy.log" >&2; exit 1; }
"$demo_executor" "$vm_dir/.runner" "$proxy_url"
stop "$proxy_pid"; proxy_pid=""
curl -fsS "$gitea_admin/tasks/$vm_task" | jq -c '{id, state, result, logs}'
for _ in $(seq 100); do
  [ "$(curl -fsS "$sandbox_admin/sandboxes" | jq length)" = 0 ] && break
  sleep 0.1
done
[ "$(curl -fsS "$sandbox_admin/sandboxes" | jq length)" = 0 ] || { echo "the sandbox was not deleted" >&2; exit 1; }
echo "sandbox deleted by the dispatcher after the final state; OpenSandbox: $(curl -fsS "$sandbox_admin/stats" | jq -c '{created, deleted, live}')"
curl -fsS "http://$status/metrics" | grep -E '^tenantci_dispatch_tasks_(claimed|completed|failed)_total' || true

log "8. SIGTERM the dispatcher (it drains and releases the lease), stop nats-server"
kill -TERM "$dispatch_pid"
if wait "$dispatch_pid"; then echo "dispatcher drained and exited 0"; else rc=$?; echo "the dispatcher exited $rc:" >&2; tail -20 "$work/dispatch.log" >&2; exit 1; fi
dispatch_pid=""
stop "$nats_pid"
nats_pid=""

log "done: GitLab runner config at $config; Gitea tasks went claim -> queue -> executor Pod / VM sandbox -> facade -> SUCCESS"
