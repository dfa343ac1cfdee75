/*
 * The PTX of the check's kernels (test/gpu/stamps.c, gpu_stamps.py). A
 * real driver JIT-compiles it, so no nvcc is needed; fakecuda reads only
 * the names (test/fakecuda/README.md).
 *
 *   stamp(u64 ns, u64 out)  reads %globaltimer, spins until ns have passed
 *                           on it (at least one more reading), and writes
 *                           the first and the last reading at out[0] and
 *                           out[1] (nothing if out is 0): when the kernel
 *                           ran, by the GPU's own clock
 *   empty()                 does nothing: a small op for captures
 *
 * %globaltimer: "A predefined, 64-bit global nanosecond timer" (PTX ISA,
 * "Special Registers"), one clock for the whole GPU, so stamps of
 * different processes compare.
 */
#ifndef GPUSLICE_STAMP_KERNELS_H
#define GPUSLICE_STAMP_KERNELS_H

static const char stamp_kernels_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry empty()\n"
    "{\n"
    "  ret;\n"
    "}\n"
    ".visible .entry stamp(.param .u64 stamp_ns, .param .u64 stamp_out)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [stamp_ns];\n"
    "  ld.param.u64 %rd5, [stamp_out];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra LOOP;\n"
    "  setp.eq.u64 %p2, %rd5, 0;\n"
    "  @%p2 bra DONE;\n"
    "  cvta.to.global.u64 %rd6, %rd5;\n"
    "  st.global.u64 [%rd6], %rd2;\n"
    "  st.global.u64 [%rd6+8], %rd3;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#endif
