#!/usr/bin/env bash
# Full ETMv4 decode of an OpenCSD snapshot (default bugfix-exact-match: 1 MiB
# of frames, 6 trace IDs, 1,740,344 instruction ranges, 7,581,461
# instructions) into trace elements, against OpenCSD's trc_pkt_lister
# (Debian libopencsd-bin) decoding the same, in the same run
# (docs/PERFORMANCE.md, "ETMv4 decode").
#
#   scripts/bench-etm-decode.sh
#   SNAP=../shared/opencsd-snapshots/juno_r1_1 RUNS=20 scripts/bench-etm-decode.sh
#
# Environment:
#   SNAP         snapshot directory (default ../shared/opencsd-snapshots/bugfix-exact-match)
#   RUNS         timed runs of each command (default 10)
#   SKIP_DIVAN=1 leave out the in-process divan benchmark (cargo bench -p etm --bench decode)
#
# Rows, all reading the snapshot (trace and memory dumps) from its files:
#   poketrace etm: decode, count        deformat, packets, flow decode; print the counts
#   poketrace etm: decode, elements     the same, element lines to a file (what -decode_only writes)
#   poketrace etm: decode, -decode      packet and element lines to a file (what -decode writes)
#   trc_pkt_lister -decode_only         element lines to a file (-logfilename)
#   trc_pkt_lister -decode              packet and element lines to a file
# The listings are compared first: the timed commands print the same lines.
# Timing: hyperfine when installed (median), else bash (median of the runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
SNAP="${SNAP:-$root/../shared/opencsd-snapshots/bugfix-exact-match}"
RUNS="${RUNS:-10}"
SNAP="$(realpath "$SNAP")"
if [[ ! -f "$SNAP/snapshot.ini" ]]; then
	echo "$0: no snapshot at $SNAP" >&2
	exit 1
fi
if ! command -v trc_pkt_lister >/dev/null; then
	echo "$0: trc_pkt_lister not found (apt-get install libopencsd-bin)" >&2
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== build" >&2
cargo build --release -p etm --example etm_decode >&2
ex="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/etm_decode"

echo "== check: the listings agree" >&2
"$ex" "$SNAP" >"$work/ours.ppl" 2>/dev/null
trc_pkt_lister -ss_dir "$SNAP" -decode -logfilename "$work/theirs.ppl" >/dev/null
grep -o 'Idx:.*' "$work/theirs.ppl" | sed 's/[[:space:]]*$//' >"$work/theirs.lines" || true
if ! diff -q "$work/theirs.lines" <(grep '^Idx:' "$work/ours.ppl" | sed 's/[[:space:]]*$//') >/dev/null; then
	echo "$0: our -decode listing differs from trc_pkt_lister's" >&2
	exit 1
fi
trc_pkt_lister -ss_dir "$SNAP" -decode_only -logfilename "$work/theirs-elements.ppl" >/dev/null
if ! diff -q <(grep -o 'Idx:.*OCSD_GEN_TRC_ELEM.*' "$work/theirs-elements.ppl" | sed 's/[[:space:]]*$//') \
	<("$ex" "$SNAP" --elements 2>/dev/null | sed 's/[[:space:]]*$//') >/dev/null; then
	echo "$0: our element lines differ from trc_pkt_lister -decode_only's" >&2
	exit 1
fi
counts="$("$ex" "$SNAP" --count 2>/dev/null)"
echo "$(wc -l <"$work/theirs.lines") lines agree; $counts" >&2

# name|command
cmds=(
	"poketrace etm: decode, count|$ex $SNAP --count > /dev/null 2>&1"
	"poketrace etm: decode, elements|$ex $SNAP --elements > $work/o1.ppl 2>/dev/null"
	"poketrace etm: decode, -decode listing|$ex $SNAP > $work/o2.ppl 2>/dev/null"
	"trc_pkt_lister -decode_only|trc_pkt_lister -ss_dir $SNAP -decode_only -logfilename $work/t1.ppl > /dev/null"
	"trc_pkt_lister -decode|trc_pkt_lister -ss_dir $SNAP -decode -logfilename $work/t2.ppl > /dev/null"
)

time_all() {
	local entry name cmd
	for entry in "${cmds[@]}"; do
		name="${entry%%|*}"
		cmd="${entry#*|}"
		if command -v hyperfine >/dev/null; then
			# trc_pkt_lister appends to its log: start each run afresh.
			hyperfine --style basic --warmup 1 --runs "$RUNS" --prepare "rm -f $work/t1.ppl $work/t2.ppl" \
				--export-json "$work/h.json" -n "$name" "$cmd" >&2
			python3 - "$work/h.json" "$name" <<-'EOF'
				import json, sys
				r = json.load(open(sys.argv[1]))["results"][0]
				print(f"{sys.argv[2]}\t{r['median']}\t{r['min']}\t{r['max']}\t{r['user'] + r['system']}")
			EOF
		else
			local i t0 t1 ts=()
			for ((i = 0; i < RUNS; i++)); do
				rm -f "$work/t1.ppl" "$work/t2.ppl"
				t0=$(date +%s.%N)
				bash -c "$cmd"
				t1=$(date +%s.%N)
				ts+=("$(echo "$t1 - $t0" | bc -l)")
			done
			printf '%s\n' "${ts[@]}" | sort -g | awk -v n="$name" '{a[NR] = $1} END {printf "%s\t%s\t%s\t%s\t-\n", n, a[int((NR + 1) / 2)], a[1], a[NR]}'
		fi
	done
}

echo "== time ($RUNS runs each)" >&2
time_all >"$work/times.tsv"

divan=""
if [[ "${SKIP_DIVAN:-0}" != 1 ]]; then
	echo "== divan (in process)" >&2
	divan="$(POKETRACE_OPENCSD_SNAPSHOTS="$(dirname "$SNAP")" cargo bench -p etm --bench decode 2>&1 | grep -E '^(├|╰|│)' || true)"
fi

python3 - "$work/times.tsv" "$(basename "$SNAP")" "$counts" <<'EOF'
import sys
path, snap, counts = sys.argv[1], sys.argv[2], sys.argv[3]
insns = int(counts.split()[4])
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
t = {r[0]: (float(r[1]), float(r[2]), float(r[3]), None if r[4] == "-" else float(r[4])) for r in rows}
ref, _, _, ref_cpu = t["trc_pkt_lister -decode_only"]
print(f"\n{snap}: {counts}\n")
print("| command | wall s, median (min-max) | CPU s (user+sys) | M instructions/s (wall) | vs trc_pkt_lister -decode_only, wall | CPU |")
print("|---|---|---|---|---|---|")
for name, (med, lo, hi, cpu) in t.items():
    c = f"{cpu:.3f}" if cpu is not None else "-"
    vc = f"{ref_cpu / cpu:.1f}x" if cpu and ref_cpu else "-"
    print(f"| {name} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {c} | {insns / med / 1e6:.1f} | {ref / med:.1f}x | {vc} |")
print("\n(vs trc_pkt_lister -decode_only: how many times faster; whole processes, files read and written)")
EOF
if [[ -n "$divan" ]]; then
	printf '\nIn process (divan, cargo bench -p etm --bench decode):\n\n```\n%s\n```\n' "$divan"
fi
