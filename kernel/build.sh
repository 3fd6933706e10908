#!/bin/sh
# build.sh OUTDIR: builds husk's minimal guest kernel from Debian's
# linux-source (/usr/src/linux-source-*.tar.xz): tinyconfig plus
# kernel/guest.config, no modules. It leaves OUTDIR/bzImage-<version> and
# a marker OUTDIR/bzImage-<version>.monolithic that tells huskd's kernel
# finder the kernel needs no modules; use it with `huskd --kernel`.
set -eu
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
src=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)
[ -n "$src" ] || { echo "no /usr/src/linux-source-*.tar.xz: apt-get install linux-source" >&2; exit 1; }
mkdir -p "$out"
work="$out/src"
if [ ! -f "$work/Makefile" ]; then
	rm -rf "$work.tmp" && mkdir -p "$work.tmp"
	tar -C "$work.tmp" --strip-components=1 -xJf "$src"
	mv "$work.tmp" "$work"
fi
cd "$work"
make -s tinyconfig
./scripts/kconfig/merge_config.sh -m .config "$here/guest.config" >/dev/null
make -s olddefconfig
# Every option of the fragment must have survived olddefconfig.
missing=$(grep -E '^CONFIG_[A-Z0-9_]+=' "$here/guest.config" | while read -r line; do
	grep -qx "$line" .config || echo "$line"
done)
if [ -n "$missing" ]; then
	echo "options the kernel did not take:" >&2
	echo "$missing" >&2
	exit 1
fi
make -s -j"$(nproc)" bzImage
version=$(make -s kernelrelease)
# The map names the addresses huskd logs for a guest that hangs
# (kernel.Symbolizer); Debian's kernel has its real map only in its -dbg
# package.
cp System.map "$out/System.map-$version.tmp"
mv "$out/System.map-$version.tmp" "$out/System.map-$version"
cp arch/x86/boot/bzImage "$out/bzImage-$version.tmp"
mv "$out/bzImage-$version.tmp" "$out/bzImage-$version"
touch "$out/bzImage-$version.monolithic"
echo "$out/bzImage-$version"
