/*
 * The namespace, pod and container names of per-process metrics
 * (tokenserver/pod_names.c), from the names of the kubelet's links
 * /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log, in a directory made
 * here: found by container ID, names that are not the kubelet's ignored, a
 * container that appears later found once the listing is older than 5 s,
 * nothing without the directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "server.h"

#define ID "3c3bd527054f9fce028a5a4b381e452500440aaa46fd8747d39925160cb18d4e"
#define ID2 "aaaabbbb054f9fce028a5a4b381e452500440aaa46fd8747d39925160cb18d4e"

/* What pod_names.c reads of the server. */
struct server_options options;
void slog(int level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}

static char dir[] = "/tmp/gpuslice-pod-names-XXXXXX";

static void touch(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static bool names(const char *id, uint64_t now, const char *ns, const char *pod, const char *container)
{
    const char *a, *b, *c;
    if (!pod_names_of(id, &a, &b, &c, now))
        return ns == NULL;
    bool ok = ns && strcmp(a, ns) == 0 && strcmp(b, pod) == 0 && strcmp(c, container) == 0;
    if (!ok)
        printf("%s: got %s/%s/%s\n", id, a, b, c);
    return ok;
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    options.pod_log_dir = dir;
    touch("spin-a-7d9f8c6b5-x2x4z_team-a_spin-" ID ".log");
    touch("not-a-log_team-a_spin-" ID2 ".txt");
    touch("too_many_under_scores-" ID2 ".log");
    touch("upper_Team_spin-" ID2 ".log");
    EXPECT(names(ID, 1000000000ull, "team-a", "spin-a-7d9f8c6b5-x2x4z", "spin"));
    EXPECT(names(ID2, 1000000001ull, NULL, NULL, NULL)); /* no valid link of it */
    EXPECT(names("", 1000000002ull, NULL, NULL, NULL));
    touch("infer-0_team-b_main-" ID2 ".log");
    EXPECT(names(ID2, 2000000000ull, NULL, NULL, NULL)); /* listed 1 s ago: not again yet */
    EXPECT(names(ID2, 7000000000ull, "team-b", "infer-0", "main"));
    EXPECT(names(ID, 7000000001ull, "team-a", "spin-a-7d9f8c6b5-x2x4z", "spin"));
    options.pod_log_dir = "";
    EXPECT(names(ID, 8000000000ull, NULL, NULL, NULL));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
    return check_finish();
}
