#!/usr/bin/env bash
# Fetches a real x86-64 Linux kernel for the isa crate's real-code tests and
# benchmark (crates/isa/tests/real_code.rs, crates/isa/benches/classify.rs):
# Debian's newest linux-image-*-cloud-amd64-unsigned package (fetched by
# scripts/qemu-guest/fetch-kernel.sh), its bzImage
# decompressed to an ELF vmlinux the way the kernel's scripts/extract-vmlinux
# does it (find the compression magic, decompress from there, keep the first
# output that is an ELF file). Debian's System.map is a stub (the symbols are
# in the 280 MB -dbg package), so the tests find the return thunk and the
# retpoline thunks through the kernel's own .return_sites and
# .retpoline_sites sections instead.
#
#   scripts/fetch-test-kernels.sh     # prints the cache directory
#
# Output, in the cache directory: vmlinux-x86_64 and PACKAGE (the Debian package and version they came from). A second run finds
# them there and downloads nothing.
#
# Environment:
#   POKETRACE_TEST_INPUTS  cache directory (default
#                          ${XDG_CACHE_HOME:-~/.cache}/poketrace/test-kernels)
#   KERNEL_PKG             the package to take instead of the newest match
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dest="${POKETRACE_TEST_INPUTS:-${XDG_CACHE_HOME:-$HOME/.cache}/poketrace/test-kernels}"
if [[ -s "$dest/vmlinux-x86_64" ]]; then
	echo "$dest"
	exit 0
fi
mkdir -p "$dest"

# The Debian kernel package is downloaded and cached once, by the qemu guest's
# fetch script (which also copes with stale apt lists); only vmlinux is extracted here.
guest="$(scripts/qemu-guest/fetch-kernel.sh)"
vmlinuz="$guest/vmlinuz"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# extract-vmlinux: try every offset where a compression magic occurs.
is_elf() { [[ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]]; }
try_decompress() { # $1 = magic as a grep -P pattern, $2... = decompressor
	local magic="$1" pos
	shift
	for pos in $(LC_ALL=C grep -aboP "$magic" "$vmlinuz" | cut -d: -f1); do
		tail -c "+$((pos + 1))" "$vmlinuz" | "$@" >"$work/vmlinux" 2>/dev/null || true
		if is_elf "$work/vmlinux"; then
			return 0
		fi
	done
	return 1
}
if ! { try_decompress '\xfd7zXZ\x00' xz -dc ||
	try_decompress '\x28\xb5\x2f\xfd' zstd -dc ||
	try_decompress '\x1f\x8b\x08' gzip -dc ||
	try_decompress '\x02\x21\x4c\x18' lz4 -dc; }; then
	echo "fetch-test-kernels: no xz, zstd, gzip or lz4 payload in $vmlinuz decompresses to ELF" >&2
	exit 1
fi

cp "$guest/PACKAGE" "$dest/PACKAGE"
mv "$work/vmlinux" "$dest/vmlinux-x86_64.tmp"
mv "$dest/vmlinux-x86_64.tmp" "$dest/vmlinux-x86_64"
echo "$dest"
