#!/usr/bin/env bash
# Builds the dispatcher's OCI image without a daemon or network: an OCI image layout in
# $IMAGE_OUT (default target/image), tag `tenantci`, holding only
#   /usr/local/bin/tenantci   the release binary without the simulator (scripts/release.sh)
#   the C runtime it links    (as `ldd` lists it, and the dynamic loader)
#   /etc/ssl/certs/ca-certificates.crt, /etc/passwd and /etc/group (user nonroot, uid 65532)
# and no shell. Entrypoint `tenantci`, user 65532:65532, OCI labels source/revision/version.
# Reproducible: every file and the image config carry SOURCE_DATE_EPOCH (default: the
# commit's time), so two builds of one commit have one digest, which the script prints.
# Copy it to a registry with skopeo:
#   skopeo copy oci:target/image:tenantci docker://registry.example.org/tenantci:$(git rev-parse --short HEAD)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure.sh

IMAGE_OUT=${IMAGE_OUT:-target/image}
TAG=tenantci
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

ensure_umoci
if [ "${IMAGE_SKIP_BUILD:-0}" != 1 ]; then
  log "release build (no simulator)"
  scripts/release.sh >/dev/null
fi
bin=target/release/tenantci
[ -x "$bin" ] || { echo "error: \`$bin\` is missing; run scripts/release.sh" >&2; exit 2; }
if "$bin" sim --help >/dev/null 2>&1; then
  echo "error: \`$bin\` has the simulator; build it with scripts/release.sh (--no-default-features)" >&2
  exit 2
fi

version=$("$bin" --version | awk '{print $2}')
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source_url=${IMAGE_SOURCE:-https://github.com/tenantci/tenantci}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$IMAGE_OUT"
mkdir -p "$(dirname "$IMAGE_OUT")"
umoci init --layout "$IMAGE_OUT"
umoci new --image "$IMAGE_OUT:$TAG"
umoci unpack --image "$IMAGE_OUT:$TAG" "$work/bundle" >/dev/null
root="$work/bundle/rootfs"

log "root file system"
install -D -m 0755 "$bin" "$root/usr/local/bin/tenantci"
# The C runtime: every library ldd resolves, at the path it resolves to, plus the loader.
ldd "$bin" | awk '/=> \// {print $3} /^\s*\/[^ ]+ \(/ {print $1}' | sort -u | while read -r lib; do
  real=$(readlink -f "$lib")
  # The host's mode: the dynamic loader must stay executable.
  install -D -m "$(stat -c %a "$real")" "$real" "$root$lib"
done
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { echo "error: $ca is missing (apt-get install ca-certificates)" >&2; exit 3; }
install -D -m 0644 "$ca" "$root$ca"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$work/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$work/group"
install -D -m 0644 "$work/passwd" "$root/etc/passwd"
install -D -m 0644 "$work/group" "$root/etc/group"
install -d -m 0755 -o 65532 -g 65532 "$root/home/nonroot"
install -d -m 1777 "$root/tmp"
# No timestamps but SOURCE_DATE_EPOCH, so the layer is the same bytes on every build.
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

log "layer"
# The config comes after the layer: umoci repack rewrites the config from the bundle it
# unpacked (dropping earlier `umoci config` edits) and stamps the current time.
umoci repack --image "$IMAGE_OUT:$TAG" \
  --history.created "$created" --history.created_by "scripts/image.sh: tenantci $version" \
  "$work/bundle"
log "image config"
umoci config --image "$IMAGE_OUT:$TAG" \
  --created "$created" --author tenantci \
  --config.user 65532:65532 \
  --config.entrypoint /usr/local/bin/tenantci --config.cmd --help \
  --config.workingdir /home/nonroot \
  --config.env PATH=/usr/local/bin \
  --config.label "org.opencontainers.image.source=$source_url" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.title=tenantci" \
  --history.created "$created" --history.created_by "scripts/image.sh"
umoci gc --layout "$IMAGE_OUT"

digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$IMAGE_OUT/index.json")
log "oci:$IMAGE_OUT:$TAG"
echo "$digest"
