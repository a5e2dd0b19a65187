#!/usr/bin/env bash
# Installs what poketrace's tests and scripts need on a fresh Debian 12 machine
# of the project's kind (Rust toolchain and gcc preinstalled; root or sudo).
# Idempotent: does nothing when everything is there.
set -euo pipefail

# linux-perf: the oracle (perf record/script/report); zstd: perf -z files;
# libopencsd-bin: trc_pkt_lister, the CoreSight oracle; gcc, libc6-dev and
# linux-libc-dev (<linux/bpf.h>): scripts/bpf-load.c for scripts/record-real.sh;
# python3: scripts/mkperf.py.
# qemu-system-x86, busybox-static, cpio: the guest kernel of the `poketrace record`
# test (scripts/qemu-guest/); bpftool: its JIT length and tag, beside the recorder's.
# chromium: the headless browser of the timeline test (speedscope, below);
# python3-pip: perfetto's trace protos for the .pftrace test (below).
packages=(linux-perf zstd libopencsd-bin gcc libc6-dev linux-libc-dev python3 qemu-system-x86 busybox-static cpio bpftool cmake libclang-dev qemu-utils chromium python3-pip)

missing=()
for p in "${packages[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	sudo=()
	if [[ "$(id -u)" != 0 ]]; then sudo=(sudo); fi
	echo ".ci/run: installing ${missing[*]}" >&2
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -y \
		-o Dpkg::Use-Pty=0 --no-install-recommends install "${missing[@]}" >/dev/null
fi

# speedscope from the npm registry, for the timeline's browser test
# (crates/cli/tests/timeline/browser.rs reads it from here).
speedscope="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/speedscope"
if [[ ! -f "$speedscope/node_modules/speedscope/dist/release/index.html" ]]; then
	echo ".ci/run: installing speedscope into $speedscope" >&2
	mkdir -p "$speedscope"
	npm install --prefix "$speedscope" --no-audit --no-fund --silent speedscope@1.25.0 >/dev/null
fi

# perfetto (its compiled trace protos) and protobuf from PyPI, for the test
# that reads timeline's .pftrace output (crates/cli/tests/views/perfetto.rs).
pylib="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/python"
if [[ ! -f "$pylib/perfetto/protos/perfetto/trace/perfetto_trace_pb2.py" ]]; then
	echo ".ci/run: installing perfetto's Python protos into $pylib" >&2
	python3 -m pip install --quiet --disable-pip-version-check --target "$pylib" perfetto==0.59.1 protobuf >/dev/null
fi
