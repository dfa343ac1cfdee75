/*
 * dlsym for AArch64. Once libgpuslice's constructor has found glibc's
 * dlsym: RTLD_NEXT goes straight to it by a tail branch (x30 untouched), so
 * glibc sees the application's return address and searches after the right
 * object; every other handle goes to gs_dlsym_hook (gs_dlsym.c). Before
 * that the stub finds glibc's dlsym without touching any instrumented code
 * and behaves exactly like it.
 */
    .text
    .globl  dlsym
    .type   dlsym, %function
    .p2align 2
dlsym:
    adrp    x16, gs_real_dlsym_ptr
    ldr     x16, [x16, #:lo12:gs_real_dlsym_ptr]
    cbz     x16, 2f
    cmn     x0, #1                      /* RTLD_NEXT */
    b.ne    1f
    br      x16
1:
    b       gs_dlsym_hook
2:
    stp     x29, x30, [sp, #-32]!
    mov     x29, sp
    stp     x0, x1, [sp, #16]
    bl      gs_resolve_real_dlsym_early
    mov     x16, x0
    ldp     x0, x1, [sp, #16]
    ldp     x29, x30, [sp], #32
    cbz     x16, 3f
    br      x16
3:
    mov     x0, #0
    ret
    .size   dlsym, .-dlsym
    .section .note.GNU-stack, "", %progbits
