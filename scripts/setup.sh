#!/usr/bin/env bash
# Installs what building jitterscope needs, only what is missing:
# - a C toolchain and pkg-config (zstd-sys compiles libzstd), clang and libelf/zlib headers
#   (the BPF tracers are compiled by clang; libbpf-sys builds libbpf against libelf);
# - Rust stable via rustup if no cargo is on PATH.
# The web UI's libraries are vendored in web/vendor: building needs no node or npm.
#
# With --test, also what the test suite needs (`make test` passes it; `make run` does not):
# tmux (terminal views), chromium and prometheus (web UI, /metrics, remote write), victoria-metrics,
# clickhouse-server (episodes pushed by record),
# htpasswd and openssl (remote write), npm (the check that
# web/vendor matches web/package-lock.json, and puppeteer-core for the browser tests; node runs a
# profiled JIT), python3 (memleak
# targets), certutil, xz, gzip, perf and libc6-dbg (the profiler's unwinding and naming against
# Debian's own binaries), python3.11 and PyPI's py-spy (the Python frames test) and go (`go tool pprof` reads our profiles; a go already in
# /usr/local/go/bin counts).
# Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
pkgs=()
want() { # want COMMAND-OR-FILE PACKAGE
  if [[ $1 == /* ]]; then [ -e "$1" ] && return 0; else command -v "$1" >/dev/null 2>&1 && return 0; fi
  need+=("$1")
  pkgs+=("$2")
}
want cc build-essential
want make build-essential
want pkg-config pkg-config
want clang clang
want /usr/include/libelf.h libelf-dev
want /usr/include/zlib.h zlib1g-dev
if [ "${1:-}" = --test ]; then
  want npm npm
  want tmux tmux
  want chromium chromium
  want prometheus prometheus
  # Remote write's end-to-end tests: the real receivers, Prometheus above and
  # VictoriaMetrics; htpasswd (bcrypt) and openssl for the basic-auth and TLS receiver.
  want victoria-metrics victoria-metrics
  # Episodes in a column store: ClickHouse (Debian's 18.16), started by the tests.
  want /usr/sbin/clickhouse-server clickhouse-server
  want htpasswd apache2-utils
  want openssl openssl
  want python3 python3
  # A strict OpenMetrics parser for /metrics' OpenMetrics answer (Debian's prometheus_client).
  want /usr/lib/python3/dist-packages/prometheus_client python3-prometheus-client
  # Rendering the generated man pages (groff -man) in their test.
  want groff groff-base
  # The nss-probe lab scenario runs Debian's certutil (NSS softokn's access probe).
  want certutil libnss3-tools
  # The fleet inventory's test preloads Debian's jemalloc into a program (seed 5).
  want /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 libjemalloc2
  # The profiler's unwinding tests: Debian's xz against `perf record --call-graph dwarf`, and
  # glibc's detached debug info (its static functions named through the build id).
  want xz xz-utils
  want perf linux-perf
  want /usr/share/doc/libc6-dbg libc6-dbg
  want gzip gzip
  # The Python frames test: Debian's own CPython 3.11, and pip to fetch py-spy (below).
  want /usr/bin/python3.11 python3.11
  # Its internal headers: the profiler's CPython layouts are checked against them.
  want /usr/include/python3.11/internal/pycore_frame.h libpython3.11-dev
  want /usr/lib/python3/dist-packages/pip python3-pip
  command -v go >/dev/null 2>&1 || want /usr/local/go/bin/go golang-go
elif [ -n "${1:-}" ]; then
  echo "setup: unknown argument $1 (only --test)" >&2
  exit 2
fi
if ((${#need[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}; install ${pkgs[*]} (needs root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Installing prometheus must not start it as a service: invoke-rc.d asks policy-rc.d.
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get install -y -q --no-install-recommends $(printf '%s\n' "${pkgs[@]}" | sort -u)
  if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  # shellcheck disable=SC1091
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    rustup toolchain install stable --profile minimal
  else
    echo "setup: no cargo and no rustup on PATH; install Rust stable (https://rustup.rs)" >&2
    exit 1
  fi
fi
if [ "${1:-}" = --test ] && [ ! -d web/tests/node_modules/puppeteer-core ]; then
  # The web UI's browser tests: npm's puppeteer-core, pinned by web/tests/package-lock.json,
  # drives Debian's chromium (it downloads no browser of its own).
  npm ci --prefix web/tests --no-audit --no-fund --loglevel=error
fi
if [ "${1:-}" = --test ] && [ ! -x target/tools/py-spy ]; then
  # PyPI's py-spy, the peer the Python frames test compares with: its wheel holds one static
  # binary, unpacked into target/tools (nothing installed system-wide). Pinned, so the test
  # compares with the same reader every time.
  rm -rf target/tools/py-spy.d
  mkdir -p target/tools/py-spy.d
  /usr/bin/python3 -m pip download -q --no-deps --only-binary :all: -d target/tools/py-spy.d py-spy==0.4.3
  /usr/bin/python3 -m zipfile -e target/tools/py-spy.d/py_spy-*.whl target/tools/py-spy.d/x
  install -m 0755 target/tools/py-spy.d/x/py_spy-*.data/scripts/py-spy target/tools/py-spy
  rm -rf target/tools/py-spy.d
fi
