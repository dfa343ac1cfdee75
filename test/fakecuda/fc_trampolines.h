/*
 * fakecuda trampolines: the size of the pool of entry stubs that
 * cuGetProcAddress hands out under FAKECUDA_TRAMPOLINES=1. Shared by the
 * assembly stubs (fc_trampolines_<arch>.S) and fc_procaddress.c.
 */
#ifndef FAKECUDA_TRAMPOLINES_H
#define FAKECUDA_TRAMPOLINES_H

/* Stubs in the pool, and the bytes each one takes. */
#define FC_TRAMPOLINE_COUNT 512
#define FC_TRAMPOLINE_SIZE 16

#endif
