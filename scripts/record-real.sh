#!/usr/bin/env bash
# Record small real perf.data files with `perf record` on this machine, for
# tests that read what the kernel and perf really write. Needs root (or
# CAP_PERFMON + CAP_BPF), perf with zstd support, and a C compiler.
#
#   scripts/record-real.sh OUTDIR
#
# Writes into OUTDIR (each file well under 2 MB, about 2.5 s in all):
#   dummy.data        -e dummy -- sleep 0.1          (COMM, MMAP2, EXIT side-band)
#   task-clock.data   -e task-clock -a -- sleep 0.2  (SAMPLE, CPU in sample_type)
#   compressed.data   the same with -z               (COMPRESSED records, zstd)
#   bpf.data          -e dummy -a while bpf-load loads and unloads a BPF
#                     program (KSYMBOL type 1 + BPF_EVENT, register and unregister)
#   switch.data       -e dummy --switch-events -a    (SWITCH_CPU_WIDE)
#   switch-task.data  -e dummy --switch-events       (SWITCH)
#   pipe.data         -e dummy -o - (pipe mode)       (HEADER_ATTR, FEATURE records)
#   bpf-load          the helper, compiled from scripts/bpf-load.c
#
# --no-bpf-event is given wherever BPF events are not wanted: without it perf
# 6.1 spends about 1 s shutting down its BPF side-band thread.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "$1")"
case "$out/" in
/tmp/perf-*)
	# perf would take these paths for JIT symbol maps (perf-PID.map)
	echo "$0: OUTDIR must not start with /tmp/perf-" >&2
	exit 2
	;;
esac
mkdir -p "$out"

perf_home="$(mktemp -d "${TMPDIR:-/tmp}/poketrace-home.XXXXXX")"
trap 'rm -rf "$perf_home"' EXIT
# perf keeps a build-id cache in ~/.debug and reads ~/.perfconfig: keep both private
export HOME="$perf_home" PERF_CONFIG=/dev/null

if ! perf version --build-options | grep -q 'zstd: \[ on'; then
	echo "$0: this perf is built without zstd; perf record -z cannot work" >&2
	exit 1
fi

"${CC:-cc}" -O2 -Wall -o "$out/bpf-load" "$here/bpf-load.c"

rec() {
	local file="$1"
	shift
	rm -f "$out/$file"
	perf record -q -o "$out/$file" "$@"
}

rec dummy.data --no-bpf-event -e dummy -- sleep 0.1
rec task-clock.data --no-bpf-event -e task-clock -a -- sleep 0.2
rec compressed.data --no-bpf-event -z -e task-clock -a -- sleep 0.2
# The program stays loaded 20 ms; its unload (KSYMBOL flags 0x1, BPF_EVENT
# type 2) follows close() asynchronously, hence the sleep after it.
rec bpf.data -e dummy -a -- sh -c "'$out/bpf-load' 20 && sleep 0.05"
rec switch.data --no-bpf-event -e dummy --switch-events -a -- sleep 0.05
rec switch-task.data --no-bpf-event -e dummy --switch-events -- sleep 0.05
# Pipe mode (16-byte header, attrs as HEADER_ATTR records); perf reads it from stdin.
perf record -q --no-bpf-event -e dummy -o - -- sleep 0.05 >"$out/pipe.data"

# Each file must hold the records it exists for (`perf report --stats` counts).
expect() {
	local file="$1" type want n
	shift
	local stats
	stats="$(perf report --stats -i "$out/$file" 2>/dev/null)"
	for want in "$@"; do
		type="${want%=*}"
		n="$(awk -v t="$type" '$1 == t && $2 == "events:" { print $3; exit }' <<<"$stats")"
		if [[ -z "$n" || "$n" == 0 ]] || { [[ "$want" == *=* ]] && [[ "$n" != "${want#*=}" ]]; }; then
			echo "$0: $file: expected $want $type records, found ${n:-none}" >&2
			exit 1
		fi
	done
	if (($(stat -c %s "$out/$file") >= 2 * 1024 * 1024)); then
		echo "$0: $file is 2 MB or more" >&2
		exit 1
	fi
}
expect dummy.data COMM MMAP2 EXIT
expect task-clock.data SAMPLE MMAP COMM FORK MMAP2
expect compressed.data COMPRESSED SAMPLE
expect bpf.data KSYMBOL BPF_EVENT
expect switch.data SWITCH_CPU_WIDE
expect switch-task.data SWITCH
# our program's own load and unload, by name (other BPF programs may come and go)
if [[ "$(perf report -D -i "$out/bpf.data" 2>/dev/null |
	grep -c 'PERF_RECORD_KSYMBOL .* type 1 flags 0x[01] name bpf_prog_[0-9a-f]*_poketrace_test$')" != 2 ]]; then
	echo "$0: bpf.data lacks the load and unload KSYMBOL of poketrace_test" >&2
	exit 1
fi
