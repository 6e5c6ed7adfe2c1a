#!/usr/bin/env bash
# Builds the release binary for production: without the simulator (feature `sim`), with the
# release profile of Cargo.toml (stripped, opt-level "z", fat LTO, one codegen unit), and
# writes its checksum beside it for scripts/install.sh and scripts/image.sh.
#
#   scripts/release.sh      -> target/release/tenantci, target/release/tenantci.sha256
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh
ensure_rust
cargo build --locked --release -p tenantci --no-default-features >&2
(cd target/release && sha256sum tenantci > tenantci.sha256)
ls -l target/release/tenantci >&2
cat target/release/tenantci.sha256
