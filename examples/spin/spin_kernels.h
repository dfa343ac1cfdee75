/*
 * The PTX image of the kernels spin and the launch benchmark run: "empty"
 * does nothing; "spin" spins on %globaltimer for its parameter's
 * nanoseconds; "collective" takes (u64 ns, u64 group, u64 seq, u32 rank,
 * u32 nranks), the layout fakecuda's collective kernels read
 * (test/fakecuda/fc_collective.c), and on a real GPU only spins for ns: it
 * does not wait for its peers, which only fakecuda imitates. A real driver
 * JIT-compiles it, so no nvcc is needed; fakecuda reads only the names (a
 * "spin*" kernel takes its parameter's time, a "collective*" one waits for
 * its peer ranks first).
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
    "}\n"
    ".visible .entry collective(.param .u64 collective_ns, .param .u64 collective_group,\n"
    "                           .param .u64 collective_seq, .param .u32 collective_rank,\n"
    "                           .param .u32 collective_nranks)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [collective_ns];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "CLOOP:\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p, %rd4, %rd1;\n"
    "  @%p bra CLOOP;\n"
    "  ret;\n"
    "}\n";

#endif
