#!/usr/bin/env bash
# Benchmark (not a test) of the Dask driver on this machine (docs/PERFORMANCE.md, "Decoding on a
# Dask cluster"): the same trace exported by 1 and by 2 local worker processes (one core each:
# RAYON_NUM_THREADS=1), and by one `poketrace export` process as the anchor; MB of trace a second
# a worker, in wall and in CPU time (user + sys of the export processes); the fixed cost of a
# unit, from a run of one-PSB-segment units (a few KB each, their decode almost free) and from one
# such unit of the big trace exported alone. Needs GNU time (/usr/bin/time).
#
#   scripts/distributed/bench.sh
#   INSNS=2000000 RUNS=3 scripts/distributed/bench.sh
#
# Environment: BIN (a poketrace binary; default this tree's release build), CPUS and INSNS (the
# simulated trace: CPUs x instructions each, default 4 x 8M, 19.2 MB), TARGET (bytes a unit,
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

# Seconds from START to END, divided by N (default 1).
elapsed() { python3 -c 'import sys; print(round((float(sys.argv[2]) - float(sys.argv[1])) / float(sys.argv[3]), 4))' "$1" "$2" "${3:-1}"; }

# One driver run: its JSON summary, with the workers and the wall time of the whole command.
drive() { # NAME TRACE TARGET WORKERS (RAYON_NUM_THREADS from the caller reaches the workers)
	local start end
	rm -rf "$work/out"
	start=$EPOCHREALTIME
	python3 scripts/distributed/poketrace_dask.py "$2" -o "$work/out" --local "$4" --target-bytes "$3" --poketrace "$BIN" |
		python3 -c 'import json, sys; s = json.load(sys.stdin); s.update(name=sys.argv[1], workers=int(sys.argv[2])); print(json.dumps(s))' "$1" "$4" >>"$work/runs.jsonl"
	end=$EPOCHREALTIME
	echo "  $1, $4 worker(s): $(tail -n1 "$work/runs.jsonl"), command $(elapsed "$start" "$end") s"
}

# One poketrace run as a JSON line: NAME, wall seconds and CPU seconds (user + sys: on a shared
# machine wall time says as much about the neighbours as about the program).
timed() { # NAME COMMAND...
	local name=$1
	shift
	/usr/bin/time -f '%e %U %S' -o "$work/time" "$@" >/dev/null 2>&1
	read -r wall user sys <"$work/time"
	echo "{\"name\": \"$name\", \"seconds\": $wall, \"cpu_seconds\": $(python3 -c "print($user + $sys)")}" | tee -a "$work/runs.jsonl"
}

# One unit of a single PSB segment of the big trace, exported alone: the fixed cost on a big file.
first=$("$BIN" segments "$work/big" --json --target-bytes 1 | head -n1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
for ((r = 1; r <= RUNS; r++)); do
	echo "round $r"
	rm -rf "$work/out"
	timed single "$BIN" export "$work/big" --format parquet -o "$work/out" --target-bytes "$TARGET"
	for ((i = 0; i < 3; i++)); do
		RAYON_NUM_THREADS=1 timed one_small_unit_of_big "$BIN" export "$work/big" --format parquet -o "$work/out" --segment "$first"
	done
	# Each worker one core: an export's PSB segments on one thread.
	for w in $WORKERS; do
		RAYON_NUM_THREADS=1 drive big "$work/big" "$TARGET" "$w"
		RAYON_NUM_THREADS=1 drive small "$work/small" 1 "$w"
	done
done
python3 scripts/distributed/bench_summary.py "$work/runs.jsonl"
