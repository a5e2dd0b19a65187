# Shared by scripts/bench-etm-*.sh (sourced): snapshot set-up, timing of
# "name|command" rows and the ratio table. Not run on its own.

# Sets SNAP (absolute), RUNS and a work directory removed on exit; fails
# without a snapshot or trc_pkt_lister.
bench_setup() {
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
}

# Builds an etm example in release mode and prints its path.
bench_example() {
	cargo build --release -p etm --example "$1" >&2
	echo "$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/$1"
}

# Times each "name|command" of the array `cmds`, RUNS runs each, deleting
# the files given as arguments before every run (trc_pkt_lister appends to
# its log). Prints name, median, min, max and user+sys CPU seconds (- when
# unknown), tab-separated. hyperfine when installed, else bash timing.
bench_time() {
	local entry name cmd
	for entry in "${cmds[@]}"; do
		name="${entry%%|*}"
		cmd="${entry#*|}"
		if command -v hyperfine >/dev/null; then
			hyperfine --style basic --warmup 1 --runs "$RUNS" --prepare "rm -f $*" \
				--export-json "$work/h.json" -n "$name" "$cmd" >&2
			python3 - "$work/h.json" "$name" <<-'EOF'
				import json, sys
				r = json.load(open(sys.argv[1]))["results"][0]
				print(f"{sys.argv[2]}\t{r['median']}\t{r['min']}\t{r['max']}\t{r['user'] + r['system']}")
			EOF
		else
			local i t0 t1 ts=()
			for ((i = 0; i < RUNS; i++)); do
				rm -f "$@"
				t0=$(date +%s.%N)
				bash -c "$cmd"
				t1=$(date +%s.%N)
				ts+=("$(echo "$t1 - $t0" | bc -l)")
			done
			printf '%s\n' "${ts[@]}" | sort -g | awk -v n="$name" '{a[NR] = $1} END {printf "%s\t%s\t%s\t%s\t-\n", n, a[int((NR + 1) / 2)], a[1], a[NR]}'
		fi
	done
}

# The in-process divan benchmark's lines, unless SKIP_DIVAN=1.
bench_divan() {
	if [[ "${SKIP_DIVAN:-0}" != 1 ]]; then
		echo "== divan (in process)" >&2
		POKETRACE_OPENCSD_SNAPSHOTS="$(dirname "$SNAP")" cargo bench -p etm --bench "$1" 2>&1 | grep -E '^(├|╰|│)' || true
	fi
}

# The markdown table of bench_time's output TSV: TITLE, the reference row's
# name, the rate column's heading, the units per run (rate = units / median
# / 1e6), then a closing note. Ratios say how many times faster than the
# reference a row is.
bench_table() {
	python3 - "$@" <<-'EOF'
		import sys
		path, title, ref_name, rate_name, units, note = sys.argv[1:7]
		units = int(units)
		rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
		t = {r[0]: (float(r[1]), float(r[2]), float(r[3]), None if r[4] == "-" else float(r[4])) for r in rows}
		ref, _, _, ref_cpu = t[ref_name]
		print(f"\n{title}\n")
		print(f"| command | wall s, median (min-max) | CPU s (user+sys) | {rate_name} (wall) | vs {ref_name}, wall | CPU |")
		print("|---|---|---|---|---|---|")
		for name, (med, lo, hi, cpu) in t.items():
		    c = f"{cpu:.3f}" if cpu is not None else "-"
		    vc = f"{ref_cpu / cpu:.1f}x" if cpu and ref_cpu else "-"
		    print(f"| {name} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {c} | {units / med / 1e6:.2f} | {ref / med:.1f}x | {vc} |")
		print(f"\n({note})")
	EOF
}
