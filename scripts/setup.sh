#!/usr/bin/env bash
# Installs what building and testing jitterscope needs, only what is missing:
# a C toolchain and pkg-config (zstd-sys compiles libzstd), clang and libelf/zlib headers (the BPF
# tracers are compiled by clang; libbpf-sys builds libbpf against libelf), and Rust stable via
# rustup if no cargo is on PATH; tmux for the terminal views' end-to-end tests. Safe to run
# repeatedly.
set -euo pipefail
need=()
for cmd in cc make pkg-config clang tmux; do
  command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
for hdr in /usr/include/libelf.h /usr/include/zlib.h; do
  [ -e "$hdr" ] || need+=("$hdr")
done
if ((${#need[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}; install build-essential pkg-config clang libelf-dev zlib1g-dev tmux (needs root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q build-essential pkg-config clang libelf-dev zlib1g-dev tmux
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
