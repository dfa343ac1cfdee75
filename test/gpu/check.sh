#!/usr/bin/env bash
# The real-GPU check: builds what it needs of gpuslice (into build-gpu/),
# runs eleven rows of tenants under gpuslice-server on the machine's GPU,
# each judged by a measure of its own, never by gpuslice's bookkeeping (the
# GPU's %globaltimer written by the programs' kernels, the programs' own
# counts and clocks, device-wide nvidia-smi memory, /proc CPU time, NVML
# and nvidia-smi outside any tenant), and
# writes a Markdown table and a JSON file of what each row measured
# against its target (see test/gpu/README.md).
#
#   test/gpu/check.sh [--simulate] [--offline] [--out FILE] [--rows LIST]
#                     [--build-dir DIR | --build-into DIR] [-D NAME=VALUE]...
#
#   --simulate        the rows on fakecuda, the simulated driver (no GPU
#                     needed); the rows that need PyTorch are skipped (row
#                     11 runs its C programs)
#   --offline         install nothing; without this, meson and ninja are
#                     installed with apt-get when missing and a package
#                     source answers (optional packages never are)
#   --out FILE        where to write the table (default check-results.md);
#                     the JSON goes beside it (check-results.json)
#   --rows LIST       only these rows, e.g. 1,6,9 (default: all)
#   --build-dir DIR   use this already built meson build directory
#   --build-into DIR  build into DIR instead of build-gpu/
#   -D NAME=VALUE     a meson option for that build, e.g. -D ncurses=disabled
#   --quick           shorter rows (for the test suite; looser figures)
#
# Needs a C compiler, the CUDA headers (include/cuda.h under -D
# cudadir=DIR, $CUDA_HOME, /usr/local/cuda, or pip's nvidia packages),
# python3, and meson and ninja (on PATH, or as pip packages of python3).
# json-c, ncurses and pkg-config are optional: the check needs neither the
# hook nor gpuslicectl top, and says which parts its build left out.
#
# Exit status: 0 when every row met its target or was skipped, 1 when any
# failed, 2 on a usage error, a build that failed, or no GPU found.
# Rows take 5 to 6 minutes on a GPU by estimate (none started after 420 s),
# about two minutes simulated.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

usage_error() { echo "check.sh: $* (see --help)" >&2; exit 2; }

pass=()
out=check-results.md
build_dir=
build_into=
offline=()
meson_opts=()
while [ $# -gt 0 ]; do
    case $1 in
    --simulate | --quick) pass+=("$1") ;;
    --offline) offline=(--offline) ;;
    --out) [ $# -ge 2 ] || usage_error "--out needs a file"; out=$2; shift ;;
    --rows) [ $# -ge 2 ] || usage_error "--rows needs a list"; pass+=(--rows "$2"); shift ;;
    --build-dir) [ $# -ge 2 ] || usage_error "--build-dir needs a directory"; build_dir=$2; shift ;;
    --build-into) [ $# -ge 2 ] || usage_error "--build-into needs a directory"; build_into=$2; shift ;;
    -D) [ $# -ge 2 ] || usage_error "-D needs NAME=VALUE"; meson_opts+=("-D$2"); shift ;;
    -D?*) meson_opts+=("$1") ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
    esac
    shift
done
[ -z "$build_dir" ] || [ -z "$build_into" ] || usage_error "--build-dir and --build-into exclude each other"
[ -z "$build_dir" ] || [ ${#meson_opts[@]} -eq 0 ] || usage_error "-D applies to a build check.sh makes, not to --build-dir"
command -v python3 >/dev/null 2>&1 || { echo "check.sh: python3 is needed" >&2; exit 2; }

simulate=false
for a in ${pass[@]+"${pass[@]}"}; do [ "$a" = --simulate ] && simulate=true; done
if ! $simulate && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "check.sh: no GPU found (nvidia-smi -L fails); use --simulate to run the checks on fakecuda" >&2
    exit 2
fi

# cudadir_guess: a directory whose include/cuda.h meson does not look in by
# itself: /usr/local/cuda-*, the nvidia packages pip installs beside
# PyTorch, /usr. Prints nothing when meson's own places have it.
cudadir_guess() {
    local d
    for d in "${CUDA_HOME:-}" /usr/local/cuda; do
        [ -n "$d" ] && [ -f "$d/include/cuda.h" ] && return 0
    done
    for d in $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV); do
        [ -f "$d/include/cuda.h" ] && { echo "$d"; return 0; }
    done
    d=$(python3 - <<'EOF' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
for root in roots:
    for header in sorted(glob.glob(os.path.join(root, "*", "include", "cuda.h")) +
                         glob.glob(os.path.join(root, "include", "cuda.h"))):
        print(os.path.dirname(os.path.dirname(header)))
        raise SystemExit
EOF
)
    [ -n "$d" ] && { echo "$d"; return 0; }
    [ -f /usr/include/cuda.h ] && echo /usr
    return 0
}

# The programs the rows run (ninja's names for them).
targets="shim/libgpuslice.so tokenserver/gpuslice-server tokenserver/gpuslicectl examples/spin/spin
    test/bench/launch_overhead_bench test/gpu/stamps test/helpers/memscript test/fakecuda/libcuda.so.1 test/fakecuda/fakecuda-stat
    test/fakecuda/libnvidia-ml.so.1"

if [ -z "$build_dir" ]; then
    build_dir=${build_into:-$root/build-gpu}
    case $build_dir in /*) ;; *) build_dir=$PWD/$build_dir ;; esac
    (
        cd "$root" || exit 1
        . scripts/lib.sh
        ensure_tools --required-only ${offline[@]+"${offline[@]}"}
        opts=(${meson_opts[@]+"${meson_opts[@]}"})
        if ! printf '%s\n' ${opts[@]+"${opts[@]}"} | grep -q '^-Dcudadir='; then
            guess=$(cudadir_guess)
            if [ -n "$guess" ]; then
                echo "check.sh: CUDA headers found in $guess/include" >&2
                opts+=("-Dcudadir=$guess")
            fi
        fi
        echo "check.sh: building into $build_dir (${MESON[*]}, $NINJA)" >&2
        BUILD_TARGETS=$targets build "$build_dir" ${opts[@]+"${opts[@]}"}
    ) || { echo "check.sh: the build failed; nothing was run" >&2; exit 2; }
    log=$build_dir/meson-logs/meson-log.txt
    skipped=$(grep -hoE "ncurses not used: [^(]*|gpuslice-hook is not built" "$log" 2>/dev/null | sort -u |
        sed 's/^/  /')
    [ -z "$skipped" ] || printf 'check.sh: left out of this build (the check needs neither):\n%s\n' "$skipped" >&2
fi
build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || { echo "check.sh: no build directory $build_dir" >&2; exit 2; }
for f in $targets; do
    [ -e "$build_dir/$f" ] || { echo "check.sh: $build_dir/$f is missing: build it first" >&2; exit 2; }
done

exec python3 "$here/gpu_check.py" --build "$build_dir" --out "$out" ${pass[@]+"${pass[@]}"}
