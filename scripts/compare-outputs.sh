#!/usr/bin/env bash
# Proves that `poketrace` prints the same bytes as at a git revision: stdout, stderr and exit status
# of decode (every --itrace, --json, -F, --image form), check, dump, pokes, image, etm, demo,
# ptdump, --help and refused flags, and the files `simulate` writes, on small simulated runs (x86_64 Intel PT with TSC,
# MTC and CYC timing, AArch64 ETMv4 with fine and coarse timestamps, the int3, prepost and single-after
# protocols), on runs whose trace was damaged on purpose, and `etm` on every OpenCSD snapshot in
# ${SNAPSHOTS:-../shared/opencsd-snapshots} (beside the tree).
#
#   scripts/compare-outputs.sh [REV]      REV defaults to 4a154b1; run from anywhere in the tree
#
# It builds REV's binary in a temporary git worktree, in a target directory under
# ${XDG_CACHE_HOME:-~/.cache}/poketrace/compare/ (the binary is kept there by commit id, so a rerun
# only builds the working tree), and the working tree's binary in the tree's own target/, both in
# release mode. The two never share a target directory: cargo tells a path crate's builds apart by
# its path inside the workspace and its files' times, so a shared one could hand back REV's build. Every input is
# written by REV's `simulate`; the working tree's `simulate` must write the same files. Prints
# `same` or `DIFF` (with the first differing lines) per comparison, then a summary; exits 1 on any
# difference, 2 when it could not run. The outputs stay in the printed directory when something
# differs (or always, with POKETRACE_COMPARE_KEEP=1). On 2 cores: about 40 s, plus the builds (the
# first run builds both binaries, a few minutes; later runs rebuild what changed in the tree).
set -euo pipefail

rev=${1:-4a154b1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/poketrace/compare
mkdir -p "$cache/bin"
work=$(mktemp -d "${TMPDIR:-/tmp}/poketrace-compare.XXXXXX")

die() {
	echo "compare-outputs: $*" >&2
	exit 2
}

sha=$(git -C "$root" rev-parse --verify --quiet "$rev^{commit}") || die "$rev is not a commit"

# The lock keeps two runs from building REV in the same place at once.
exec 9>"$cache/lock"
flock 9
# Both binaries are called poketrace: usage lines name them.
rev_bin=$cache/bin/$sha/poketrace
if [[ ! -x $rev_bin ]]; then
	# A fixed path: cargo then reuses the artifacts of the last revision built here.
	src=$cache/rev-src
	git -C "$root" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
	git -C "$root" worktree prune
	git -C "$root" worktree add --detach --quiet "$src" "$sha"
	echo "building $rev ($sha) in $src" >&2
	(cd "$src" && CARGO_TARGET_DIR=$cache/target cargo build --release --locked --quiet -p poketrace) || die "building $rev failed"
	mkdir -p "$cache/bin/$sha"
	cp "$cache/target/release/poketrace" "$rev_bin.tmp"
	mv "$rev_bin.tmp" "$rev_bin"
	git -C "$root" worktree remove --force "$src"
fi
echo "building the working tree $root" >&2
(cd "$root" && CARGO_TARGET_DIR=$root/target cargo build --release --locked --quiet -p poketrace) || die "building the working tree failed"
mkdir "$work/current"
cur_bin=$work/current/poketrace
cp "$root/target/release/poketrace" "$cur_bin"
flock -u 9

same=0
differ=0
failed=()

# report NAME: compares what both binaries left in $work/{rev,cur}/NAME.{out,err,rc}.
report() {
	local name=$1 part bad=0
	for part in rc out err; do
		if ! cmp -s "$work/rev/$name.$part" "$work/cur/$name.$part"; then
			if ((bad == 0)); then
				echo "DIFF  $name"
			fi
			bad=1
			echo "      $part ($rev < > working tree):"
			diff "$work/rev/$name.$part" "$work/cur/$name.$part" | head -n 6 | sed 's/^/        /' || true
		fi
	done
	if ((bad)); then
		differ=$((differ + 1))
		failed+=("$name")
	else
		same=$((same + 1))
		echo "same  $name ($(wc -l <"$work/rev/$name.out") lines, exit $(cat "$work/rev/$name.rc"))"
	fi
}

# run_one SIDE NAME ARGS...: one binary's stdout, stderr and exit status for ARGS.
run_one() {
	local side=$1 name=$2 bin
	shift 2
	if [[ $side == rev ]]; then bin=$rev_bin; else bin=$cur_bin; fi
	local rc=0
	(cd "$work" && timeout 600 "$bin" "$@") >"$work/$side/$name.out" 2>"$work/$side/$name.err" || rc=$?
	echo "$rc" >"$work/$side/$name.rc"
}

# compare_digest NAME ARGS...: both binaries on ARGS, keeping only the
# SHA-256 of stdout (for outputs of hundreds of MB, such as the real
# OpenCSD snapshots' listings: all of them kept would fill the disk).
compare_digest() {
	local name=$1 side bin rc
	shift
	for side in rev cur; do
		if [[ $side == rev ]]; then bin=$rev_bin; else bin=$cur_bin; fi
		rc=0
		(cd "$work" && timeout 600 "$bin" "$@") 2>"$work/$side/$name.err" | sha256sum >"$work/$side/$name.out" || rc=$?
		echo "$rc" >"$work/$side/$name.rc"
	done
	report "$name"
}

# compare NAME ARGS...: both binaries on ARGS.
compare() {
	local name=$1
	shift
	run_one rev "$name" "$@"
	run_one cur "$name" "$@"
	report "$name"
}

# compare_dirs NAME: the files each binary's `simulate` wrote.
compare_dirs() {
	local name=$1
	if diff -r -q "$work/rev/$name" "$work/cur/$name" >"$work/cur/$name.files" 2>&1; then
		same=$((same + 1))
		echo "same  $name: files ($(find "$work/rev/$name" -type f | wc -l) files)"
	else
		differ=$((differ + 1))
		failed+=("$name: files")
		echo "DIFF  $name: files"
		head -n 6 "$work/cur/$name.files" | sed 's/^/        /'
	fi
}

# first_aux DIR: "START LEN", where the first AUXTRACE record's trace data lies in DIR/data.
first_aux() {
	local line off size len
	line=$("$rev_bin" dump "$1/data" | grep -m1 'PERF_RECORD_AUXTRACE size:') || die "no AUXTRACE in $1/data"
	# `0xOFFSET [0xSIZE]: PERF_RECORD_AUXTRACE size: 0xLEN ...`: the trace follows the record.
	off=$(sed -E 's/^.*(0x[0-9a-f]+) \[(0x[0-9a-f]+)\]: PERF_RECORD_AUXTRACE size: (0x[0-9a-f]+).*$/\1 \2 \3/' <<<"$line")
	read -r off size len <<<"$off"
	echo "$((off + size)) $((len))"
}

# damage DIR: overwrites 256 bytes in the middle of the first AUXTRACE record's trace data with a
# fixed pattern that both Intel PT and ETMv4 decode with errors.
damage() {
	local data=$1/data start len
	read -r start len < <(first_aux "$1")
	local at=$((start + len / 2))
	local i
	for ((i = 0; i < 256; i++)); do
		# shellcheck disable=SC2059 # the format is the byte
		printf "\\x$(printf %02x $(((i * 151 + 7) % 256)))"
	done | dd of="$data" bs=1 seek="$at" conv=notrunc status=none
}

mkdir -p "$work/rev" "$work/cur"
echo "comparing $rev ($sha) with the working tree; outputs in $work"

# name: simulate flags. Small runs: a few seconds each to decode and check.
declare -A runs=(
	[x86-int3-tsc]="--arch x86_64 --cpus 2 --protocol int3 --pokes 200 --instructions 100000 --seed 7 --tsc-period 100"
	[x86-prepost-mtc]="--arch x86_64 --cpus 2 --protocol prepost --pokes 200 --instructions 100000 --seed 8 --mtc-freq 3"
	[x86-int3-cyc]="--arch x86_64 --cpus 2 --protocol int3 --pokes 200 --instructions 100000 --seed 9 --mtc-freq 5 --cyc --cyc-thresh 3"
	[arm-int3-tsc]="--arch aarch64 --cpus 2 --protocol int3 --pokes 200 --instructions 100000 --seed 10 --tsc-period 100"
	[arm-prepost-tsc]="--arch aarch64 --cpus 2 --protocol prepost --pokes 200 --instructions 100000 --seed 11 --tsc-period 300"
	[arm-single-after-coarse]="--arch aarch64 --cpus 2 --protocol single-after --pokes 300 --instructions 100000 --seed 12 --tsc-period 5000"
)
names=(x86-int3-tsc x86-prepost-mtc x86-int3-cyc arm-int3-tsc arm-prepost-tsc arm-single-after-coarse)

for name in "${names[@]}"; do
	# Each binary writes its own directory; both then decode REV's.
	for side in rev cur; do
		# shellcheck disable=SC2086 # the flags are words
		run_one "$side" "simulate $name" simulate ${runs[$name]} -o "$side/$name"
		sed -i "s#^$side/$name:#DIR:#" "$work/$side/simulate $name.out"
	done
	report "simulate $name"
	compare_dirs "$name"
done

for name in x86-int3-tsc arm-int3-tsc; do
	cp -r "$work/rev/$name" "$work/rev/$name-damaged"
	damage "$work/rev/$name-damaged"
	names+=("$name-damaged")
done

fields=comm,tid,pid,cpu,time,flags,ip,sym,symoff,dso,addr,insn,insnlen
for name in "${names[@]}"; do
	dir=rev/$name
	compare "$name: decode" decode "$dir"
	compare "$name: decode --itrace=i" decode "$dir" --itrace=i
	compare "$name: decode --itrace=e" decode "$dir" --itrace=e
	compare "$name: decode --itrace=i100i" decode "$dir" --itrace=i100i
	compare "$name: decode --itrace=bie --json" decode "$dir" --itrace=bie --json
	for image in timeline perf static; do
		compare "$name: decode --image $image" decode "$dir" --itrace=be --image "$image"
		compare "$name: decode --itrace=i -F ... --image $image" decode "$dir" --itrace=i -F "$fields" --image "$image"
	done
	compare "$name: decode -F ... --ns" decode "$dir" -F "$fields" --ns
	compare "$name: check" check "$dir"
	compare "$name: check --json" check "$dir" --json
	compare "$name: dump" dump "$dir"
	compare "$name: dump --json" dump "$dir" --json
	compare "$name: pokes" pokes "$dir"
	compare "$name: pokes --json" pokes "$dir" --json
	# The first poke's address, a moment inside its change, and a symbol.
	# (Not jq: it reads addresses as doubles.)
	poke=$(grep -m1 '"record":"TEXT_POKE"' "$work/rev/$name: pokes --json.out" || true)
	addr=$(sed -nE 's/.*"addr":([0-9]+).*/\1/p' <<<"$poke")
	time=$(sed -nE 's/.*"time":([0-9]+).*/\1/p' <<<"$poke")
	if [[ -n ${addr:-} ]]; then
		addr=$(printf '%#x' "$addr")
		compare "$name: image --history" image "$dir" --history "$addr"
		compare "$name: image --at" image "$dir" --at "$((time + 1))" "$addr" 32
		compare "$name: image --at --json" image "$dir" --at "$time" "$addr" --json
	fi
	compare "$name: image --at symbol" image "$dir" --at 1.000000000 _text+0x10 8
done
# etm on the OpenCSD snapshots of the AArch64 runs, in each format, elements and packets.
for name in arm-int3-tsc arm-prepost-tsc; do
	for format in opencsd text json; do
		compare "$name: etm --format $format" etm "rev/$name/snapshot" --format "$format"
		compare "$name: etm --packets --format $format" etm "rev/$name/snapshot" --packets --format "$format"
	done
done
compare "etm --format of no such format" etm rev/arm-int3-tsc/snapshot --format bogus
# etm on the real OpenCSD snapshots, in each format, elements and packets.
snapshots=${SNAPSHOTS:-$root/../shared/opencsd-snapshots}
for dir in "$snapshots"/*/; do
	[[ -f $dir/snapshot.ini ]] || continue
	snap=$(basename "$dir")
	for format in opencsd text json; do
		compare_digest "$snap: etm --format $format" etm "$dir" --format "$format"
		compare_digest "$snap: etm --packets --format $format" etm "$dir" --packets --format "$format"
	done
done

# ptdump (where REV has it) on the first Intel PT buffer, cut out of perf.data as a raw file.
for name in x86-int3-tsc x86-int3-cyc x86-int3-tsc-damaged; do
	read -r start len < <(first_aux "$work/rev/$name")
	dd if="$work/rev/$name/data" of="$work/rev/$name.pt" iflag=skip_bytes,count_bytes skip="$start" count="$len" bs=64K status=none
	compare "$name: ptdump" ptdump "rev/$name.pt"
	timing=(--mtc-freq 5 --nom-freq 10 --cpuid-0x15.eax 1 --cpuid-0x15.ebx 40)
	compare "$name: ptdump --lastip --exec-mode --time" ptdump --lastip --exec-mode --time "${timing[@]}" "rev/$name.pt"
	compare "$name: ptdump --tcal --time-delta --raw" ptdump --tcal --time-delta --raw "${timing[@]}" "rev/$name.pt"
done
compare "decode of a missing directory" decode "$work/no-such-dir"
compare "decode --image of no such mode" decode rev/x86-int3-tsc --image bogus
compare "simulate --arch of no such arch" simulate --arch bogus -o cur/bogus
compare "simulate --protocol of no such protocol" simulate --protocol bogus --instructions 100 -o cur/bogus
for cmd in "" decode simulate check dump pokes image etm demo ptdump; do
	# shellcheck disable=SC2086 # no command: the top level
	compare "help: $cmd -h" $cmd -h
	# shellcheck disable=SC2086
	compare "help: $cmd --help" $cmd --help
done

# demo writes into TMPDIR, in a directory named by its process id (its report lines on stderr name it too).
mkdir -p "$work/demo-tmp"
for side in rev cur; do
	TMPDIR=$work/demo-tmp run_one "$side" demo demo
	sed -i -E 's#poketrace-demo-[0-9]+#poketrace-demo-PID#g' "$work/$side/demo.out" "$work/$side/demo.err"
	rm -rf "$work/demo-tmp"/poketrace-demo-*
done
report demo

echo
echo "$same same, $differ different ($rev vs the working tree)"
if ((differ)); then
	printf '  differs: %s\n' "${failed[@]}"
	echo "outputs kept in $work"
	exit 1
fi
if [[ -z ${POKETRACE_COMPARE_KEEP:-} ]]; then
	rm -rf "$work"
else
	echo "outputs kept in $work"
fi
