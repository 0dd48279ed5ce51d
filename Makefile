# jitterscope — see README.md. Every target installs what it needs first (setup).
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/jitterscope
DIR ?= ./data
ARGS ?=

.PHONY: all setup setup-test build run test test-vm test-deb test-image test-deploy image lint bench fixtures web-assets man deb clean

all: build

# Build prerequisites: a C toolchain (zstd is compiled from source by zstd-sys) and Rust stable.
setup:
	@bash scripts/setup.sh

# What only the tests need (chromium, prometheus, tmux, npm, perf, ...): `make run` never installs it.
setup-test:
	@bash scripts/setup.sh --test

build: setup
	$(CARGO) build --release --locked -p jitterscope

# Record into $(DIR) (./data by default) with one status line per second, until Ctrl-C.
# Run as root for everything (other users' /proc/<pid>/io, slabinfo, priority, mlock).
run: build
	$(BIN) record --dir $(DIR) --status $(ARGS)

# The whole test suite: unit, fixture, property, store crash/full-disk, and root end-to-end tests.
test: setup-test
	@mkdir -p target
	set -o pipefail; $(CARGO) test --workspace --locked 2>&1 | tee target/test.log
	@bash scripts/test-summary.sh target/test.log

# The kernel matrix: Debian's 5.10, 6.1 and 6.12 kernels under qemu, each with cgroup v2 only
# and with cgroup v1, running tracers, record + dump and the lab scenarios inside the guest;
# writes docs/KERNELS.md and fails on any cell that differs from tests/vm/expect.json. Root.
# Fetches kernels and a debootstrap rootfs once into target/vm.
test-vm: build
	bash tests/vm/run.sh

# The .deb installed with dpkg in a Debian guest booted with systemd (tests/vm/deb.sh): the
# services, their user and capabilities, group read access, exports to a VictoriaMetrics and a
# ClickHouse run on this host (scripts/setup.sh --test installs them), remove and purge. Root.
test-deb: deb
	bash tests/vm/deb.sh

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# Side-by-side measurement against atop and sysstat; writes docs/BENCHMARKS.md. Needs root.
bench: build
	JITTERSCOPE=$(BIN) bash bench/run.sh

# Re-capture the fixture tree of this machine (see scripts/capture-fixtures.sh before using:
# tests assert on the captured values).
fixtures:
	bash scripts/capture-fixtures.sh tests/fixtures/host --with-test-cgroups

# Refresh the web UI's vendored browser libraries (web/vendor) from web/package-lock.json with
# npm, after editing web/package.json. Only this needs npm; building does not.
web-assets:
	bash scripts/web-assets.sh

# Man pages (one per command) and bash/zsh/fish completions, generated from the CLI definition.
# The build machine's own /etc/jitterscope must not leak into the pages' defaults.
man: build
	JITTERSCOPE_CONFIG=/dev/null $(BIN) manpages target/man
	@mkdir -p target/completions
	$(BIN) completions bash > target/completions/jitterscope.bash
	$(BIN) completions zsh > target/completions/_jitterscope
	$(BIN) completions fish > target/completions/jitterscope.fish

# The Debian package (cargo-deb): binary, man pages, completions, example config, hardened
# systemd units (deploy/systemd) and maintainer scripts (deploy/debian). Into target/debian.
deb: man
	bash scripts/deb.sh

# The OCI image (scripts/image.sh): built from scratch with buildah, the binary and the
# libraries it links and nothing else; reproducible (same commit, same digest). Root.
image: build
	bash scripts/image.sh

# The image and deploy/kubernetes's pod template under podman in a Debian guest booted with
# systemd (tests/vm/image.sh): the recorder in a pod sees and names the host's containers and
# exports under the node's name to the same engines as test-deb. Root.
test-image: image
	bash tests/vm/image.sh

# test-deb and test-image side by side (tests/vm/deploy.sh): two guests, one per core. Root.
test-deploy: deb image
	bash tests/vm/deploy.sh

clean:
	$(CARGO) clean
