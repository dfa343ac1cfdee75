/*
 * The PTX image of the kernels spin and the launch benchmark run: "empty"
 * does nothing; "spin" spins on %globaltimer for its parameter's
 * nanoseconds. A real driver JIT-compiles it, so no nvcc is needed;
 * fakecuda reads only the names (a "spin*" kernel takes its parameter's
 * time).
 */
#ifndef GPUSLICE_SPIN_KERNELS_H
#define GPUSLICE_SPIN_KERNELS_H

static const char spin_kernels_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry empty()\n"
    "{\n"
    "  ret;\n"
    "}\n"
    ".visible .entry spin(.param .u64 spin_ns)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [spin_ns];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p, %rd4, %rd1;\n"
    "  @%p bra LOOP;\n"
    "  ret;\n"
    "}\n";

#endif
