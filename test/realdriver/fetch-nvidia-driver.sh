#!/usr/bin/env bash
# Fetches NVIDIA's user-space CUDA driver (libcuda1) and CUDA runtime
# (libcudart11.0) from Debian bookworm's non-free archive and unpacks them,
# without installing anything, into DESTDIR:
#
#   DESTDIR/lib/libcuda.so.1        NVIDIA's driver library
#   DESTDIR/lib/libcudart.so.11.0   NVIDIA's CUDA runtime
#   DESTDIR/versions                the package versions unpacked
#
# A second run with the same DESTDIR reuses what is there and fetches
# nothing. Uses apt-get with a private sources list and private state under
# DESTDIR: the machine's own apt configuration is never touched, and no
# package is installed (no dpkg -i).
#
# Prints DESTDIR/lib on success. Where the archive cannot be reached (or
# this is not an apt-based machine) it prints "skipped: REASON" and exits
# 77, the code meson counts as a skipped test.
#
#   fetch-nvidia-driver.sh DESTDIR
#
# GPUSLICE_DEBIAN_MIRROR replaces http://deb.debian.org/debian (a local
# mirror, or an unreachable address to try the skip path).
# GPUSLICE_DEBIAN_ARCH fetches another architecture's packages (arm64 for a
# cross build run under qemu-user) than the machine's own.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: fetch-nvidia-driver.sh DESTDIR" >&2
    exit 2
fi
dest=$1
lib=$dest/lib

if [ -e "$lib/libcuda.so.1" ] && [ -e "$lib/libcudart.so.11.0" ]; then
    echo "$lib"
    exit 0
fi

skip() {
    echo "skipped: $*"
    exit 77
}

command -v apt-get >/dev/null 2>&1 || skip "apt-get not found (the driver comes from Debian's archive)"
command -v dpkg >/dev/null 2>&1 || skip "dpkg not found (needed to unpack the packages)"
arch=${GPUSLICE_DEBIAN_ARCH:-$(dpkg --print-architecture)}
case $arch in
amd64 | arm64) ;;
*) skip "Debian ships NVIDIA's driver for amd64 and arm64, not $arch" ;;
esac

mkdir -p "$dest"
work=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/unpacked"
mirror=${GPUSLICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
echo "deb $mirror bookworm non-free" >"$work/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache::Archives=$work/archives"
    -o "APT::Architecture=$arch"
    -o "APT::Architectures::=$arch"
    -o "Debug::NoLocking=1"
    -o "Acquire::Retries=1"
    -o "Acquire::http::Timeout=30"
    -o "APT::Sandbox::User=$(id -un)"
)

if ! apt-get "${apt_opts[@]}" -q update >"$work/update.log" 2>&1 ||
    grep -q '^\(W\|E\): \(Failed to fetch\|Some index files failed\)' "$work/update.log"; then
    skip "cannot reach $mirror bookworm non-free ($(grep -m1 '^\(W\|E\):' "$work/update.log" || echo 'apt-get update failed'))"
fi

# libcuda1 needs no other library to load (its DT_NEEDED entries are all
# glibc's); the PTX JIT compiler is loaded only when PTX is compiled, which
# never happens without a GPU. nvidia-alternative only sets up the
# /etc/alternatives links that dpkg -x does not create.
packages=(libcuda1 libcudart11.0)
if ! (cd "$work/archives" && apt-get "${apt_opts[@]}" -q download "${packages[@]}") >"$work/download.log" 2>&1; then
    cat "$work/download.log" >&2
    skip "cannot download ${packages[*]} from $mirror bookworm non-free"
fi

: >"$work/versions"
for deb in "$work"/archives/*.deb; do
    dpkg -x "$deb" "$work/unpacked"
    dpkg-deb -f "$deb" Package Version | sed 's/^[^:]*: //' | paste -sd' ' >>"$work/versions"
done

# The packages put libcuda.so.1 in usr/lib/<triplet>/nvidia/current/ (the
# alternatives system links it into the search path on installation):
# find each library wherever it is and resolve its links to the real file.
find_lib() {
    local found
    found=$(find "$work/unpacked" -name "$1" \( -type f -o -type l \) | sort | head -n 1)
    [ -n "$found" ] || { echo "fetch-nvidia-driver: $1 not found in the unpacked packages" >&2; exit 1; }
    readlink -f "$found"
}
mkdir -p "$work/lib"
cp "$(find_lib libcuda.so.1)" "$work/lib/libcuda.so.1"
cp "$(find_lib libcudart.so.11.0)" "$work/lib/libcudart.so.11.0"

# Publish in one rename so that an interrupted run leaves no half cache.
rm -rf "$lib"
mv "$work/versions" "$dest/versions"
mv "$work/lib" "$lib"
echo "$lib"
