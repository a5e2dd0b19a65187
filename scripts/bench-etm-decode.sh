#!/usr/bin/env bash
# Full ETMv4 decode of an OpenCSD snapshot (default bugfix-exact-match: 1 MiB
# of frames, 6 trace IDs, 1,740,344 instruction ranges, 7,581,461
# instructions) into trace elements, against OpenCSD's trc_pkt_lister
# (Debian libopencsd-bin) decoding the same, in the same run
# (docs/PERFORMANCE.md, "ETMv4 packets and decode").
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
. scripts/lib/bench-snapshot.sh
bench_setup

echo "== build" >&2
ex="$(bench_example etm_decode)"

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

echo "== time ($RUNS runs each)" >&2
bench_time "$work/t1.ppl" "$work/t2.ppl" >"$work/times.tsv"
divan="$(bench_divan decode)"
insns="$(echo "$counts" | awk '{print $5}')"
bench_table "$work/times.tsv" "$(basename "$SNAP"): $counts" "trc_pkt_lister -decode_only" "M instructions/s" "$insns" \
	"vs trc_pkt_lister -decode_only: how many times faster; whole processes, files read and written"
if [[ -n "$divan" ]]; then
	printf '\nIn process (divan, cargo bench -p etm --bench decode):\n\n```\n%s\n```\n' "$divan"
fi
