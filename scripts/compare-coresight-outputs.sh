#!/usr/bin/env bash
# Whether two poketrace binaries print the same on CoreSight ETMv4 inputs,
# byte for byte (stdout, stderr and exit status): `poketrace etm` on every
# OpenCSD snapshot in three formats, and `decode` (four output forms) and
# `check` on simulated AArch64 runs with and without pokes, three protocols,
# fine and coarse timestamps. For a change that must not change output:
#
#   git stash; cargo build --release -p poketrace; cp target/release/poketrace /tmp/old; git stash pop
#   cargo build --release -p poketrace
#   scripts/compare-coresight-outputs.sh /tmp/old target/release/poketrace
#
# Environment: SNAPSHOTS (default ../shared/opencsd-snapshots), WORK (a
# scratch directory, default a new one under /tmp, removed at the end).
# Exit status 1 when an output differs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ $# -ne 2 ]]; then
	echo "usage: $0 OLD-POKETRACE NEW-POKETRACE" >&2
	exit 2
fi
old="$(realpath "$1")" new="$(realpath "$2")"
snapshots="${SNAPSHOTS:-../shared/opencsd-snapshots}"
work="${WORK:-$(mktemp -d)}"
[[ -z "${WORK:-}" ]] && trap 'rm -rf "$work"' EXIT
differ=0

# name, poketrace arguments...
compare() {
	local name=$1
	shift
	"$old" "$@" >"$work/$name.old" 2>"$work/$name.old.err"
	echo "exit $?" >>"$work/$name.old"
	"$new" "$@" >"$work/$name.new" 2>"$work/$name.new.err"
	echo "exit $?" >>"$work/$name.new"
	if cmp -s "$work/$name.old" "$work/$name.new" && cmp -s "$work/$name.old.err" "$work/$name.new.err"; then
		echo "same    $name ($(wc -c <"$work/$name.old") bytes)"
	else
		echo "DIFFERS $name ($work/$name.{old,new}{,.err})"
		differ=1
	fi
}

for s in juno_r1_1 juno-uname-001 bugfix-exact-match a57_single_step init-short-addr a55-test-tpiu; do
	if [[ ! -f "$snapshots/$s/snapshot.ini" ]]; then
		echo "missing snapshot $snapshots/$s" >&2
		differ=1
		continue
	fi
	compare "etm-$s" etm "$snapshots/$s"
	compare "etm-text-$s" etm "$snapshots/$s" --format text
	compare "etm-json-$s" etm "$snapshots/$s" --format json
done

runs=(
	"--pokes 0 --seed 7"
	"--pokes 60 --seed 7"
	"--pokes 300 --seed 1"
	"--pokes 300 --seed 2 --protocol prepost"
	"--pokes 500 --seed 3 --protocol single-after"
	"--pokes 200 --seed 4 --tsc-period 2000"
	"--pokes 200 --seed 5 --protocol prepost --tsc-period 5000"
)
for args in "${runs[@]}"; do
	tag="$(echo "$args" | tr -d '-' | tr ' ' '_')"
	dir="$work/sim-$tag"
	# shellcheck disable=SC2086 # the arguments are words
	if ! "$old" simulate --output "$dir" --arch aarch64 --cpus 2 --instructions 30000 $args >/dev/null 2>&1; then
		echo "simulate failed: $args" >&2
		differ=1
		continue
	fi
	compare "decode-$tag" decode "$dir"
	compare "decode-insn-$tag" decode "$dir" --itrace i1ie
	compare "decode-json-$tag" decode "$dir" --json
	compare "decode-fields-$tag" decode "$dir" -F cpu,time,flags,ip,addr,insn --ns
	compare "check-$tag" check "$dir"
	compare "check-json-$tag" check "$dir" --json
done
exit $differ
