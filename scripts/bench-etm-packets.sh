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
. scripts/lib/bench-snapshot.sh
bench_setup

echo "== build" >&2
ex="$(bench_example etm_packets)"

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

echo "== time ($RUNS runs each)" >&2
bench_time "$work/t1.ppl" "$work/trc_pkt_lister.ppl" >"$work/times.tsv"
divan="$(bench_divan packets)"
bench_table "$work/times.tsv" "$(basename "$SNAP"): $bytes bytes of trace, $packets packets" "trc_pkt_lister" "Mpackets/s" "$packets" \
	"vs trc_pkt_lister: how many times faster than its packets-only listing; whole processes, files read and written"
if [[ -n "$divan" ]]; then
	printf '\nIn process (divan, cargo bench -p etm --bench packets):\n\n```\n%s\n```\n' "$divan"
fi
