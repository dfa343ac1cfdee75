/*
 * fakecuda trampolines for AArch64: FC_TRAMPOLINE_COUNT stubs of
 * FC_TRAMPOLINE_SIZE bytes. Stub i branches through
 * fc_trampoline_targets[i] (filled by fc_procaddress.c) using only x16,
 * the intra-procedure-call scratch register a veneer may clobber, so every
 * argument register and the link register arrive untouched.
 */
#include "fc_trampolines.h"

    .text
    .globl  fc_trampolines
    .hidden fc_trampolines
    .type   fc_trampolines, %function
    .balign FC_TRAMPOLINE_SIZE
fc_trampolines:
    .set    stub, 0
    .rept   FC_TRAMPOLINE_COUNT
    hint    #34                         /* bti c */
    adrp    x16, fc_trampoline_targets + 8 * stub
    ldr     x16, [x16, #:lo12:fc_trampoline_targets + 8 * stub]
    br      x16
    .set    stub, stub + 1
    .endr
    .size   fc_trampolines, .-fc_trampolines
    .section .note.GNU-stack, "", %progbits
