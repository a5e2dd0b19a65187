#!/usr/bin/env bash
# `poketrace decode` against `perf script` on the same simulated perf.data
# (Intel PT, 4 CPUs, static code: where code is poked, perf reads it at
# other times than we do and the branches may differ), in the same run:
# wall clock and peak memory of each, after checking that both print the
# same branch lines per CPU (docs/PERFORMANCE.md, "poketrace decode against
# perf script").
#
#   scripts/bench-decode-vs-perf.sh
#   INSNS=1000000 RUNS=5 scripts/bench-decode-vs-perf.sh
#   LINES=insns INSNS=1000000 scripts/bench-decode-vs-perf.sh
#
# Environment:
#   INSNS   instructions per CPU (default 4000000)
#   RUNS    timed runs of each command, fastest kept (default 3)
#   LINES   branches (default: --itrace=be -F cpu,time,ip,addr,flags) or
#           insns (every instruction: perf's --itrace=i1i, ours --itrace=i,
#           -F cpu,time,ip,sym)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
INSNS="${INSNS:-4000000}"
RUNS="${RUNS:-3}"
command -v perf >/dev/null || { echo "needs perf (Debian linux-perf)" >&2; exit 1; }
cargo build --release -q -p poketrace
bin=target/release/poketrace
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home"
"$bin" simulate --cpus 4 --instructions "$INSNS" --pokes 0 --protocol none -o "$work/run" >&2
case "${LINES:-branches}" in
branches) perf_itrace=--itrace=be ours_itrace=--itrace=be fields=(-F cpu,time,ip,addr,flags --ns) ;;
insns) perf_itrace=--itrace=i1i ours_itrace=--itrace=i fields=(-F cpu,time,ip,sym --ns) ;;
*) echo "LINES: branches or insns" >&2; exit 1 ;;
esac
perf_script() { HOME="$work/home" PERF_CONFIG=/dev/null perf script -i "$work/run" "$perf_itrace" "${fields[@]}"; }
# (Exit 1: decoded, with errors or losses; the lines are still compared.)
ours() { "$bin" decode "$work/run" --image perf "$ours_itrace" "${fields[@]}" || (($? == 1)); }
# The same lines, CPU by CPU (times differ where perf stamps a branch with
# a timing packet read after it; see perf_oracle.rs).
perf_script 2>/dev/null | awk '{ $2 = ""; print }' | sort -s -k1,1 > "$work/perf.txt"
ours 2>/dev/null | awk '{ $2 = ""; print }' | sort -s -k1,1 > "$work/ours.txt"
cmp -s "$work/perf.txt" "$work/ours.txt" || { echo "perf script and poketrace decode differ" >&2; exit 1; }
echo "$(wc -l < "$work/ours.txt") lines each, the same lines per CPU" >&2
# Fastest of $RUNS: "seconds peak-KB" of the command given.
best() {
    local t m best_t="" best_m=""
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -o "$work/time" -f "%e %M" "$@" > /dev/null 2>&1 || (($? == 1))
        read -r t m < "$work/time"
        if [[ -z "$best_t" ]] || awk "BEGIN { exit !($t < $best_t) }"; then best_t="$t"; best_m="$m"; fi
    done
    echo "$best_t $best_m"
}
read -r pt pm < <(best env HOME="$work/home" PERF_CONFIG=/dev/null perf script -i "$work/run" "$perf_itrace" "${fields[@]}")
read -r ot om < <(best "$bin" decode "$work/run" --image perf "$ours_itrace" "${fields[@]}")
echo "| command | time (fastest of $RUNS) | peak memory |"
echo "|---|---|---|"
echo "| perf script $perf_itrace | $pt s | $((pm / 1024)) MB |"
echo "| poketrace decode $ours_itrace --image perf | $ot s | $((om / 1024)) MB |"
echo "poketrace decode: $(awk -v a="$pt" -v b="$ot" 'BEGIN { printf "%.2f", a / b }')x perf script's speed"
