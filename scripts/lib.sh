# Shared by scripts/demo and scripts/test: make sure the build tools are
# there (installing them with apt-get when they are not), then configure
# and build one build directory.

die() { echo "gpuslice: $*" >&2; exit 1; }

ensure_tools() {
    local missing=()
    command -v meson >/dev/null 2>&1 || missing+=(meson)
    command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    # json-c for gpuslice-hook (the build skips the hook without it)
    [ -f /usr/include/json-c/json.h ] || missing+=(libjson-c-dev)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    # gpuslicectl top draws with ncurses
    { pkg-config --exists ncursesw 2>/dev/null || pkg-config --exists ncurses 2>/dev/null; } ||
        missing+=(libncurses-dev)
    apt_install "${missing[@]}"
}

# The tools the observability tests run (plain build only): Prometheus and
# promtool, and tmux for gpuslicectl top.
ensure_observability_tools() {
    local missing=()
    { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || missing+=(prometheus)
    command -v tmux >/dev/null 2>&1 || missing+=(tmux)
    apt_install "${missing[@]}"
}

# apt_install PACKAGE...: installs those given, if any, with apt-get.
apt_install() {
    local missing=("$@")
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "missing ${missing[*]}; install them with your package manager"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "gpuslice: installing ${missing[*]} with apt-get" >&2
    $sudo apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
}

# build DIR [meson options...]
build() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log" >&2; die "meson setup failed"; }
        rm -f "$dir.setup.log"
    elif [ $# -gt 0 ]; then
        meson configure "$dir" "$@" >/dev/null || die "meson configure failed"
    fi
    ninja -C "$dir" >/dev/null || { ninja -C "$dir"; die "build failed"; }
}
