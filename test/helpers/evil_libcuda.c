/*
 * evil_libcuda.so: stands in for a library an attacker names in
 * GPUSLICE_REAL_LIBCUDA (hardening/secure_exec_test.py). Loading it is
 * the attack: its constructor appends "loaded euid=U egid=G" to the file
 * EVIL_MARKER names. It defines cuInit so that the shim takes it for a
 * driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cuInit(unsigned flags);

__attribute__((constructor)) static void record_load(void)
{
    const char *path = getenv("EVIL_MARKER");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "loaded euid=%d egid=%d\n", (int)geteuid(), (int)getegid());
    fclose(f);
}

int cuInit(unsigned flags)
{
    (void)flags;
    return 0;
}
