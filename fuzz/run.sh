#!/usr/bin/env bash
# Runs one fuzz target for a time, with the project's limits, and appends a
# line to fuzz/runs.log: date, commit, target, seconds run (of the budget),
# executions, corpus size, crashes. Usage: fuzz/run.sh TARGET SECONDS [extra libFuzzer flags].
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); builds on stable
# through RUSTC_BOOTSTRAP, with AddressSanitizer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
target=$1 seconds=$2
shift 2
case $target in
read | compressed) max_len=20000 ;;
base_image) max_len=65536 ;;
*) max_len=8192 ;;
esac
mkdir -p "corpus/$target" "artifacts/$target" logs
seeds=()
[[ -d seeds/$target ]] && seeds=("seeds/$target")
log="logs/$target.log"
start=$(date +%s)
set +e
RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$target" "corpus/$target" "${seeds[@]}" -- \
	-max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=30 \
	-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="artifacts/$target/" "$@" >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
crashes=$(find "artifacts/$target" -type f | wc -l)
corpus=$(find "corpus/$target" -type f | wc -l)
printf '%s\t%s\t%s\t%ss of %ss\t%s runs\t%s corpus\t%s artifacts\trc=%s\n' "$(date -u +%F)" "$(git rev-parse --short HEAD)" \
	"$target" "$elapsed" "$seconds" "$runs" "$corpus" "$crashes" "$rc" | tee -a runs.log
