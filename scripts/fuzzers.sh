# Shared by scripts/fuzz (the gate) and scripts/explore: the libFuzzer
# targets, how each is built and what it starts from.
#
#   FUZZERS                      the targets' names, in the order they run
#   fuzzer_dir NAME              the suite's folder under test/ that holds
#                                its source (NAME.c) and seed corpus; meson
#                                builds it into build/test/DIR/NAME
#   fuzzer_corpus NAME           its seed corpus (test/DIR/..._corpus)
#   fuzzer_max_len NAME          the largest input it is given
#   build_fuzzers DIR [replay]   builds every target into DIR with clang,
#                                ASan and UBSan (installs clang with
#                                apt-get when it is missing); `replay`:
#                                for the gate (below)
#   FUZZ_REPLAY_OPTIONS          libFuzzer's options for the gate
#
# What makes a run replay: addresses differ from run to run (ASLR, the
# environment's size, the length of the corpus's path, when the allocator
# is purged), and three things turn them into inputs: UBSan's
# pointer-overflow and alignment checks (their branches test addresses:
# coverage) and libFuzzer's table of recent comparisons (which holds
# compared pointers: mutations). The gate's build leaves the checks out and
# its options the table (the meson ASan+UBSan build replays every corpus
# with the checks); scripts/explore keeps all three.
#
# Needs scripts/lib.sh (die, apt_install) sourced first.

FUZZERS=(protocol_fuzz config_fuzz http_fuzz sched_fuzz claim_fuzz)

fuzzer_dir() {
    case $1 in
    protocol_fuzz) echo unit ;;
    config_fuzz) echo hardening ;;
    http_fuzz) echo metrics ;;
    sched_fuzz) echo sched ;;
    claim_fuzz) echo dra ;;
    *) die "no fuzzer $1" ;;
    esac
}

fuzzer_corpus() {
    local dir
    dir=$(fuzzer_dir "$1")
    echo "test/$dir/${1%_fuzz}_corpus"
}

fuzzer_max_len() {
    case $1 in
    protocol_fuzz) echo 70000 ;;
    config_fuzz) echo 4096 ;;
    http_fuzz) echo 16384 ;;
    sched_fuzz) echo 8192 ;;
    claim_fuzz) echo 16384 ;;
    *) die "no fuzzer $1" ;;
    esac
}

FUZZ_REPLAY_OPTIONS=(-reload=0 -use_cmp=0 -purge_allocator_interval=-1)

build_fuzzers() {
    local dir=$1
    command -v clang >/dev/null 2>&1 || apt_install clang
    mkdir -p "$dir"
    # (the server's headers for "..." only: its sched.h would stand for the
    # system's <sched.h>, which <pthread.h> includes)
    local flags=(-std=c11 -g -O1 -D_GNU_SOURCE -DGS_LIBFUZZER -fsanitize=fuzzer,address,undefined
                 -fno-sanitize-recover=undefined -Iinclude -iquote tokenserver)
    [ "${2:-}" != replay ] || flags+=(-fno-sanitize=pointer-overflow,alignment)
    # sched_fuzz runs on the simulation's world (test/sim/meson.build lists
    # the same files), which includes the shim's headers and cuda.h
    local sim_flags=(-Itest/sim -Ishim -I"${CUDA_HOME:-/usr/local/cuda}/include"
                     -DGPUSLICE_SHIM_DEFAULT='"libgpuslice.so"')
    local sim_src=(test/sim/sim_world.c test/sim/sim_scenario.c test/sim/sim_cases.c test/sim/sim_server.c
                   test/sim/sim_driver.c test/sim/sim_shim.c test/sim/sim_shim_conn.c test/sim/sim_app.c
                   test/sim/sim_hostile.c test/sim/sim_check.c test/sim/sim_check_sched.c test/sim/sim_script.c
                   test/sim/sim_scripted_gangs.c test/sim/sim_scripted_latency.c test/sim/sim_scripted_charges.c
                   shim/gs_slice.c shim/gs_slice_wire.c shim/gs_dispatch.c shim/gs_gate_messages.c shim/gs_lease.c
                   shim/gs_drain_round.c tokenserver/options.c tokenserver/tables.c tokenserver/dispatch.c
                   tokenserver/devices.c tokenserver/client_messages.c)
    clang "${flags[@]}" test/unit/protocol_fuzz.c include/gpuslice/protocol.c -o "$dir/protocol_fuzz" &&
    clang "${flags[@]}" test/hardening/config_fuzz.c tokenserver/config.c include/gpuslice/rules.c -lm \
        -o "$dir/config_fuzz" &&
    clang "${flags[@]}" test/metrics/http_fuzz.c tokenserver/metrics/http_request.c -Itokenserver/metrics \
        -o "$dir/http_fuzz" &&
    clang "${flags[@]}" "${sim_flags[@]}" test/sched/sched_fuzz.c "${sim_src[@]}" include/gpuslice/protocol.c \
        tokenserver/sched.c tokenserver/sched_prepare.c tokenserver/memory.c tokenserver/histogram.c \
        tokenserver/sched_wire.c -lm -o "$dir/sched_fuzz" &&
    clang "${flags[@]}" -Idra -Idra/kube test/dra/claim_fuzz.c dra/kube/claim.c dra/kube/quantity.c -ljson-c -lm \
        -o "$dir/claim_fuzz" ||
        die "building the fuzzers failed"
}
