#!/usr/bin/env bash
# Installs what poketrace needs on a fresh Debian 12 machine of the project's
# kind (Rust toolchain, gcc, Node.js and npm preinstalled; root or sudo).
#
#   scripts/setup.sh           what building poketrace and running `demo` need
#   scripts/setup.sh --tests   also every test's tools (scripts/test.sh runs this)
#
# Idempotent: does nothing when everything is there.
set -euo pipefail

tests=0
case "${1:-}" in
"") ;;
--tests) tests=1 ;;
*)
	echo "usage: $0 [--tests]" >&2
	exit 2
	;;
esac

# gcc and libc6-dev: the C part of zstd, the binary's only native code.
packages=(gcc libc6-dev)
if ((tests)); then
	# cmake and libclang-dev: libipt-sys builds libipt and its bindings (the
	# Intel PT oracle of the tests and benches); g++: libFuzzer, which the
	# fuzz targets' check builds.
	# linux-perf: the oracle (perf record/script/report); zstd: perf -z files;
	# libopencsd-bin: trc_pkt_lister, the CoreSight oracle; linux-libc-dev
	# (<linux/bpf.h>): scripts/bpf-load.c for scripts/record-real.sh;
	# python3: scripts/mkperf.py.
	# qemu-system-x86, qemu-utils, busybox-static, cpio: the guest kernel of the
	# `poketrace record` test (scripts/qemu-guest/); bpftool: its JIT length and
	# tag, beside the recorder's.
	# chromium: the headless browser of the timeline and report tests
	# (speedscope, below); python3-pip: perfetto's trace protos for the .pftrace test.
	# bolt-19, llvm-19, clang-19: the consumers of `poketrace profile` (llvm-bolt,
	# perf2bolt, llvm-profgen, clang -fprofile-sample-use).
	packages+=(cmake libclang-dev g++ linux-perf zstd libopencsd-bin linux-libc-dev python3 qemu-system-x86 qemu-utils busybox-static cpio bpftool chromium python3-pip bolt-19 llvm-19 clang-19)
fi

missing=()
for p in "${packages[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	sudo=()
	if [[ "$(id -u)" != 0 ]]; then sudo=(sudo); fi
	echo "setup: installing ${missing[*]}" >&2
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -y \
		-o Dpkg::Use-Pty=0 --no-install-recommends install "${missing[@]}" >/dev/null
fi

if ((!tests)); then
	exit 0
fi

# speedscope from the npm registry, for the timeline's browser test
# (crates/cli/tests/views/browser.rs reads it from here).
speedscope="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/speedscope"
if [[ ! -f "$speedscope/node_modules/speedscope/dist/release/index.html" ]]; then
	echo "setup: installing speedscope into $speedscope" >&2
	mkdir -p "$speedscope"
	npm install --prefix "$speedscope" --no-audit --no-fund --silent speedscope@1.25.0 >/dev/null
fi

# perfetto (its compiled trace protos) and protobuf from PyPI, for the test
# that reads timeline's .pftrace output (crates/cli/tests/views/perfetto.rs).
pylib="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/python"
if [[ ! -f "$pylib/perfetto/protos/perfetto/trace/perfetto_trace_pb2.py" ]]; then
	echo "setup: installing perfetto's Python protos into $pylib" >&2
	python3 -m pip install --quiet --disable-pip-version-check --target "$pylib" perfetto==0.59.1 protobuf >/dev/null
fi

# Dask distributed, pyarrow, DuckDB and pytest from PyPI, pinned in
# scripts/distributed/requirements.txt: the Dask driver's tests
# (scripts/distributed/tests, which scripts/test.sh runs with this PYTHONPATH).
# Reinstalled when the requirements change.
distributed="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/python-distributed"
requirements="$(dirname "${BASH_SOURCE[0]}")/distributed/requirements.txt"
if ! cmp -s "$requirements" "$distributed/requirements.txt"; then
	echo "setup: installing the Dask driver's Python packages into $distributed" >&2
	rm -rf "$distributed"
	python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$distributed" -r "$requirements" >/dev/null
	cp "$requirements" "$distributed/requirements.txt"
fi
