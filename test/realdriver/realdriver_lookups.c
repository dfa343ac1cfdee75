/*
 * realdriver_lookups: answers entry-point lookups the way an application or
 * a CUDA runtime makes them, and says which object each answer points into.
 * Used by cuda_test.py, which runs it with and without
 * libgpuslice.so preloaded on NVIDIA's driver and compares the answers.
 *
 * Reads one query a line from standard input:
 *   dlsym NAME                    dlsym(dlopen("libcuda.so.1"), NAME)
 *   default NAME                  dlsym(RTLD_DEFAULT, NAME)
 *   gpa NAME VERSION FLAGS        cuGetProcAddress (fetched with dlsym)
 *   gpa_v2 NAME VERSION FLAGS     cuGetProcAddress_v2 (fetched with dlsym)
 * and writes one answer a line, tab-separated:
 *   QUERY  rc=RC|-  status=STATUS|-  ptr=0|1  obj=FILE|-  sym=NAME|(internal)|-
 * obj is the basename of the object dladdr() places the pointer in; sym is
 * the exported symbol that starts exactly at the pointer, or "(internal)"
 * when no exported symbol does.
 */
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void describe(void *p, const char **obj, const char **sym)
{
    Dl_info info;
    *obj = "-";
    *sym = "-";
    if (!p)
        return;
    if (!dladdr(p, &info) || !info.dli_fname) {
        *obj = "(unknown)";
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    *obj = slash ? slash + 1 : info.dli_fname;
    *sym = info.dli_sname && info.dli_saddr == p ? info.dli_sname : "(internal)";
}

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "realdriver_lookups: dlopen libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    gpa_v1_fn gpa = (gpa_v1_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress");
    gpa_v2_fn gpa_v2 = (gpa_v2_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");

    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char kind[16], name[256];
        int version = 0;
        unsigned long long flags = 0;
        int fields = sscanf(line, "%15s %255s %d %llu", kind, name, &version, &flags);
        if (fields < 2)
            continue;
        void *p = NULL;
        char rc_text[16] = "-", status_text[16] = "-";
        if (strcmp(kind, "dlsym") == 0) {
            p = dlsym(lib, name);
        } else if (strcmp(kind, "default") == 0) {
            p = dlsym(RTLD_DEFAULT, name);
        } else if (strcmp(kind, "gpa") == 0 && fields == 4) {
            if (!gpa) {
                snprintf(rc_text, sizeof rc_text, "absent");
            } else {
                CUresult rc = gpa(name, &p, version, (cuuint64_t)flags);
                snprintf(rc_text, sizeof rc_text, "%d", (int)rc);
            }
        } else if (strcmp(kind, "gpa_v2") == 0 && fields == 4) {
            if (!gpa_v2) {
                snprintf(rc_text, sizeof rc_text, "absent");
            } else {
                CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)-1;
                CUresult rc = gpa_v2(name, &p, version, (cuuint64_t)flags, &status);
                snprintf(rc_text, sizeof rc_text, "%d", (int)rc);
                snprintf(status_text, sizeof status_text, "%d", (int)status);
            }
        } else {
            fprintf(stderr, "realdriver_lookups: bad query '%s'\n", line);
            return 2;
        }
        const char *obj, *sym;
        describe(p, &obj, &sym);
        printf("%s\trc=%s\tstatus=%s\tptr=%d\tobj=%s\tsym=%s\n", line, rc_text, status_text, p != NULL, obj, sym);
    }
    return 0;
}
