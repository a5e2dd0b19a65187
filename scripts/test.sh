#!/usr/bin/env bash
# The project's test command (README.md names this script): set-up, then every test. When CI is set,
# tests that need a working Linux perf must fail instead of skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh --tests
if [[ -n "${CI:-}" ]]; then
	export POKETRACE_REQUIRE_PERF=1
fi
# Style first: formatting and lints are part of the tests.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The fuzz targets (their own crate, outside the workspace) must keep building.
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo check --manifest-path fuzz/Cargo.toml --locked --bins
cargo test --workspace --locked "$@"
# The Dask driver (scripts/distributed): pytest over the poketrace binary just built, with the
# packages setup.sh installed.
cargo build --locked -p poketrace
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
POKETRACE_BIN="$target/debug/poketrace" PYTHONPATH="${POKETRACE_CACHE:-$HOME/.cache/poketrace}/python-distributed" \
	exec python3 -m pytest -q -p no:cacheprovider scripts/distributed/tests
