#!/usr/bin/env bash
# `poketrace export --format parquet` against `poketrace decode --json >
# /dev/null` on the same input, whole processes, alternating, RUNS rounds
# (docs/PERFORMANCE.md, the export row).
#
#   scripts/bench-export.sh DIR                 # e.g. ~/.cache/poketrace/bench-decode/kernel4
#   RUNS=5 BIN=path/to/poketrace scripts/bench-export.sh DIR
#
# Prints each run's wall, user and sys seconds and peak RSS (KB), the last
# summary lines, and the size of the Parquet output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
input=${1:?usage: scripts/bench-export.sh PERF_DATA_DIR}
RUNS=${RUNS:-3}
if [[ -z ${BIN:-} ]]; then
	cargo build --release -q -p poketrace
	BIN=target/release/poketrace
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$RUNS"); do
	/usr/bin/time -f "decode --json  wall %e user %U sys %S rss %M" "$BIN" decode "$input" --json >/dev/null 2>"$work/decode.err" || true
	tail -1 "$work/decode.err"
	/usr/bin/time -f "export         wall %e user %U sys %S rss %M" "$BIN" export "$input" -o "$work/out" 2>"$work/export.err" || true
	tail -1 "$work/export.err"
done
grep -h "^poketrace" "$work/decode.err" "$work/export.err" | tail -2
du -sh "$work/out"
