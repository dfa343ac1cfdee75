/*
 * realnvml_calls: calls every NVML function libgpuslice.so wraps, with a
 * NULL device and buffers of the right shape, before nvmlInit_v2, and
 * after it (on a machine without a GPU it fails), and prints each code:
 * "NAME rc=N", one a line. nvml_test.py compares the codes with and
 * without the shim.
 *
 *   realnvml_calls direct   calls the functions it is linked against
 *   realnvml_calls dlsym    fetches each with dlsym(dlopen(libnvidia-ml.so.1))
 *
 * The shapes follow NVIDIA's NVML API Reference; the contents do not
 * matter, since no call gets as far as filling them.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

nvmlReturn_t nvmlInit_v2(void);
#define NAMES(X)                                                                                  \
    X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t, void *), (NULL, big))                              \
    X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, void *), (NULL, v2))                            \
    X(nvmlDeviceGetComputeRunningProcesses, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetGraphicsRunningProcesses, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetMPSComputeRunningProcesses, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v2, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v3, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big)) \
    X(nvmlDeviceGetRunningProcessDetailList, (nvmlDevice_t, void *), (NULL, list))                 \
    X(nvmlSystemGetProcessName, (unsigned, char *, unsigned), ((unsigned)getpid(), name, sizeof name)) \
    X(nvmlDeviceGetAccountingPids, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big))            \
    X(nvmlDeviceGetAccountingStats, (nvmlDevice_t, unsigned, void *), (NULL, (unsigned)getpid(), big)) \
    X(nvmlDeviceGetAccountingStats_v2, (nvmlDevice_t, void *), (NULL, big))                       \
    X(nvmlDeviceGetEncoderSessions, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big))           \
    X(nvmlDeviceGetFBCSessions, (nvmlDevice_t, unsigned *, void *), (NULL, &n, big))               \
    X(nvmlDeviceGetUtilizationRates, (nvmlDevice_t, void *), (NULL, big))                          \
    X(nvmlDeviceGetProcessUtilization, (nvmlDevice_t, void *, unsigned *, unsigned long long), (NULL, big, &n, 0ull)) \
    X(nvmlDeviceGetProcessesUtilizationInfo, (nvmlDevice_t, void *), (NULL, info))

/* Declared for the linked mode; a name the library lacks is weak, so the
 * program still loads and reports it as absent. */
#define DECLARE(name, params, args) __attribute__((weak)) nvmlReturn_t name params;
NAMES(DECLARE)

static void round_of_calls(void *lib)
{
    static unsigned long long big[4096];
    static unsigned char list[64], info[64];
    static char name[256];
    static struct { unsigned version; unsigned long long rest[4]; } v2_mem;
    void *v2 = &v2_mem;
    v2_mem.version = 40u | (2u << 24); /* nvmlMemory_v2 */
    unsigned n;
#define CALL(fn, params, args)                                                              \
    {                                                                                       \
        nvmlReturn_t (*f) params = fn;                                                      \
        if (lib) {                                                                          \
            void *p_ = dlsym(lib, #fn);                                                     \
            memcpy(&f, &p_, sizeof f);                                                      \
        }                                                                                   \
        n = 4;                                                                              \
        memset(list, 0, sizeof list);                                                       \
        memset(info, 0, sizeof info);                                                       \
        if (f)                                                                              \
            printf("%s rc=%d\n", #fn, f args);                                              \
        else                                                                                \
            printf("%s absent\n", #fn);                                                     \
    }
    NAMES(CALL)
}

int main(int argc, char **argv)
{
    void *lib = NULL;
    if (argc != 2 || (strcmp(argv[1], "direct") != 0 && strcmp(argv[1], "dlsym") != 0)) {
        fprintf(stderr, "usage: realnvml_calls direct|dlsym\n");
        return 2;
    }
    if (strcmp(argv[1], "dlsym") == 0 && !(lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "realnvml_calls: %s\n", dlerror());
        return 2;
    }
    round_of_calls(lib);
    nvmlReturn_t (*init)(void) = nvmlInit_v2;
    if (lib) {
        void *p = dlsym(lib, "nvmlInit_v2");
        memcpy(&init, &p, sizeof init);
    }
    printf("nvmlInit_v2 rc=%d\n", init());
    round_of_calls(lib);
    return 0;
}
