/*
 * The shim's dlsym stub (shim/gs_dlsym_<arch>.S) keeps the caller's
 * identity: glibc's dlsym(RTLD_NEXT, ...) searches after the object that
 * called it, found from its return address, so the stub must reach glibc
 * by a tail jump. Two libraries define probe_owner: a (loaded first) and b.
 * A lookup with RTLD_NEXT made from inside a must find b's; had glibc seen
 * the shim as the caller, it would find a's (the shim is preloaded ahead of
 * both). Checked from a's constructor (the stub's early path, before the
 * shim's constructor has run), from a after main has started, repeatedly,
 * through glibc's dlsym found with RTLD_NEXT, and through the stub itself
 * found with RTLD_NEXT from the program. Run with --shim under LD_PRELOAD,
 * and without it for glibc's own answers.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

typedef const char *(*owner_fn)(void);
typedef void *(*dlsym_fn)(void *, const char *);

const char *probe_owner(void);
void *dlsym_next_a_lookup(void *handle, const char *name);
void *dlsym_next_a_early(int which);
int dlsym_next_b_loaded(void);

static const char *owner(void *symbol)
{
    return symbol ? ((owner_fn)(uintptr_t)symbol)() : "(null)";
}

static const char *object_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

int main(int argc, char **argv)
{
    int with_shim = argc > 1 && strcmp(argv[1], "--shim") == 0;
    EXPECT(dlsym_next_b_loaded() == 1);
    EXPECT(strcmp(probe_owner(), "a") == 0);

    /* From a's constructor, before the shim's constructor ran. */
    printf("a's constructor: RTLD_NEXT -> %s, RTLD_DEFAULT -> %s\n", owner(dlsym_next_a_early(0)),
           owner(dlsym_next_a_early(1)));
    EXPECT(strcmp(owner(dlsym_next_a_early(0)), "b") == 0);
    EXPECT(strcmp(owner(dlsym_next_a_early(1)), "a") == 0);

    /* From a, after main started: the armed stub's tail jump, three times. */
    for (int i = 0; i < 3; i++) {
        void *next = dlsym_next_a_lookup(RTLD_NEXT, "probe_owner");
        if (i == 0)
            printf("a: RTLD_NEXT -> %s\n", owner(next));
        EXPECT(strcmp(owner(next), "b") == 0);
    }
    EXPECT(strcmp(owner(dlsym_next_a_lookup(RTLD_DEFAULT, "probe_owner")), "a") == 0);

    /* From the program: next after it is a (the shim defines no probe_owner). */
    EXPECT(strcmp(owner(dlsym(RTLD_NEXT, "probe_owner")), "a") == 0);

    /* glibc's dlsym as a finds it (next after a), called directly. */
    dlsym_fn real = (dlsym_fn)(uintptr_t)dlsym_next_a_lookup(RTLD_NEXT, "dlsym");
    printf("a: RTLD_NEXT dlsym -> %s\n", object_of((void *)(uintptr_t)real));
    EXPECT(real != NULL && strcmp(object_of((void *)(uintptr_t)real), "libgpuslice.so") != 0);
    EXPECT(real && strcmp(owner(real(RTLD_DEFAULT, "probe_owner")), "a") == 0);

    /* The program's RTLD_NEXT dlsym: the shim's stub when preloaded. Called
     * through that pointer from the program, it answers for the program. */
    dlsym_fn next_dlsym = (dlsym_fn)(uintptr_t)dlsym(RTLD_NEXT, "dlsym");
    printf("program: RTLD_NEXT dlsym -> %s\n", object_of((void *)(uintptr_t)next_dlsym));
    if (with_shim)
        EXPECT(next_dlsym && strcmp(object_of((void *)(uintptr_t)next_dlsym), "libgpuslice.so") == 0);
    EXPECT(next_dlsym && strcmp(owner(next_dlsym(RTLD_NEXT, "probe_owner")), "a") == 0);
    EXPECT(next_dlsym && next_dlsym(RTLD_NEXT, "no_such_symbol_anywhere") == NULL);
    return check_finish();
}
