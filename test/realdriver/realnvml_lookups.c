/*
 * realnvml_lookups: looks NVML names up the ways an application does and
 * says which object each answer points into. Used by nvml_test.py,
 * which runs it with and without libgpuslice.so preloaded on NVIDIA's NVML.
 *
 * Reads one query a line from standard input:
 *   dlsym NAME      dlsym(dlopen("libnvidia-ml.so.1"), NAME)  (pynvml, nvidia-smi)
 *   default NAME    dlsym(RTLD_DEFAULT, NAME), with NVML loaded: what a
 *                   program linked against it binds to
 * and writes one answer a line, tab-separated:
 *   QUERY  ptr=0|1  obj=FILE|-
 * obj is the basename of the object dladdr() places the pointer in.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "realnvml_lookups: dlopen libnvidia-ml.so.1: %s\n", dlerror());
        return 2;
    }
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char kind[16], name[256];
        if (sscanf(line, "%15s %255s", kind, name) != 2)
            continue;
        void *p = strcmp(kind, "dlsym") == 0 ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name);
        Dl_info info;
        const char *obj = "-";
        if (p && dladdr(p, &info) && info.dli_fname) {
            const char *slash = strrchr(info.dli_fname, '/');
            obj = slash ? slash + 1 : info.dli_fname;
        }
        printf("%s\tptr=%d\tobj=%s\n", line, p != NULL, obj);
    }
    return 0;
}
