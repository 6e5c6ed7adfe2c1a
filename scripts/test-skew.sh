#!/usr/bin/env bash
# The version-skew tests: the previous release (the commit PREVIOUS_RELEASE names) beside this
# tree, in the integration tests under crates/tenantci/tests/it/skew/ (a dispatcher upgraded
# and rolled back with tasks in flight through the Lease hand-over; the gateway's `bootstrap
# runner` of the previous release, then this one's). Not part of scripts/test.sh's run: the
# nextest default profile leaves `skew::` out (.config/nextest.toml), since building a second
# tree would undo the cold suite's budget; .ci/run calls this after scripts/test.sh.
#
# The previous release is built once in its own worktree and target directory under this
# tree's target directory ($CARGO_TARGET_DIR or target/: skew-previous/), seeded with this
# tree's compiled dependencies as scripts/bench-scale.sh seeds its baseline, and cached: the
# build is skipped while the binary's stamp names PREVIOUS_RELEASE's commit.
#
# Usage: scripts/test-skew.sh [NEXTEST FILTER...]   (e.g. scripts/test-skew.sh gateway)
# Exit: 0 every skew test passed, 1 a test failed, 2 bad input (PREVIOUS_RELEASE unreadable,
# its commit not in this clone).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

# PREVIOUS_RELEASE's `commit <40 hex>` line (its `version` line is for people).
[ -f PREVIOUS_RELEASE ] || { echo "error: PREVIOUS_RELEASE is missing at the repository's root; restore it (git checkout origin/main -- PREVIOUS_RELEASE)" >&2; exit 2; }
commit=$(awk '$1 == "commit" { print $2 }' PREVIOUS_RELEASE)
if ! [[ "$commit" =~ ^[0-9a-f]{40}$ ]]; then
  echo "error: PREVIOUS_RELEASE has no line \`commit <40 lowercase hex>\` (found \`$commit\`); write the previous release's full commit id there" >&2
  exit 2
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "error: PREVIOUS_RELEASE names commit $commit, which this clone does not have; fetch it (git fetch origin $commit, or a clone that is not shallow)" >&2
  exit 2
fi

ensure_rust
ensure_nats_server
ensure_actions_cache_client

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
wt="$target/skew-previous"
prev_bin="$wt/target/debug/tenantci"
stamp="$prev_bin.commit"
if [ -x "$prev_bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$commit" ]; then
  log "previous release ${commit:0:12}: cached ($prev_bin)"
else
  git worktree prune
  # A worktree of another clone (a target directory copied over) is not this clone's.
  common=$(git rev-parse --path-format=absolute --git-common-dir)
  if [ -e "$wt" ] && [ "$(git -C "$wt" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)" != "$common" ]; then
    rm -rf "$wt"
  fi
  if [ ! -e "$wt/.git" ]; then
    log "previous release ${commit:0:12}: its own worktree $wt"
    rm -rf "$wt"
    git worktree add --detach "$wt" "$commit" >&2
  fi
  git -C "$wt" checkout --quiet --detach "$commit"
  if [ ! -d "$wt/target/debug/deps" ] && [ -d "$target/debug/deps" ]; then
    # This tree's compiled dependencies (usually the same lock file): only the previous
    # release's own crates and what its lock file changed are compiled again.
    log "seeding its target directory with this tree's dependencies"
    mkdir -p "$wt/target/debug"
    cp -a "$target/debug/deps" "$target/debug/build" "$target/debug/.fingerprint" "$wt/target/debug/"
  fi
  log "building the previous release ${commit:0:12} (dev profile, the binary only)"
  # Not linted: the previous release is fixed, built to be run beside this tree.
  rm -f "$stamp"
  (cd "$wt" && env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_TARGET_DIR="$wt/target" \
    cargo build --locked --quiet -p tenantci --bin tenantci)
  echo "$commit" > "$stamp"
fi

# The same build scripts/test.sh made (the default members, clippy's wrapper included), so
# nothing is compiled again when it ran first; the `skew` profile selects the skew tests.
. scripts/lib/clippy.sh
clippy_while_building
log "skew tests: previous release ${commit:0:12} beside this tree"
export TENANTCI_PREVIOUS_BIN="$prev_bin"
export TENANTCI_PREVIOUS_COMMIT="$commit"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast --profile skew "$@"
else
  cargo test --locked --no-fail-fast -p tenantci --test it -- skew:: "$@"
fi
