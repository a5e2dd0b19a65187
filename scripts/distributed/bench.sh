#!/usr/bin/env bash
# Benchmark (not a test) of the Dask driver on this machine (docs/PERFORMANCE.md, "Decoding on a
# Dask cluster"): the same trace exported by 1 and by 2 local worker processes, and by one
# `poketrace export` process as the anchor; MB of trace a second a worker; the fixed cost of a
# unit, from a run of one-PSB-segment units (a few KB each, their decode almost free).
#
#   scripts/distributed/bench.sh
#   INSNS=2000000 RUNS=3 scripts/distributed/bench.sh
#
# Environment: BIN (a poketrace binary; default this tree's release build), CPUS and INSNS (the
# simulated trace: CPUs x instructions each, default 4 x 8M, about 18 MB), TARGET (bytes a unit,
# default 1 MiB), SMALL_INSNS (instructions a CPU of the fixed-cost trace, default 200000),
# WORKERS (default "1 2"), RUNS (default 1), PYTHONPATH (the packages setup.sh --tests installs:
# the default).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CPUS=${CPUS:-4}
INSNS=${INSNS:-8000000}
TARGET=${TARGET:-1048576}
SMALL_INSNS=${SMALL_INSNS:-200000}
WORKERS=${WORKERS:-1 2}
RUNS=${RUNS:-1}
export PYTHONPATH=${PYTHONPATH:-${POKETRACE_CACHE:-$HOME/.cache/poketrace}/python-distributed}
if [[ -z ${BIN:-} ]]; then
	cargo build --release -q -p poketrace
	BIN=target/release/poketrace
fi
BIN=$(realpath "$BIN")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$BIN" simulate --cpus "$CPUS" --instructions "$INSNS" --pokes 200 --seed 1 -o "$work/big" >/dev/null
"$BIN" simulate --cpus "$CPUS" --instructions "$SMALL_INSNS" --pokes 200 --seed 1 -o "$work/small" >/dev/null
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# One driver run: its JSON summary, with the workers and the wall time of the whole command.
drive() { # NAME TRACE TARGET WORKERS
	local start end
	rm -rf "$work/out"
	start=$(date +%s.%N)
	python3 scripts/distributed/poketrace_dask.py "$2" -o "$work/out" --local "$4" --target-bytes "$3" --poketrace "$BIN" |
		python3 -c 'import json, sys; s = json.load(sys.stdin); s.update(name=sys.argv[1], workers=int(sys.argv[2])); print(json.dumps(s))' "$1" "$4" >>"$work/runs.jsonl"
	end=$(date +%s.%N)
	echo "  $1, $4 worker(s): $(tail -n1 "$work/runs.jsonl"), command $(echo "$end - $start" | bc) s"
}

for ((r = 1; r <= RUNS; r++)); do
	echo "round $r"
	rm -rf "$work/out"
	start=$(date +%s.%N)
	"$BIN" export "$work/big" --format parquet -o "$work/out" >/dev/null
	end=$(date +%s.%N)
	echo "{\"name\": \"single\", \"seconds\": $(echo "$end - $start" | bc)}" >>"$work/runs.jsonl"
	echo "  one export process: $(echo "$end - $start" | bc) s"
	for w in $WORKERS; do
		drive big "$work/big" "$TARGET" "$w"
		drive small "$work/small" 1 "$w"
	done
done
python3 scripts/distributed/bench_summary.py "$work/runs.jsonl"
