/*
 * secure_probe: a CUDA program for the secure-execution test
 * (hardening/secure_exec_test.py), linked against libgpuslice.so itself so
 * that the shim is loaded even where the loader ignores LD_PRELOAD (a
 * set-uid program). It calls cuInit and prints
 *   "secure_probe: at_secure=S euid=U egid=G cuInit=RC"
 */
#include <cuda.h>

#include <stdio.h>
#include <sys/auxv.h>
#include <unistd.h>

int main(void)
{
    CUresult rc = cuInit(0);
    printf("secure_probe: at_secure=%lu euid=%d egid=%d cuInit=%d\n", getauxval(AT_SECURE), (int)geteuid(),
           (int)getegid(), (int)rc);
    return 0;
}
