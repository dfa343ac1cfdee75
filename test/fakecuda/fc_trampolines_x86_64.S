/*
 * fakecuda trampolines for x86-64: FC_TRAMPOLINE_COUNT stubs of
 * FC_TRAMPOLINE_SIZE bytes. Stub i tail-jumps through
 * fc_trampoline_targets[i] (filled by fc_procaddress.c), leaving every
 * argument register and the return address untouched, as the entry points
 * an injection library or profiler hands out do.
 */
#include "fc_trampolines.h"

    .text
    .globl  fc_trampolines
    .hidden fc_trampolines
    .type   fc_trampolines, @function
    .balign FC_TRAMPOLINE_SIZE
fc_trampolines:
    .set    stub, 0
    .rept   FC_TRAMPOLINE_COUNT
    endbr64
    jmp     *(fc_trampoline_targets + 8 * stub)(%rip)
    .balign FC_TRAMPOLINE_SIZE, 0xcc
    .set    stub, stub + 1
    .endr
    .size   fc_trampolines, .-fc_trampolines
    .section .note.GNU-stack, "", @progbits
