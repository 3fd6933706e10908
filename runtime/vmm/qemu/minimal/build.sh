#!/bin/sh
# build.sh OUTDIR: builds a QEMU with only what husk's VMs use, from the
# source of the Debian qemu package whose qemu-system-x86_64 is installed
# (the same version and patches), and prints the binary's path; use it
# with `huskd --qemu`. build.sh --built OUTDIR only prints that path, and
# only if the build is there and of the current devices.mak and patches.
#
# Debian's qemu-system-x86_64 links ~50 libraries and carries every
# device and UI QEMU has; each VM pays for that on every launch (the
# dynamic loader, ~120,000 relocations, every device type's registration)
# and in the memory of its pages. This one has one target, the devices of
# devices.mak, TCG and KVM, seccomp and vhost-user (virtio-fs), and no
# UI, audio, block drivers beyond raw files, TLS or disassembler. Its
# version line says "husk"; its machines' devices are Debian's, so
# snapshots move between the two binaries. patches/ holds husk's own
# changes on top of Debian's, each saying why in its QAPI doc or
# comments: tcg-release.patch lets huskd give an idle VM's translated
# code back (runtime/vmm/qemu/idle.go), boot-images-release.patch a
# cold-booted VM's kernel and initramfs (runtime/vmm/qemu/bootimages.go).
#
# The source comes through apt from deb-src twins of the machine's own
# deb sources, in a private apt directory: the machine's sources and
# package lists are left as they were.
set -eu
built_only=false
if [ "${1:-}" = --built ]; then
	built_only=true
	shift
fi
out=${1:?usage: build.sh [--built] OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
ver=$(dpkg-query -W -f='${source:Version}' qemu-system-x86 2>/dev/null) || {
	$built_only && exit 0
	echo "qemu-system-x86 is not installed: apt-get install qemu-system-x86" >&2
	exit 1
}
dest="$out/$(printf %s "$ver" | tr -c 'A-Za-z0-9.+~-' _)"
bin="$dest/bin/qemu-system-x86_64"
# recipe is what a build is made of beyond the source: a build made from
# another devices.mak or other patches is stale.
recipe() { cat "$here/devices.mak" "$here"/patches/*.patch; }
if [ -x "$bin" ] && [ "$(cat "$dest/recipe" 2>/dev/null)" = "$(recipe)" ]; then
	echo "$bin"
	exit 0
fi
$built_only && exit 0

mkdir -p "$out"
work=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
apt="$work/apt"
mkdir -p "$apt/lists/partial" "$apt/sources.list.d"
: > "$apt/sources.list"
if [ -f /etc/apt/sources.list ]; then
	sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$apt/sources.list"
fi
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
	[ -f "$f" ] || continue
	case "$f" in
	*.sources) sed 's/^Types:.*/Types: deb-src/' "$f" ;;
	*.list) sed -n 's/^deb \(.*\)/deb-src \1/p' "$f" ;;
	esac > "$apt/sources.list.d/$(basename "$f")"
done
set -- -q -o APT::Sandbox::User=root \
	-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/sources.list.d" \
	-o Dir::State::Lists="$apt/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
apt-get "$@" update >/dev/null
(cd "$work" && apt-get "$@" source "qemu=$ver" >/dev/null) || {
	echo "no source of qemu $ver in the machine's apt sources: upgrade qemu-system-x86 to the version they have" >&2
	exit 1
}
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'qemu-*')
[ -n "$src" ] && [ -f "$src/configure" ] || { echo "no QEMU source unpacked in $work" >&2; exit 1; }

cp "$here/devices.mak" "$src/configs/devices/x86_64-softmmu/husk.mak"
for p in "$here"/patches/*.patch; do
	patch -d "$src" -p1 --quiet --forward <"$p" || { echo "patch $p does not apply to qemu $ver" >&2; exit 1; }
done
mkdir "$src/build"
cd "$src/build"
# --prefix and --firmwarepath are Debian's: QEMU finds its data relative
# to its binary, so the install below links those directories.
../configure --target-list=x86_64-softmmu \
	--without-default-features --without-default-devices --with-devices-x86_64=husk \
	--enable-tcg --enable-kvm --enable-seccomp --enable-fdt=system \
	--enable-vhost-user --enable-vhost-kernel --enable-vhost-net \
	--enable-malloc-trim --enable-avx2 \
	--disable-docs --disable-tools --disable-guest-agent --audio-drv-list= \
	--disable-werror --disable-debug-info \
	--prefix=/usr --firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu \
	--with-pkgversion="husk, Debian $ver" --with-git-submodules=ignore >configure.log 2>&1 ||
	{ tail -20 configure.log >&2; exit 1; }
ninja -j"$(nproc)" qemu-system-x86_64 >build.log 2>&1 || { tail -20 build.log >&2; exit 1; }

rm -rf "$dest.tmp"
mkdir -p "$dest.tmp/bin" "$dest.tmp/share" "$dest.tmp/lib/ipxe"
cp qemu-system-x86_64 "$dest.tmp/bin/"
ln -s /usr/share/qemu "$dest.tmp/share/qemu"
ln -s /usr/share/seabios "$dest.tmp/share/seabios"
ln -s /usr/lib/ipxe/qemu "$dest.tmp/lib/ipxe/qemu"
recipe >"$dest.tmp/recipe"
"$dest.tmp/bin/qemu-system-x86_64" --version >/dev/null
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "$bin"
