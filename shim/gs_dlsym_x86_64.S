/*
 * dlsym for x86-64. Once libgpuslice's constructor has found glibc's dlsym:
 * RTLD_NEXT goes straight to it by a tail jump, so glibc sees the
 * application's return address and searches after the right object; every
 * other handle goes to gs_dlsym_hook (gs_dlsym.c). Before that (another
 * library's constructor, or a sanitizer runtime starting up) the stub finds
 * glibc's dlsym without touching any instrumented code and behaves exactly
 * like it.
 */
    .text
    .globl  dlsym
    .type   dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    movq    gs_real_dlsym_ptr(%rip), %rax
    testq   %rax, %rax
    je      2f
    cmpq    $-1, %rdi                   /* RTLD_NEXT */
    jne     1f
    jmp     *%rax
1:
    jmp     gs_dlsym_hook
2:
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    subq    $8, %rsp                    /* keep the stack 16-byte aligned */
    .cfi_adjust_cfa_offset 8
    call    gs_resolve_real_dlsym_early
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testq   %rax, %rax
    je      3f
    jmp     *%rax
3:
    xorl    %eax, %eax
    ret
    .cfi_endproc
    .size   dlsym, .-dlsym
    .section .note.GNU-stack, "", @progbits
