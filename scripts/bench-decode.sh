#!/usr/bin/env bash
# `poketrace decode` as whole processes against libipt's block decoder and
# `perf script`, on the same inputs in the same run (docs/PERFORMANCE.md,
# "poketrace decode, whole process").
#
#   scripts/bench-decode.sh
#   RUNS=3 INPUTS="perf1 kernel4" scripts/bench-decode.sh
#   SIZES="8 32 128" INPUTS=perf1 PROGRAMS="stat1" scripts/bench-decode.sh   # peak memory as the trace grows
#
# Inputs, simulated once and kept in ${XDG_CACHE_HOME:-~/.cache}/poketrace/bench-decode/:
#   perf1    one CPU of random walks through /usr/bin/perf's real code, SIZE MB of trace (default 32)
#   perf4    four CPUs of the same, SIZE/4 MB each
#   kernel4  the simulator's kernel on four CPUs with 200 pokes (int3 protocol), 8M instructions each
# Programs (every run of every program alternates with the others', RUNS rounds):
#   e1 eN    poketrace decode --itrace=e, one thread (--threads 1) and every core
#   b1 bN    poketrace decode --itrace=b (text), written to /dev/null
#   stat1 statN  poketrace decode --stat
#   eB bB    --itrace=e and b of the binary BASE names (an earlier build, to compare in the same run)
#   libipt   crates/intel-pt/examples/libipt_decode.rs: pt_blk_next over an image section cache, no output
#   perf     perf script --itrace=be (skipped on inputs over 24 MB unless PERF_ALL=1: it takes minutes)
# Programs the binary does not know (no --threads, no --stat) are left out.
# Prints per input and program: fastest and median wall time, the least CPU
# time (user + sys: steadier than wall time on a loaded machine, but it
# adds up all threads), M instructions/s
# (libipt's own count for libipt: on poked code it decodes less) and MB of
# trace/s at the fastest, peak RSS, and the ratio to libipt's fastest.
#
# Environment: RUNS (default 5), INPUTS, PROGRAMS, SIZES (MB of trace for
# the perf inputs; default 32), BIN (a poketrace binary instead of this
# tree's release build), BASE (see eB), PERF_ALL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-5}
INPUTS=${INPUTS:-perf1 perf4 kernel4}
PROGRAMS=${PROGRAMS:-e1 eN b1 bN stat1 statN eB bB libipt perf}
SIZES=${SIZES:-32}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/poketrace/bench-decode
mkdir -p "$cache/home"
if [[ -z ${BIN:-} ]]; then
	cargo build --release -q -p poketrace
	BIN=target/release/poketrace
fi
cargo build --release -q -p intel-pt --example libipt_decode
libipt=target/release/examples/libipt_decode
help=$("$BIN" decode --help)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Bytes of trace per instruction over /usr/bin/perf (about 0.27): instructions for SIZE MB.
perf_insns() { echo $(($1 * 3700000)); }

# The input's directory, simulated on first use: name, size.
input() {
	local name=$1 size=$2 dir
	case $name in
	perf1) dir=$cache/perf1-${size}mb ;;
	perf4) dir=$cache/perf4-${size}mb ;;
	kernel4) dir=$cache/kernel4 ;;
	*) echo "unknown input $name" >&2 && exit 1 ;;
	esac
	if [[ ! -f $dir/truth/meta.json ]]; then
		rm -rf "$dir"
		case $name in
		perf1) "$BIN" simulate --cpus 1 --elf /usr/bin/perf --instructions "$(perf_insns "$size")" -o "$dir" >&2 ;;
		perf4) "$BIN" simulate --cpus 4 --elf /usr/bin/perf --instructions "$(($(perf_insns "$size") / 4))" -o "$dir" >&2 ;;
		kernel4) "$BIN" simulate --cpus 4 --instructions 8000000 -o "$dir" >&2 ;;
		esac
		rm -f "$dir"/truth/*.bin # the ground truth: not decoded, and large (meta.json is the run's summary)
	fi
	echo "$dir"
}

# The command of a program on a directory, or nothing when the binary lacks it.
command_of() {
	local p=$1 dir=$2 threads=()
	case $p in
	*1) [[ $help == *--threads* ]] || return 0; threads=(--threads 1) ;;
	esac
	case $p in
	e1 | eN) echo "$BIN decode $dir --itrace=e ${threads[*]}" ;;
	b1 | bN) echo "$BIN decode $dir --itrace=b ${threads[*]}" ;;
	stat1 | statN) [[ $help == *--stat* ]] && echo "$BIN decode $dir --stat ${threads[*]}" ;;
	eB) [[ -n ${BASE:-} ]] && echo "$BASE decode $dir --itrace=e" ;;
	bB) [[ -n ${BASE:-} ]] && echo "$BASE decode $dir --itrace=b" ;;
	libipt) echo "$libipt $dir" ;;
	perf) echo "env HOME=$cache/home PERF_CONFIG=/dev/null perf script -i $dir --itrace=be" ;;
	esac
	return 0
}

for size in $SIZES; do
	for name in $INPUTS; do
		[[ $name == kernel4 && $size != "${SIZES%% *}" ]] && continue
		dir=$(input "$name" "$size")
		# What is decoded: bytes of trace and instructions, ours (from --stat
		# when the binary has it) and libipt's (over the code before any poke,
		# libipt stops at poked code).
		"$libipt" "$dir" 2> "$work/libipt.txt"
		read -r lib_insns bytes < <(sed -E 's/.* ([0-9]+) bytes, ([0-9]+) instructions.*/\2 \1/' "$work/libipt.txt")
		insns=$lib_insns
		if [[ $help == *--stat* ]]; then
			insns=$("$BIN" decode "$dir" --stat 2> /dev/null | awk '$1 == "instructions" { print $2 }')
		fi
		progs=()
		for p in $PROGRAMS; do
			[[ $p == perf && $bytes -gt 24000000 && -z ${PERF_ALL:-} ]] && continue
			[[ -n $(command_of "$p" "$dir") ]] && progs+=("$p")
		done
		: > "$work/times"
		for round in $(seq "$RUNS"); do
			for p in "${progs[@]}"; do
				# shellcheck disable=SC2046 # the command is words
				/usr/bin/time -o "$work/time" -f "%e %M %U %S" $(command_of "$p" "$dir") > /dev/null 2> "$work/err" || {
					echo "$p on $dir failed:" >&2
					cat "$work/err" >&2
					exit 1
				}
				echo "$p $round $(tail -1 "$work/time")" >> "$work/times"
			done
		done
		echo
		echo "### $name, $((bytes / 1000000)) MB of trace, $((insns / 1000000))M instructions (libipt: $((lib_insns / 1000000))M), $RUNS runs each"
		echo
		echo "| program | fastest s | median s | least CPU s | M insns/s | MB trace/s | peak MB | vs libipt (wall) | vs libipt (CPU) |"
		echo "|---|---|---|---|---|---|---|---|---|"
		lib_best=$(awk '$1 == "libipt" { print $3 }' "$work/times" | sort -g | head -1)
		lib_cpu=$(awk '$1 == "libipt" { print $5 + $6 }' "$work/times" | sort -g | head -1)
		for p in "${progs[@]}"; do
			mapfile -t t < <(awk -v p="$p" '$1 == p { print $3 }' "$work/times" | sort -g)
			peak=$(awk -v p="$p" '$1 == p && $4 > m { m = $4 } END { print m }' "$work/times")
			cpu=$(awk -v p="$p" '$1 == p { print $5 + $6 }' "$work/times" | sort -g | head -1)
			cmd=$(command_of "$p" "$dir" | sed "s|$dir|DIR|; s|$cache/home|~|; s|$BIN|poketrace|; s|${BASE:-^$}|poketrace@BASE|")
			n=$insns
			[[ $p == libipt ]] && n=$lib_insns
			awk -v best="${t[0]}" -v median="${t[$(((${#t[@]} - 1) / 2))]}" -v m="$peak" -v insns="$n" -v bytes="$bytes" -v lib="${lib_best:-0}" -v cpu="$cpu" -v lib_cpu="${lib_cpu:-0}" -v cmd="$cmd" 'BEGIN {
				ratio = lib > 0 && best > 0 ? sprintf("%.2fx", lib / best) : ""
				cpu_ratio = lib_cpu > 0 && cpu > 0 ? sprintf("%.2fx", lib_cpu / cpu) : ""
				printf "| `%s` | %.3f | %.3f | %.2f | %.0f | %.1f | %d | %s | %s |\n", cmd, best, median, cpu, insns / best / 1e6, bytes / best / 1e6, m / 1024, ratio, cpu_ratio
			}'
		done
	done
done
