#!/usr/bin/env bash
# The real-GPU check: builds gpuslice (into build-gpu/), runs five checks
# of tenants under gpuslice-server on the machine's GPU, and writes a
# Markdown table with the figure each one measured against its target
# (see test/gpu/README.md).
#
#   test/gpu/check.sh [--simulate] [--out FILE] [--build-dir DIR]
#
#   --simulate       the same checks on fakecuda, the simulated driver (no
#                    GPU needed); the PyTorch rows are replaced by their C
#                    equivalents where they exist, else skipped
#   --out FILE       where to write the table (default check-results.md)
#   --build-dir DIR  use this already built meson build directory instead
#                    of building build-gpu/
#
# Exit status: 0 when every row met its target or was skipped, 1 otherwise,
# 2 on a usage error or when no GPU is found.
# Takes about 3 minutes on a GPU (8 at most), under 2 with --simulate.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

simulate=()
out=check-results.md
build_dir=
while [ $# -gt 0 ]; do
    case $1 in
    --simulate) simulate=(--simulate) ;;
    --out) out=${2:?--out needs a file}; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ ${#simulate[@]} -eq 0 ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "check.sh: no GPU found (nvidia-smi -L fails); use --simulate to run the checks on fakecuda" >&2
    exit 2
fi

if [ -z "$build_dir" ]; then
    (
        cd "$root"
        . scripts/lib.sh
        ensure_tools
        echo "check.sh: building into build-gpu/" >&2
        build build-gpu
    )
    build_dir=$root/build-gpu
fi
for f in shim/libgpuslice.so tokenserver/gpuslice-server tokenserver/gpuslicectl examples/spin/spin \
    test/launch_overhead_bench; do
    [ -e "$build_dir/$f" ] || { echo "check.sh: $build_dir/$f is missing: build first" >&2; exit 2; }
done

exec python3 "$here/gpu_check.py" --build "$build_dir" --out "$out" "${simulate[@]}"
