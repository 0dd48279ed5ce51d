#!/usr/bin/env bash
# Builds the OCI image (make image) from scratch with buildah: the release binary, stripped of
# debug info, plus exactly the shared libraries it links (glibc, libelf, zlib, libgcc_s) copied
# from this Debian host, their copyright files, and nothing else: no shell, no package manager.
# No base image is pulled (none can be here), and the build is reproducible: files and the
# image's creation time are stamped with the last commit's time, so the same tree gives the same
# digest. Writes target/image/jitterscope-<version>.oci.tar and prints its path; load it with
# `podman load -i` or `skopeo copy oci-archive:... docker://registry/...`.
#
# buildah's storage is private to target/image, so nothing is left in /var/lib/containers.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/jitterscope
[ -x "$BIN" ] || { echo "image: error: $BIN is missing (make build)" >&2; exit 1; }
if ! command -v buildah >/dev/null 2>&1; then
  echo "image: installing buildah" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; }
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# The commit time, not the clock: a rebuild of the same tree must give the same bytes.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
out=target/image
stage=$out/rootfs
store=(--root "$PWD/$out/storage" --runroot "$PWD/$out/run" --storage-driver vfs)
rm -rf "$stage" "$out"/jitterscope-*.oci.tar
mkdir -p "$stage/usr/bin" "$stage/var/lib/jitterscope" "$stage/etc" "$stage/tmp"
chmod 1777 "$stage/tmp"

# The profiler names its own frames from the symbol table, which --strip-debug keeps; the line
# tables (75 MB of the 87) are in the Debian package's dbgsym, not here.
objcopy --strip-debug "$BIN" "$stage/usr/bin/jitterscope"

# Every library the dynamic loader resolves, at the path it resolves it to, under its soname
# (cp -L copies the file the symlink names). ldd lists the loader itself without "=>".
ldd "$BIN" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r lib; do
  mkdir -p "$stage$(dirname "$lib")"
  cp -L "$lib" "$stage$lib"
  real=$(readlink -f "$lib")
  pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1 || true)
  if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
    mkdir -p "$stage/usr/share/doc/$pkg"
    cp "/usr/share/doc/$pkg/copyright" "$stage/usr/share/doc/$pkg/"
  fi
done
mkdir -p "$stage/usr/share/doc/jitterscope"
cp README.md "$stage/usr/share/doc/jitterscope/"
# getpwuid() for the views' user names resolves the container's own files; the host's users
# are not the image's business.
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$stage/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"
find "$stage" -exec touch -h -d "@$epoch" {} +

# Leftovers of an interrupted build would otherwise accumulate in the private store.
buildah "${store[@]}" rm --all >/dev/null 2>&1 || true
ctr=$(buildah "${store[@]}" from scratch)
trap 'buildah "${store[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah "${store[@]}" add --quiet "$ctr" "$stage" / >/dev/null
buildah "${store[@]}" config \
  --entrypoint '["/usr/bin/jitterscope"]' \
  --cmd '["record", "--dir", "/var/lib/jitterscope"]' \
  --env PATH=/usr/bin \
  --volume /var/lib/jitterscope \
  --stop-signal SIGTERM \
  --label "org.opencontainers.image.title=jitterscope" \
  --label "org.opencontainers.image.description=Flight recorder and root-cause engine for latency jitter" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  "$ctr"
tar=$out/jitterscope-$version.oci.tar
buildah "${store[@]}" commit --quiet --format oci --squash --omit-history --identity-label=false \
  --timestamp "$epoch" "$ctr" "oci-archive:$tar:localhost/jitterscope:$version" >/dev/null
rm -rf "$stage"
echo "$tar"
