/*
 * Binds the shim to the oldest versions of the glibc functions whose
 * default version moved forward (the dl* family moved into libc in 2.34),
 * so that libgpuslice.so built on a new distribution still loads on glibc
 * 2.17 (CentOS 7, Amazon Linux 2). The old versions stay exported by every
 * later glibc as compatibility symbols. Include it in every shim file that
 * calls one of these. test/shim/symbols_test.py checks the result.
 */
#ifndef GPUSLICE_GLIBC_COMPAT_H
#define GPUSLICE_GLIBC_COMPAT_H

#if defined(__x86_64__)
#define GS_GLIBC_BASE "GLIBC_2.2.5"
#define GS_GLIBC_CONDATTR_SETCLOCK "GLIBC_2.3.3" /* added after the base */
#elif defined(__aarch64__)
#define GS_GLIBC_BASE "GLIBC_2.17"
#define GS_GLIBC_CONDATTR_SETCLOCK "GLIBC_2.17"
#endif

#ifdef GS_GLIBC_BASE
__asm__(".symver dlopen,dlopen@" GS_GLIBC_BASE);
__asm__(".symver dlerror,dlerror@" GS_GLIBC_BASE);
__asm__(".symver dladdr,dladdr@" GS_GLIBC_BASE);
__asm__(".symver dlvsym,dlvsym@" GS_GLIBC_BASE);
__asm__(".symver pthread_create,pthread_create@" GS_GLIBC_BASE);
__asm__(".symver pthread_join,pthread_join@" GS_GLIBC_BASE);
__asm__(".symver pthread_once,pthread_once@" GS_GLIBC_BASE);
__asm__(".symver pthread_key_create,pthread_key_create@" GS_GLIBC_BASE);
__asm__(".symver pthread_setspecific,pthread_setspecific@" GS_GLIBC_BASE);
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@" GS_GLIBC_BASE);
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@" GS_GLIBC_CONDATTR_SETCLOCK);
#endif

#endif
