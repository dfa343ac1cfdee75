/*
 * The second of shim_dlsym_next_test's two libraries: another definition
 * of probe_owner, found only by a search that starts after
 * libdlsym_next_a.so.
 */
__attribute__((visibility("default"))) const char *probe_owner(void);
__attribute__((visibility("default"))) int dlsym_next_b_loaded(void);

const char *probe_owner(void)
{
    return "b";
}

int dlsym_next_b_loaded(void)
{
    return 1;
}
