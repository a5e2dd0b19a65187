#!/usr/bin/env bash
# Boots Debian's cloud kernel under qemu (TCG: no KVM needed), runs
# `poketrace record` inside it while the guest toggles a static key, a
# tracepoint, a kprobe, the function tracer and a BPF program
# (scripts/qemu-guest/workload.sh), and brings the recording back.
#
#   scripts/qemu-guest/run.sh POKETRACE_BIN OUTDIR
#
# POKETRACE_BIN is copied into the guest with the shared libraries it needs
# (ldd), so a normal glibc build works. OUTDIR receives rec/ (the perf.data
# directory), summary.txt and stderr.txt (poketrace's), workload.txt, status
# (poketrace's exit code), dmesg.txt (the guest kernel's log) and console.log
# (the guest's serial console).
# Needs qemu-system-x86, busybox-static, cpio, gcc, libc6-dev (static libc
# for the BPF helper); fetches the kernel with scripts/qemu-guest/fetch-kernel.sh.
# Environment: QEMU_TIMEOUT (seconds, default 150).
set -euo pipefail
if [[ $# -ne 2 ]]; then
	echo "usage: $0 POKETRACE_BIN OUTDIR" >&2
	exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$(realpath "$1")"
out="$(realpath -m "$2")"
for tool in qemu-system-x86_64 cpio gzip; do
	if ! command -v "$tool" >/dev/null; then
		echo "$0: $tool is missing (apt-get install qemu-system-x86 cpio)" >&2
		exit 1
	fi
done
busybox=/bin/busybox
if [[ "$(LC_ALL=C ldd "$busybox" 2>&1 || true)" != *"not a dynamic executable"* ]]; then
	echo "$0: $busybox is not the static busybox (apt-get install busybox-static)" >&2
	exit 1
fi
cache="$("$here/fetch-kernel.sh")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,proc,sys,dev,tmp,lib/modules}
cp "$busybox" "$root/bin/busybox"
cp "$here/init" "$root/init"
cp "$here/workload.sh" "$root/workload.sh"
chmod +x "$root/init"
cp "$cache"/modules/*.ko "$cache/modules/order" "$root/lib/modules/"
# poketrace without its debug info, and its shared libraries at their paths
objcopy --strip-debug "$bin" "$root/bin/poketrace"
ldd "$bin" | awk '/=> \// {print $3} /^\t\// {print $1}' | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
"${CC:-cc}" -O2 -static -o "$root/bin/bpf-load" "$here/../bpf-load.c"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"
mkdir -p "$out"
rm -rf "$out/rec"
echo "qemu-guest: booting $(cat "$cache/PACKAGE")" >&2
start=$(date +%s.%N)
# A TCG guest with two vCPUs now and then wedges in the kernel (soft lockup
# while CPUs sync for a text poke) until the timeout: one more boot, said on
# stderr. Any other failure, or a second timeout, fails.
for attempt in 1 2; do
	rc=0
	truncate -s 0 "$work/disk.img" && truncate -s 256M "$work/disk.img"
	timeout "${QEMU_TIMEOUT:-150}" qemu-system-x86_64 -machine pc -cpu max -smp 2 -m 1024 \
		-nographic -no-reboot -monitor none -serial "file:$out/console.log" \
		-kernel "$cache/vmlinuz" -initrd "$work/initramfs.gz" \
		-append "console=ttyS0 panic=-1 quiet loglevel=3" \
		-drive "file=$work/disk.img,format=raw,if=virtio" </dev/null >/dev/null || rc=$?
	if [[ $rc -eq 124 && $attempt -eq 1 ]]; then
		echo "qemu-guest: the guest did not finish in ${QEMU_TIMEOUT:-150} s (console below); booting it again" >&2
		tail -n 5 "$out/console.log" >&2
		continue
	fi
	break
done
if [[ $rc -ne 0 ]]; then
	echo "qemu-guest: qemu failed (exit $rc; 124 is the timeout); console:" >&2
	tail -n 30 "$out/console.log" >&2
	exit 1
fi
tar xf "$work/disk.img" -C "$out" || {
	echo "qemu-guest: the guest wrote no recording; console:" >&2
	tail -n 30 "$out/console.log" >&2
	exit 1
}
echo "qemu-guest: boot, record and power-off took $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s" >&2
grep '^guest:' "$out/console.log" >&2 || true
