# Shared by scripts/demo, scripts/test and test/gpu/check.sh: make sure the
# build tools are there, then configure and build one build directory.
#
# Required: a C compiler, python3, meson and ninja (on PATH, or pip's
# packages run through python3). Optional: json-c (gpuslice-hook), ncurses
# (gpuslicectl top's live view), pkg-config, and gRPC, protobuf-c and
# libcurl (gpuslice-dra, with python3-grpcio, protoc and openssl for its
# tests), help2man (the manual pages); the build goes on without them.
# ensure_tools installs what is missing with apt-get, except with --offline
# or when no package source can be reached: then it installs nothing, a
# missing required tool is an error, and the optional parts are left out
# of the build.

die() { echo "gpuslice: $*" >&2; exit 1; }

# How to run meson and ninja, set by find_meson_ninja: MESON (an array) and
# NINJA (a path, exported: meson runs the ninja it names).
MESON=(meson)
NINJA=${NINJA:-ninja}

# find_meson_ninja: meson and ninja on PATH, else pip's mesonbuild and ninja
# packages of python3. Returns 1 if either is missing, naming the Debian
# packages that would provide them in TOOLS_MISSING.
TOOLS_MISSING=()
find_meson_ninja() {
    local path
    TOOLS_MISSING=()
    if command -v meson >/dev/null 2>&1; then
        MESON=(meson)
    elif python3 -c 'import mesonbuild.mesonmain' >/dev/null 2>&1; then
        MESON=(python3 -m mesonbuild.mesonmain)
    else
        TOOLS_MISSING+=(meson)
    fi
    if [ "$NINJA" != ninja ] && [ -x "$NINJA" ]; then
        :
    elif command -v ninja >/dev/null 2>&1; then
        NINJA=$(command -v ninja)
    elif path=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null) &&
        [ -x "$path" ]; then
        NINJA=$path
    else
        TOOLS_MISSING+=(ninja-build)
    fi
    export NINJA
    [ ${#TOOLS_MISSING[@]} -eq 0 ]
}

# network_reachable: whether a host of apt's package sources answers on its
# port (3 s at most each). False without apt sources.
network_reachable() {
    local url host port
    for url in $(grep -rhoE '^[^#]*https?://[^/ ]+' /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null |
        grep -oE 'https?://[^/ ]+' | sort -u); do
        host=${url#*://}
        port=80
        [ "${url%%://*}" = https ] && port=443
        case $host in *:*) port=${host##*:}; host=${host%%:*} ;; esac
        timeout 3 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null && return 0
    done
    return 1
}

# ensure_tools [--offline] [--required-only]: see the top of this file.
# --required-only leaves the optional packages alone, installed or not.
ensure_tools() {
    local offline=false optional=true arg
    for arg in "$@"; do
        case $arg in
        --offline) offline=true ;;
        --required-only) optional=false ;;
        esac
    done
    local missing=()
    find_meson_ninja || missing+=("${TOOLS_MISSING[@]}")
    command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1 ||
        missing+=(gcc)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    if $optional; then
        # json-c for gpuslice-hook (the build skips the hook without it)
        [ -f /usr/include/json-c/json.h ] || missing+=(libjson-c-dev)
        command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
        # gpuslicectl top's live view draws with ncurses
        { pkg-config --exists ncursesw 2>/dev/null || pkg-config --exists ncurses 2>/dev/null; } ||
            missing+=(libncurses-dev)
        # gpuslice-dra (the build skips it without them): gRPC's C core,
        # protobuf-c and its compiler, libcurl; its tests' kubelet stand-in
        # speaks through python3-grpcio with messages protoc generates, and
        # the test API endpoint's certificate comes from openssl.
        pkg-config --exists grpc 2>/dev/null || missing+=(libgrpc-dev)
        pkg-config --exists libprotobuf-c 2>/dev/null || missing+=(libprotobuf-c-dev)
        command -v protoc-c >/dev/null 2>&1 || missing+=(protobuf-c-compiler)
        pkg-config --exists libcurl 2>/dev/null || missing+=(libcurl4-openssl-dev)
        command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
        { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import grpc' 2>/dev/null; } || missing+=(python3-grpcio)
        command -v openssl >/dev/null 2>&1 || missing+=(openssl)
        # test/kubernetes/recipes_test.py renders the kustomize recipes with them
        python3 -c 'import jsonpatch, yaml' 2>/dev/null || missing+=(python3-jsonpatch python3-yaml)
        # the manual pages, made from the programs' --help
        command -v help2man >/dev/null 2>&1 || missing+=(help2man)
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if $offline || ! command -v apt-get >/dev/null 2>&1 || ! network_reachable; then
        local required=() p
        local optional=" libjson-c-dev pkg-config libncurses-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
                         libcurl4-openssl-dev protobuf-compiler python3-grpcio openssl help2man python3-jsonpatch python3-yaml "
        for p in "${missing[@]}"; do
            [[ $optional == *[[:space:]]"$p"[[:space:]]* ]] || required+=("$p")
        done
        [ ${#required[@]} -eq 0 ] || die "missing ${required[*]}, and not installing anything (offline or no" \
            "package source reachable): install them, e.g. pip install meson ninja"
        echo "gpuslice: not installing ${missing[*]} (offline or no package source reachable): building without" >&2
        return 0
    fi
    apt_install "${missing[@]}"
    find_meson_ninja || die "meson or ninja still missing after apt-get install"
}

# The tools the tests of suite metrics run (plain build only): Prometheus and
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

# build DIR [meson options...]: configures DIR if it is not yet, or applies
# the options to it, then builds everything (or only $BUILD_TARGETS, ninja's
# target names, when set).
build() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        "${MESON[@]}" setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log" >&2; die "meson setup failed"; }
        rm -f "$dir.setup.log"
    elif [ $# -gt 0 ]; then
        "${MESON[@]}" configure "$dir" "$@" >/dev/null || die "meson configure failed"
    fi
    # shellcheck disable=SC2086 # BUILD_TARGETS is a list of names
    "$NINJA" -C "$dir" ${BUILD_TARGETS:-} >/dev/null || { "$NINJA" -C "$dir" ${BUILD_TARGETS:-}; die "build failed"; }
}
