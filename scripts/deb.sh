#!/usr/bin/env bash
# Builds the Debian package (make deb) from the release binary and the generated man pages and
# completions (make man), with cargo-deb, installed here at a pinned version if missing.
# Prints the .deb's path.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
CARGO_DEB_VERSION=3.8.0
if [ "$(cargo deb --version 2>/dev/null | awk '{print $2}')" != "$CARGO_DEB_VERSION" ]; then
  echo "deb: installing cargo-deb $CARGO_DEB_VERSION" >&2
  cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION" >&2
fi
for f in target/release/jitterscope target/man/jitterscope.toml.5 target/completions/_jitterscope; do
  [ -f "$f" ] || { echo "deb: error: $f is missing (make man)" >&2; exit 1; }
done
# --no-build: the binary `make build` made (with --locked) is the one packaged, and its man
# pages were generated from it. --dbgsym: the release profile keeps line tables for the
# profiler's own symbols; they go to a separate jitterscope-dbgsym .ddeb (/usr/lib/debug/.build-id),
# as Debian's packages do, so the binary installed is ~10 MB rather than ~85.
rm -f target/debian/jitterscope_*.deb target/debian/jitterscope-dbgsym_*.ddeb
# The generated files are outside target/release on purpose (cargo-deb warns about each).
cargo deb --no-build --locked --dbgsym -p jitterscope -o target/debian/ 2>&1 >/dev/null \
  | { grep -v 'are detected as Cargo target dir' || true; } >&2
ls target/debian/jitterscope_*.deb
