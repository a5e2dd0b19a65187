#!/usr/bin/env bash
# Read throughput of perfdata against `perf report -D` and the linux-perf-data
# crate, on the same generated perf.data in the same run (docs/PERFORMANCE.md).
#
#   scripts/bench-read.sh                 # 10M records (~650 MB)
#   N=1000000 RUNS=5 scripts/bench-read.sh
#
# Environment:
#   N          records in the big file (default 10000000)
#   RUNS       timed runs of each reader (default 5); perf report -D gets
#              PERF_RUNS (default 3): at 10M records one run takes 1.5-2.5 min
#   SMALL_N    records in the callgrind file (default 100000)
#   BENCH_DIR  where the files go (default target/bench-tmp); they are
#              deleted at the end unless KEEP=1
#   SKIP_PERF=1      leave out perf report -D (timing and callgrind)
#   SKIP_CALLGRIND=1 leave out the callgrind instruction counts
#   SKIP_DUMP=1      leave out `poketrace dump` (a text dump of every record,
#                    the closer analogue of perf report -D; also left out when
#                    the poketrace binary does not build)
#
# Timing: the median of RUNS runs, interleaved across the readers (see
# time_all; TIMER=hyperfine to use hyperfine). Wall time, and user+sys CPU
# time which other load on the machine disturbs less. The page cache is
# warmed first; every reader opens the file and walks all records.
# MB = 10^6 bytes of the whole file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

N="${N:-10000000}"
RUNS="${RUNS:-5}"
PERF_RUNS="${PERF_RUNS:-3}"
SMALL_N="${SMALL_N:-100000}"
BENCH_DIR="${BENCH_DIR:-$root/target/bench-tmp}"
case "$(realpath -m "$BENCH_DIR")/" in
/tmp/perf-*)
	echo "$0: BENCH_DIR must not start with /tmp/perf- (perf takes those for JIT maps)" >&2
	exit 2
	;;
esac
mkdir -p "$BENCH_DIR"
work="$(mktemp -d "$BENCH_DIR/run.XXXXXX")"
cleanup() {
	if [[ "${KEEP:-0}" == 1 ]]; then
		echo "kept: $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
# perf keeps a build-id cache in ~/.debug and reads ~/.perfconfig: keep both private
mkdir -p "$work/home"
export PERF_HOME="$work/home"
perf_env=(env HOME="$PERF_HOME" PERF_CONFIG=/dev/null)

need_mb=$(((N * 70 + SMALL_N * 70) / 1000000 + 100))
avail_mb=$(df -Pm "$BENCH_DIR" | awk 'NR==2 {print $4}')
if ((avail_mb < need_mb)); then
	echo "$0: $BENCH_DIR has ${avail_mb} MB free, need about ${need_mb} MB" >&2
	exit 1
fi

echo "== build" >&2
cargo build --release -p perfdata --example gen_big --example read_perfdata --example read_linux_perf_data >&2
have_dump=0
if [[ "${SKIP_DUMP:-0}" != 1 ]]; then
	if cargo build --release -p poketrace >&2; then have_dump=1; else echo "(poketrace does not build: no dump row)" >&2; fi
fi
ex="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples"

big="$work/big.data"
small="$work/small.data"
echo "== generate $N records" >&2
"$ex/gen_big" "$big" "$N" 2>"$work/gen.txt"
"$ex/gen_big" "$small" "$SMALL_N" 2>/dev/null
bytes=$(stat -c %s "$big")
cat "$work/gen.txt" >&2

have_perf=0
if [[ "${SKIP_PERF:-0}" != 1 ]] && command -v perf >/dev/null; then have_perf=1; fi

# The readers must agree: same records (linux-perf-data does not return
# FINISHED_ROUND), same times, and the sorted readers the same order.
echo "== check" >&2
pd="$("$ex/read_perfdata" "$big")"
pds="$("$ex/read_perfdata" "$big" --sorted)"
lpd="$("$ex/read_linux_perf_data" "$big")"
printf '%s\n' "perfdata:        $pd" "perfdata sorted: $pds" "linux-perf-data: $lpd" >&2
field() { awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$1"; }
rounds=$(awk '$1 == "FINISHED_ROUND:" {print $2}' "$work/gen.txt")
if [[ "$(field "$pd" records)" != "$N" || "$(field "$lpd" records)" != "$((N - rounds))" ||
	"$(field "$pd" time_sum)" != "$(field "$lpd" time_sum)" ||
	"$(field "$pds" time_order)" != "$(field "$lpd" time_order)" ]]; then
	echo "$0: the readers disagree" >&2
	exit 1
fi
if ((have_perf)); then
	"${perf_env[@]}" perf report -D -i "$big" 2>"$work/perf-err.txt" | tail -n 40 >"$work/perf-stats.txt"
	total=$(awk '/TOTAL events:/ {print $3; exit}' "$work/perf-stats.txt")
	echo "perf report -D: TOTAL events $total; stderr:" >&2
	sed 's/^/  | /' "$work/perf-err.txt" >&2
	if [[ "$total" != "$N" ]] || grep -qiE 'error|fail|invalid|corrupt|below last' "$work/perf-err.txt"; then
		echo "$0: perf report -D does not read the file cleanly" >&2
		exit 1
	fi
fi

cat "$big" >/dev/null # warm the page cache

# name|command
cmds=()
if ((have_perf)); then
	cmds+=("perf report -D|${perf_env[*]} perf report -D -i $big > /dev/null")
fi
cmds+=(
	"perfdata records()|$ex/read_perfdata $big"
	"perfdata sorted_records()|$ex/read_perfdata $big --sorted"
	"linux-perf-data (BufReader)|$ex/read_linux_perf_data $big"
	"linux-perf-data (mmap)|$ex/read_linux_perf_data $big --mmap"
)
if ((have_dump)); then
	cmds+=("poketrace dump|$ex/../poketrace dump $big > /dev/null")
fi

# Prints "name<TAB>median wall s<TAB>min<TAB>max<TAB>median user+sys s" for
# each command. Runs are interleaved (round 1: every command once, round 2:
# ...), so that load from other processes on a shared machine falls on every
# reader alike; perf report -D takes part in the first PERF_RUNS rounds.
# TIMER=hyperfine times each command with hyperfine instead (all its runs in a
# row).
time_all() {
	if [[ "${TIMER:-}" == hyperfine ]] && command -v hyperfine >/dev/null; then
		local entry name cmd runs
		for entry in "${cmds[@]}"; do
			name="${entry%%|*}"
			cmd="${entry#*|}"
			runs=$RUNS
			[[ "$name" == "perf report -D" ]] && runs=$PERF_RUNS
			hyperfine --style basic --warmup 0 --runs "$runs" --export-json "$work/h.json" -n "$name" "$cmd" >&2
			python3 - "$work/h.json" "$name" <<-'EOF'
				import json, statistics, sys
				r = json.load(open(sys.argv[1]))["results"][0]
				cpu = statistics.median(u + s for u, s in zip(r["user"], r["system"]))
				print(f"{sys.argv[2]}\t{r['median']}\t{r['min']}\t{r['max']}\t{cpu}")
			EOF
		done
		return
	fi
	printf '%s\n' "${cmds[@]}" | python3 -c '
import os, statistics, subprocess, sys, time
runs, perf_runs = int(sys.argv[1]), int(sys.argv[2])
cmds = [l.rstrip("\n").split("|", 1) for l in sys.stdin if l.strip()]
wall = {n: [] for n, _ in cmds}
cpu = {n: [] for n, _ in cmds}
for r in range(max(runs, perf_runs)):
    for name, cmd in cmds:
        if r >= (perf_runs if name == "perf report -D" else runs):
            continue
        t0 = time.perf_counter()
        p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        t = time.perf_counter() - t0
        if status != 0:
            sys.exit(f"failed: {cmd}")
        wall[name].append(t)
        cpu[name].append(ru.ru_utime + ru.ru_stime)
        print(f"  round {r + 1}: {name}: {t:.3f} s wall, {ru.ru_utime + ru.ru_stime:.3f} s cpu", file=sys.stderr)
for name, _ in cmds:
    w = wall[name]
    print(f"{name}\t{statistics.median(w)}\t{min(w)}\t{max(w)}\t{statistics.median(cpu[name])}")
' "$RUNS" "$PERF_RUNS"
}

echo "== time ($RUNS runs each, perf report -D $PERF_RUNS)" >&2
time_all >"$work/times.tsv"

# callgrind NAME CMD...: the instructions CMD executes (Ir), whole process.
callgrind() {
	local name="$1"
	shift
	"${perf_env[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$@" 2>&1 >/dev/null |
		awk -v n="$name" '/Collected :/ {print n "\t" $NF}'
}
if [[ "${SKIP_CALLGRIND:-0}" != 1 ]] && command -v valgrind >/dev/null; then
	echo "== callgrind ($SMALL_N records)" >&2
	{
		if ((have_perf)); then callgrind "perf report -D" perf report -D -i "$small"; fi
		callgrind "perfdata records()" "$ex/read_perfdata" "$small"
		callgrind "perfdata sorted_records()" "$ex/read_perfdata" "$small" --sorted
		callgrind "linux-perf-data (BufReader)" "$ex/read_linux_perf_data" "$small"
		callgrind "linux-perf-data (mmap)" "$ex/read_linux_perf_data" "$small" --mmap
		if ((have_dump)); then callgrind "poketrace dump" "$ex/../poketrace" dump "$small"; fi
	} >"$work/callgrind.tsv"
else
	: >"$work/callgrind.tsv"
fi

python3 - "$work/times.tsv" "$work/callgrind.tsv" "$bytes" "$N" "$SMALL_N" <<'EOF'
import sys
times_path, cg_path, size, n, small_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [l.rstrip("\n").split("\t") for l in open(times_path) if l.strip()]
t = {r[0]: tuple(float(x) for x in r[1:5]) for r in rows}
perf = t.get("perf report -D")
lpd = t["linux-perf-data (BufReader)"]
print(f"\nfile: {n} records, {size} bytes ({size / 1e6:.0f} MB)\n")
print("| reader | wall s, median (min-max) | CPU s, median | MB/s wall / CPU | Mrecords/s wall / CPU | vs perf report -D, wall / CPU | vs linux-perf-data, wall / CPU |")
print("|---|---|---|---|---|---|---|")
for name, (med, lo, hi, cpu) in t.items():
    vp = f"{perf[0] / med:.1f}x / {perf[3] / cpu:.1f}x" if perf else "-"
    vl = f"{lpd[0] / med:.2f}x / {lpd[3] / cpu:.2f}x"
    print(f"| {name} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {cpu:.3f} | {size / med / 1e6:.0f} / {size / cpu / 1e6:.0f} | {n / med / 1e6:.2f} / {n / cpu / 1e6:.2f} | {vp} | {vl} |")
cg = [l.rstrip("\n").split("\t") for l in open(cg_path) if l.strip()]
if cg:
    ref = dict(cg).get("linux-perf-data (BufReader)")
    print(f"\ncallgrind, {small_n} records (whole process):\n")
    print("| reader | instructions | per record | vs linux-perf-data |")
    print("|---|---|---|---|")
    for name, ir in cg:
        ir = int(ir)
        vs = f"{int(ref) / ir:.2f}x" if ref else "-"
        print(f"| {name} | {ir:,} | {ir / small_n:.0f} | {vs} |")
print("\n(ratios: how many times faster than the reference; below 1 is slower)")
EOF
