#!/usr/bin/env bash
# Fetches the guest kernel for the qemu test of `poketrace record`
# (crates/record/tests/qemu.rs): Debian's newest
# linux-image-*-cloud-amd64-unsigned package, of which only the bzImage and
# the virtio modules the guest needs for its output disk are kept (about 8 MB
# of a 27 MB download). Nothing of it is committed.
#
#   scripts/qemu-guest/fetch-kernel.sh     # prints the cache directory
#
# Output, in the cache directory: vmlinuz, config, modules/*.ko (in load
# order, listed in modules/order) and PACKAGE (package and version). A second
# run finds them there and downloads nothing.
#
# Environment:
#   POKETRACE_GUEST_CACHE  cache directory (default
#                          ${XDG_CACHE_HOME:-~/.cache}/poketrace/qemu-guest)
#   KERNEL_PKG             the package to take instead of the newest match
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

dest="${POKETRACE_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poketrace/qemu-guest}"
if [[ -s "$dest/vmlinuz" && -s "$dest/modules/order" ]]; then
	echo "$dest"
	exit 0
fi
mkdir -p "$dest"

newest_package() {
	apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-cloud-amd64-unsigned$' |
		awk '{print $1}' | sort -V | tail -n 1
}
pkg="${KERNEL_PKG:-$(newest_package)}"
if [[ -z "$pkg" ]]; then
	# apt's lists may never have been fetched on a fresh machine.
	apt-get -qq update >&2
	pkg="$(newest_package)"
fi
if [[ -z "$pkg" ]]; then
	echo "fetch-kernel: no linux-image-*-cloud-amd64-unsigned package in apt's lists" >&2
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
download() {
	echo "fetch-kernel: downloading $pkg" >&2
	(cd "$work" && apt-get -qq download "$pkg" 2>&1 | grep -v 'Download is performed unsandboxed' >&2 || true)
	deb="$(ls "$work"/*.deb 2>/dev/null | head -n 1)"
}
download
if [[ -z "$deb" && -z "${KERNEL_PKG:-}" ]]; then
	# stale lists name a version the archive no longer has
	apt-get -qq update >&2
	pkg="$(newest_package)"
	download
fi
if [[ -z "$deb" ]]; then
	echo "fetch-kernel: apt-get download $pkg produced no package" >&2
	exit 1
fi
dpkg-deb -x "$deb" "$work/root"
vmlinuz="$(find "$work/root/boot" -name 'vmlinuz-*' | head -n 1)"
config="$(find "$work/root/boot" -name 'config-*' | head -n 1)"
if [[ -z "$vmlinuz" ]]; then
	echo "fetch-kernel: $pkg has no /boot/vmlinuz-*" >&2
	exit 1
fi
# The output disk is virtio-blk; the cloud kernel has it as modules (listed in
# load order: each after the modules its .modinfo "depends=" names).
rm -rf "$dest/modules"
mkdir -p "$dest/modules"
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do
	ko="$(find "$work/root/lib/modules" -name "$m.ko" | head -n 1)"
	if [[ -z "$ko" ]]; then
		# built in, or compressed (.ko.xz) in newer packages
		if ! grep -q "/$m.ko" "$work"/root/lib/modules/*/modules.builtin; then
			echo "fetch-kernel: $pkg has no $m.ko (and it is not built in)" >&2
			exit 1
		fi
		continue
	fi
	cp "$ko" "$dest/modules/"
	echo "$m.ko" >>"$dest/modules/order"
done
touch "$dest/modules/order"
cp "$config" "$dest/config"
dpkg-deb -f "$deb" Package Version | tr '\n' ' ' >"$dest/PACKAGE"
cp "$vmlinuz" "$dest/vmlinuz.tmp"
mv "$dest/vmlinuz.tmp" "$dest/vmlinuz"
echo "$dest"
