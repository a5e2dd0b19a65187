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
exec cargo test --workspace --locked "$@"
