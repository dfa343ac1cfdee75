#!/usr/bin/env bash
# Fetches NVIDIA's NVML (libnvidia-ml1) and nvidia-smi from Debian
# bookworm's non-free archive and unpacks them, without installing
# anything, into DESTDIR:
#
#   DESTDIR/lib/libnvidia-ml.so.1   NVIDIA's NVML
#   DESTDIR/bin/nvidia-smi          NVIDIA's nvidia-smi
#   DESTDIR/versions                the package versions unpacked
#
# A second run with the same DESTDIR reuses what is there and fetches
# nothing. Uses apt-get with a private sources list and private state under
# DESTDIR, as test/realdriver/fetch-nvidia-driver.sh does: the machine's own
# apt configuration is never touched, and no package is installed.
#
# Prints DESTDIR/lib on success. Where the archive cannot be reached (or
# this is not an apt-based machine) it prints "skipped: REASON" and exits
# 77, the code meson counts as a skipped test.
#
#   fetch-nvidia-ml.sh DESTDIR
#
# GPUSLICE_DEBIAN_MIRROR replaces http://deb.debian.org/debian.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: fetch-nvidia-ml.sh DESTDIR" >&2
    exit 2
fi
dest=$1
lib=$dest/lib

if [ -e "$lib/libnvidia-ml.so.1" ] && [ -e "$dest/bin/nvidia-smi" ]; then
    echo "$lib"
    exit 0
fi

skip() {
    echo "skipped: $*"
    exit 77
}

command -v apt-get >/dev/null 2>&1 || skip "apt-get not found (NVML comes from Debian's archive)"
command -v dpkg >/dev/null 2>&1 || skip "dpkg not found (needed to unpack the packages)"
arch=$(dpkg --print-architecture)
case $arch in
amd64 | arm64) ;;
*) skip "Debian ships NVIDIA's NVML for amd64 and arm64, not $arch" ;;
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
    -o "Debug::NoLocking=1"
    -o "Acquire::Retries=1"
    -o "Acquire::http::Timeout=30"
    -o "APT::Sandbox::User=$(id -un)"
)

if ! apt-get "${apt_opts[@]}" -q update >"$work/update.log" 2>&1 ||
    grep -q '^\(W\|E\): \(Failed to fetch\|Some index files failed\)' "$work/update.log"; then
    skip "cannot reach $mirror bookworm non-free ($(grep -m1 '^\(W\|E\):' "$work/update.log" || echo 'apt-get update failed'))"
fi

# libnvidia-ml1 needs only glibc's libraries; nvidia-smi dlopens it.
packages=(libnvidia-ml1 nvidia-smi)
if ! (cd "$work/archives" && apt-get "${apt_opts[@]}" -q download "${packages[@]}") >"$work/download.log" 2>&1; then
    cat "$work/download.log" >&2
    skip "cannot download ${packages[*]} from $mirror bookworm non-free"
fi

: >"$work/versions"
for deb in "$work"/archives/*.deb; do
    dpkg -x "$deb" "$work/unpacked"
    dpkg-deb -f "$deb" Package Version | sed 's/^[^:]*: //' | paste -sd' ' >>"$work/versions"
done

# The packages put their files in .../nvidia/current/ (the alternatives
# system links them into the search path on installation).
find_file() {
    local found
    found=$(find "$work/unpacked" -path "*/nvidia/current/*" -name "$1" \( -type f -o -type l \) | sort | head -n 1)
    [ -n "$found" ] || { echo "fetch-nvidia-ml: $1 not found in the unpacked packages" >&2; exit 1; }
    readlink -f "$found"
}
mkdir -p "$work/lib" "$work/bin"
cp "$(find_file libnvidia-ml.so.1)" "$work/lib/libnvidia-ml.so.1"
cp "$(find_file nvidia-smi)" "$work/bin/nvidia-smi"
chmod 755 "$work/bin/nvidia-smi"

# Publish in renames so that an interrupted run leaves no half cache.
rm -rf "$lib" "$dest/bin"
mv "$work/versions" "$dest/versions"
mv "$work/bin" "$dest/bin"
mv "$work/lib" "$lib"
echo "$lib"
