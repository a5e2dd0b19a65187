#!/usr/bin/env bash
# `poketrace profile --format bolt` against BOLT's and perf's own paths from
# Intel PT to a profile, whole processes on the same trace in the same run
# (docs/PERFORMANCE.md): perf2bolt with --itrace (it runs `perf script`),
# and `perf inject --itrace=il64` (branch-stack samples for create_llvm_prof
# and perf2bolt).
#
#   scripts/bench-profile.sh
#   RUNS=3 ITRACE=i100il64 scripts/bench-profile.sh
#
# Input: one CPU of random walks through /usr/bin/perf, 32 MB of trace,
# simulated once into ${XDG_CACHE_HOME:-~/.cache}/poketrace/bench-decode/perf1-32mb
# (shared with scripts/bench-decode.sh). Prints per program the fastest and
# median wall time and the least CPU time (user + sys, children included).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-3}
ITRACE=${ITRACE:-il64}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/poketrace/bench-decode
dir=$cache/perf1-32mb
if [[ -z ${BIN:-} ]]; then
	cargo build --release -q -p poketrace
	BIN=target/release/poketrace
fi
if [[ ! -f $dir/data ]]; then
	rm -rf "$dir"
	"$BIN" simulate --cpus 1 --elf /usr/bin/perf --instructions $((32 * 3700000)) -o "$dir" >&2
	rm -f "$dir"/truth/*.bin
fi
perf2bolt=$(command -v perf2bolt-19 >/dev/null && echo /usr/lib/llvm-19/bin/perf2bolt || echo perf2bolt)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home"
declare -A cmds=(
	[profile]="$BIN profile $dir --format bolt --binary /usr/bin/perf -o $work/out.preagg"
	[perf2bolt]="$perf2bolt -p $dir/data --itrace=$ITRACE /usr/bin/perf -o $work/out.fdata --ignore-build-id --allow-stripped"
	[inject]="perf inject -i $dir/data --itrace=$ITRACE -o $work/inject.data"
)
programs=(profile perf2bolt inject)
for ((r = 0; r < RUNS; r++)); do
	for p in "${programs[@]}"; do
		# shellcheck disable=SC2086
		HOME=$work/home PERF_CONFIG=/dev/null /usr/bin/time -f "%e %U %S" -o "$work/time.$p.$r" ${cmds[$p]} >/dev/null 2>"$work/$p.err" ||
			{ echo "$p failed:" >&2; tail -5 "$work/$p.err" >&2; exit 1; }
	done
done
echo "trace: $(du -b "$dir/data" | cut -f1) bytes, $RUNS runs, itrace $ITRACE"
for p in "${programs[@]}"; do
	mapfile -t walls < <(cut -d' ' -f1 "$work/time.$p".* | sort -n)
	cpu=$(awk '{ c = $2 + $3; if (NR == 1 || c < m) m = c } END { printf "%.2f", m }' "$work/time.$p".*)
	printf '%-10s wall fastest %s s, median %s s; CPU least %s s\n' "$p" "${walls[0]}" "${walls[$(((${#walls[@]} - 1) / 2))]}" "$cpu"
done
