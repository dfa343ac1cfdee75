/*
 * The first of shim_dlsym_next_test's two libraries: it defines
 * probe_owner, as libdlsym_next_b.so does, and looks names up with dlsym
 * from inside itself, once from its constructor and again when asked.
 * Loaded after the preloaded shim, it is initialized before it, so its
 * constructor's lookups go through the shim's dlsym stub before the shim's
 * own constructor has found glibc's dlsym.
 */
#include <dlfcn.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT const char *probe_owner(void);
EXPORT void *dlsym_next_a_lookup(void *handle, const char *name);
EXPORT void *dlsym_next_a_early(int which);

/* Written once by the constructor, before main; read by the test after. */
static void *early_next, *early_default;

const char *probe_owner(void)
{
    return "a";
}

/* The call to dlsym is made from this library: not a tail call (which
 * would leave the program's return address), hence the barrier after it. */
void *dlsym_next_a_lookup(void *handle, const char *name)
{
    void *found = dlsym(handle, name);
    __asm__ volatile("" ::: "memory");
    return found;
}

__attribute__((constructor)) static void look_up_early(void)
{
    early_next = dlsym(RTLD_NEXT, "probe_owner");
    early_default = dlsym(RTLD_DEFAULT, "probe_owner");
}

/* 0: what dlsym(RTLD_NEXT, "probe_owner") gave the constructor, 1: what
 * dlsym(RTLD_DEFAULT, "probe_owner") gave it. */
void *dlsym_next_a_early(int which)
{
    return which ? early_default : early_next;
}
