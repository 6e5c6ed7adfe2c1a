#!/usr/bin/env bash
# Releases (docs/runbooks/releasing.md).
#
#   scripts/release.sh [build]    -> target/release/tenantci, target/release/tenantci.sha256
#   scripts/release.sh cut VERSION
#
# build (the default): the release binary for production: without the simulator (feature
# `sim`), with the release profile of Cargo.toml (stripped, opt-level "z", fat LTO, one codegen
# unit), and its checksum beside it for scripts/install.sh and scripts/image.sh.
#
# cut VERSION (e.g. 0.2.0) cuts a release from the current branch, in two commits:
#   1. "Release VERSION": the workspace version (Cargo.toml, Cargo.lock) and the Deployment's
#      image tag (manifests/dispatch/deployment.yaml) set to VERSION, CHANGELOG.md's
#      `## Unreleased` section renamed `## VERSION (YYYY-MM-DD)` with a new empty
#      `## Unreleased` above it; tagged `vVERSION` (annotated).
#   2. "PREVIOUS_RELEASE: VERSION": the file scripts/test-skew.sh trusts moved to commit 1 (a
#      commit cannot name itself, so the move is the next one).
# Nothing is pushed: it prints the push command. Refused (exit 2, nothing changed) when VERSION
# is no MAJOR.MINOR.PATCH, is not above the last tag `v*` nor at least the workspace version,
# is tagged already, the working tree or index is not clean, HEAD is detached, or
# CHANGELOG.md's `## Unreleased` section is missing or empty.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

refuse() {
  echo "error: $*; nothing was changed" >&2
  exit 2
}

# The workspace version: `version = "..."` of Cargo.toml's [workspace.package].
workspace_version() {
  awk '/^\[/{ inpkg = ($0 == "[workspace.package]") } inpkg && /^version *=/ { gsub(/[" ]/, "", $0); sub(/^version=/, "", $0); print; exit }' Cargo.toml
}

# Exit 0 when version $1 is strictly above $2 (MAJOR.MINOR.PATCH).
above() {
  [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ]
}

build() {
  ensure_rust
  cargo build --locked --release -p tenantci --no-default-features >&2
  (cd target/release && sha256sum tenantci > tenantci.sha256)
  ls -l target/release/tenantci >&2
  cat target/release/tenantci.sha256
}

# Checks everything `cut` needs before it writes anything.
cut_checks() {
  local version=$1 current last
  [[ "$version" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]] ||
    refuse "\`$version\` is no release version; give MAJOR.MINOR.PATCH, e.g. scripts/release.sh cut 0.2.0"
  git symbolic-ref -q HEAD >/dev/null ||
    refuse "HEAD is detached; check out the branch to release from (git checkout main)"
  [ -z "$(git status --porcelain --untracked-files=no)" ] ||
    refuse "the working tree or index has changes (git status); commit or stash them first"
  ! git rev-parse -q --verify "refs/tags/v$version" >/dev/null ||
    refuse "tag v$version exists already; pick the next version"
  current=$(workspace_version)
  [ -n "$current" ] || refuse "Cargo.toml has no version in [workspace.package]"
  [ "$version" = "$current" ] || above "$version" "$current" ||
    refuse "$version is below the workspace version $current; give $current or a later version"
  last=$(git tag --list 'v[0-9]*' | sed 's/^v//' | sort -V | tail -1)
  [ -z "$last" ] || above "$version" "$last" ||
    refuse "$version is not above the last release v$last; give a later version"
  grep -q '^## Unreleased$' CHANGELOG.md ||
    refuse "CHANGELOG.md has no \`## Unreleased\` section; write the release notes there first"
  [ -n "$(awk '/^## Unreleased$/{ on = 1; next } /^## /{ on = 0 } on && NF' CHANGELOG.md)" ] ||
    refuse "CHANGELOG.md's \`## Unreleased\` section is empty; write what this release changes there first"
}

cut() {
  local version=$1 date release
  cut_checks "$version"
  ensure_rust
  date=$(date -u +%Y-%m-%d)
  log "release $version: workspace version, CHANGELOG.md, the Deployment's image tag"
  sed -i "/^\[workspace.package\]/,/^\[/ s/^version = \".*\"/version = \"$version\"/" Cargo.toml
  # Only the workspace's own packages change in the lock file (no registry is asked).
  cargo update --workspace --offline --quiet
  sed -i "s/^## Unreleased$/## Unreleased\n\n## $version ($date)/" CHANGELOG.md
  sed -i "s|^\( *image: tenantci:\).*|\1$version|" manifests/dispatch/deployment.yaml
  git add Cargo.toml Cargo.lock CHANGELOG.md manifests/dispatch/deployment.yaml
  git commit --quiet -m "Release $version"
  release=$(git rev-parse HEAD)
  git tag -a "v$version" -m "tenantci $version" "$release"
  log "PREVIOUS_RELEASE -> $release (v$version)"
  sed -i -e "s/^commit .*/commit $release/" -e "s/^version .*/version $version/" PREVIOUS_RELEASE
  git add PREVIOUS_RELEASE
  git commit --quiet -m "PREVIOUS_RELEASE: $version ($release), the release the skew tests run beside this tree"
  git log --oneline -2 >&2
  echo "released $version at $release (tag v$version); publish with: git push origin $(git symbolic-ref --short HEAD) v$version"
}

case "${1:-build}" in
  build) build ;;
  cut)
    [ $# -eq 2 ] || refuse "usage: scripts/release.sh cut VERSION (e.g. 0.2.0)"
    cut "$2"
    ;;
  *) refuse "unknown command \`$1\`; use scripts/release.sh [build] or scripts/release.sh cut VERSION" ;;
esac
