#!/usr/bin/env bash
# ETMv4 packet decoding of an OpenCSD snapshot (default bugfix-exact-match:
# 1 MiB of frames, 6 trace IDs, 687,775 packets) against OpenCSD's
# trc_pkt_lister (Debian libopencsd-bin) listing the same packets, in the
# same run (docs/PERFORMANCE.md).
#
#   scripts/bench-etm-packets.sh
#   SNAP=../shared/opencsd-snapshots/juno_r1_1 RUNS=20 scripts/bench-etm-packets.sh
#
# Environment:
#   SNAP         snapshot directory (default ../shared/opencsd-snapshots/bugfix-exact-match)
#   RUNS         timed runs of each command (default 10)
#   SKIP_DIVAN=1 leave out the in-process divan benchmark (cargo bench -p etm)
#
# Rows, all reading the snapshot from its files:
#   poketrace etm: decode only      deformat + decode every packet, print a count
#   poketrace etm: packets listing  the same, printing trc_pkt_lister's packets-only listing to a file
#   poketrace etm: -decode listing  the same with raw bytes (trc_pkt_lister -decode's packet lines)
#   trc_pkt_lister                  packets only (no -decode), listing to a file (-logfilename)
#   trc_pkt_lister (stdout + file)  its default output: the listing to stdout and trc_pkt_lister.ppl
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
cargo build --release -p etm --example etm_packets >&2
ex="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/etm_packets"

echo "== check: the listings agree" >&2
"$ex" "$SNAP" --packets-only >"$work/ours.ppl"
trc_pkt_lister -ss_dir "$SNAP" -logfilename "$work/theirs.ppl" >/dev/null
grep -o 'Idx:.*' "$work/theirs.ppl" >"$work/theirs.lines" || true
if ! diff -q <(sed 's/[[:space:]]*$//' "$work/theirs.lines") <(grep '^Idx:' "$work/ours.ppl" | sed 's/[[:space:]]*$//') >/dev/null; then
	echo "$0: our packets-only listing differs from trc_pkt_lister's" >&2
	exit 1
fi
packets="$("$ex" "$SNAP" --count | awk '{print $1}')"
bytes="$(stat -c %s "$(python3 - "$SNAP" <<'EOF'
import configparser, os, sys
d = sys.argv[1]
snap = configparser.ConfigParser(strict=False); snap.read(os.path.join(d, "snapshot.ini"))
meta = configparser.ConfigParser(strict=False); meta.read(os.path.join(d, snap["trace"]["metadata"]))
first = meta["trace_buffers"]["buffers"].split(",")[0].strip()
print(os.path.join(d, meta[first]["file"]))
EOF
)")"
echo "$(wc -l <"$work/theirs.lines") lines agree; $packets packets in $bytes bytes" >&2

# name|command
cmds=(
	"poketrace etm: decode only|$ex $SNAP --count > /dev/null"
	"poketrace etm: packets listing|$ex $SNAP --packets-only > $work/o1.ppl"
	"poketrace etm: -decode listing|$ex $SNAP > $work/o2.ppl"
	"trc_pkt_lister|trc_pkt_lister -ss_dir $SNAP -logfilename $work/t1.ppl > /dev/null"
	"trc_pkt_lister (stdout + file)|cd $work && trc_pkt_lister -ss_dir $SNAP > /dev/null"
)

time_all() {
	local entry name cmd
	for entry in "${cmds[@]}"; do
		name="${entry%%|*}"
		cmd="${entry#*|}"
		if command -v hyperfine >/dev/null; then
			# trc_pkt_lister appends to its log: start each run afresh.
			hyperfine --style basic --warmup 1 --runs "$RUNS" --prepare "rm -f $work/t1.ppl $work/trc_pkt_lister.ppl" \
				--export-json "$work/h.json" -n "$name" "$cmd" >&2
			python3 - "$work/h.json" "$name" <<-'EOF'
				import json, sys
				r = json.load(open(sys.argv[1]))["results"][0]
				print(f"{sys.argv[2]}\t{r['median']}\t{r['min']}\t{r['max']}\t{r['user'] + r['system']}")
			EOF
		else
			local i t0 t1 ts=()
			for ((i = 0; i < RUNS; i++)); do
				rm -f "$work/t1.ppl" "$work/trc_pkt_lister.ppl"
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
	divan="$(POKETRACE_OPENCSD_SNAPSHOTS="$(dirname "$SNAP")" cargo bench -p etm --bench packets 2>&1 | grep -E '^(├|╰|│)' || true)"
fi

python3 - "$work/times.tsv" "$bytes" "$packets" "$(basename "$SNAP")" <<'EOF'
import sys
path, size, packets, snap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
t = {r[0]: (float(r[1]), float(r[2]), float(r[3]), None if r[4] == "-" else float(r[4])) for r in rows}
ref, _, _, ref_cpu = t["trc_pkt_lister"]
print(f"\n{snap}: {size} bytes of trace, {packets} packets\n")
print("| command | wall s, median (min-max) | CPU s (user+sys) | Mpackets/s (wall) | vs trc_pkt_lister, wall | CPU |")
print("|---|---|---|---|---|---|")
for name, (med, lo, hi, cpu) in t.items():
    c = f"{cpu:.3f}" if cpu is not None else "-"
    vc = f"{ref_cpu / cpu:.1f}x" if cpu and ref_cpu else "-"
    print(f"| {name} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {c} | {packets / med / 1e6:.2f} | {ref / med:.1f}x | {vc} |")
print("\n(vs trc_pkt_lister: how many times faster than its packets-only listing; whole processes, files read and written)")
EOF
if [[ -n "$divan" ]]; then
	printf '\nIn process (divan, cargo bench -p etm --bench packets):\n\n```\n%s\n```\n' "$divan"
fi
