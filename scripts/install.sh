#!/usr/bin/env bash
# Installs tenantci on a gateway host: the binary (its checksum verified), the systemd units,
# shell completions and man pages. Idempotent: a file already as it should be is not touched,
# and the script prints what it changed ("nothing changed" on a second run).
#
#   scripts/install.sh [--user]
#
#   BIN      the binary to install (default target/release/tenantci, as scripts/release.sh
#            builds it); BIN.sha256 (sha256sum format) must match it.
#   DESTDIR  staging root (default /); PREFIX (default /usr/local, $HOME/.local with --user)
#            is the path the units name.
#   --user   for `systemctl --user` under a lingering account, as the runbook runs its
#            gateway: everything under $HOME (binary in $HOME/.local/bin, units in
#            $HOME/.config/systemd/user), nothing needs root; the units' systemctl calls
#            address the user manager.
#
# Exit 2 for bad input (no binary, checksum missing or wrong) before anything is written.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release/tenantci}
DESTDIR=${DESTDIR:-/}
USER_UNITS=0
for arg in "$@"; do
  case "$arg" in
    --user) USER_UNITS=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument \`$arg\`" >&2; echo "help: scripts/install.sh [--user]" >&2; exit 2 ;;
  esac
done
if [ "$USER_UNITS" = 1 ]; then PREFIX=${PREFIX:-$HOME/.local}; else PREFIX=${PREFIX:-/usr/local}; fi

fail() { echo "error: $1" >&2; echo "help: $2" >&2; exit 2; }
[ -f "$BIN" ] || fail "the binary \`$BIN\` does not exist" "build it with scripts/release.sh, or point BIN at it"
[ -f "$BIN.sha256" ] || fail "\`$BIN.sha256\` does not exist" "scripts/release.sh writes it beside the binary"
want=$(awk '{print $1; exit}' "$BIN.sha256")
have=$(sha256sum "$BIN" | awk '{print $1}')
[ "$want" = "$have" ] || fail "\`$BIN\` does not match \`$BIN.sha256\` (sha256 $have, expected $want)" "rebuild, or fetch binary and checksum again"

root=${DESTDIR%/}
if [ "$USER_UNITS" = 1 ]; then
  unit_dir="$root$HOME/.config/systemd/user"
else
  unit_dir="$root/etc/systemd/system"
fi
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
changed=0

# install_file SRC DEST MODE: copies only when the contents or the mode differ.
install_file() {
  local src=$1 dest=$2 mode=$3
  if [ -f "$dest" ] && cmp -s "$src" "$dest" && [ "$(stat -c %a "$dest")" = "$mode" ]; then
    return 0
  fi
  local verb=installed
  [ -e "$dest" ] && verb=updated
  install -D -m "$mode" "$src" "$dest"
  echo "$verb $dest"
  changed=$((changed + 1))
}

install_file "$BIN" "$root$PREFIX/bin/tenantci" 755

# render_unit UNIT: the binary's path under PREFIX; for --user, systemctl addresses the user
# manager (a user unit cannot reload a system one).
render_unit() {
  local binary="s#/usr/local/bin/tenantci#$PREFIX/bin/tenantci#g"
  if [ "$USER_UNITS" = 1 ]; then
    sed -e "$binary" -e 's#/usr/bin/systemctl #/usr/bin/systemctl --user #g' "$1"
  else
    sed -e "$binary" "$1"
  fi
}

for unit in packaging/systemd/*; do
  render_unit "$unit" > "$staging/$(basename "$unit")"
  install_file "$staging/$(basename "$unit")" "$unit_dir/$(basename "$unit")" 644
done

"$BIN" completions bash > "$staging/tenantci.bash"
"$BIN" completions zsh > "$staging/_tenantci"
"$BIN" completions fish > "$staging/tenantci.fish"
install_file "$staging/tenantci.bash" "$root$PREFIX/share/bash-completion/completions/tenantci" 644
install_file "$staging/_tenantci" "$root$PREFIX/share/zsh/site-functions/_tenantci" 644
install_file "$staging/tenantci.fish" "$root$PREFIX/share/fish/vendor_completions.d/tenantci.fish" 644

mkdir -p "$staging/man"
"$BIN" man --out-dir "$staging/man"
for page in "$staging"/man/*.1; do
  install_file "$page" "$root$PREFIX/share/man/man1/$(basename "$page")" 644
done

if [ "$changed" = 0 ]; then
  echo "nothing changed"
else
  echo "$changed file(s) changed"
  if [ "$DESTDIR" = / ]; then
    if [ "$USER_UNITS" = 1 ]; then echo "next: systemctl --user daemon-reload"; else echo "next: systemctl daemon-reload"; fi
    echo "then: docs/runbooks/gitlab-runner.md (Run gitlab-runner as a service; Renewal)"
  fi
fi
