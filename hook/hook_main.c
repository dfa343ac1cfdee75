/*
 * gpuslice-hook: an OCI hook that puts a container into its gpuslice
 * tenant, for runtimes without CDI (CRI-O and podman hooks.d, or runc's
 * config.json). It reads the container's state on stdin, takes the tenant
 * from the annotation gpuslice.io/tenant, and bind-mounts read-only under
 * the container's root the same three things as gpuslice-server's CDI
 * spec: the tenant's directory at /run/gpuslice, the shim at
 * /usr/lib/gpuslice/libgpuslice.so, and the server's one-line preload list
 * at /etc/ld.so.preload, so that every process of the container loads the
 * shim, LD_PRELOAD or not. (A hook cannot set the container's environment;
 * /etc/ld.so.preload does the work that LD_PRELOAD does under CDI.)
 *
 * An annotation alone decides nothing: podman copies an image's
 * annotations into the container's, so an image could name any tenant.
 * The tenant must also be admitted for the container's cgroup (config.json's
 * linux.cgroupsPath, which the runtime sets and an image cannot) by one of
 * the hook's --allow rules, which are the host's: the hooks.d file's args.
 *
 * A missing or malformed tenant name, a tenant no rule admits, a tenant
 * the server does not serve, or a missing server directory is a one-line
 * error and exit status 1: the container does not start unprotected.
 */
#include "hook.h"

#include "gpuslice/rules.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpuslice/containers.h"

#define MAX_RULES 256 /* --allow rules */

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslice-hook --allow TENANT=CGROUP... [--run-dir DIR] [--shim PATH] < STATE\n"
"\n"
"An OCI hook (stage createContainer, createRuntime or prestart) that puts a\n"
"container into the gpuslice tenant named by its annotation\n"
GS_TENANT_ANNOTATION ", if an --allow rule admits that tenant for the\n"
"container's cgroup. It bind-mounts, read-only, under the container's root:\n"
"  DIR/tenants/TENANT       at " GS_CONTAINER_RUN_DIR "\n"
"  PATH                     at " GS_CONTAINER_SHIM "\n"
"  DIR/" GS_PRELOAD_FILE "  at " GS_CONTAINER_PRELOAD "\n"
"Mount points the image lacks are made in the container's own writable\n"
"layer (a root that is an overlay mount of its own), or else under an\n"
"overlay of the nearest directory whose upper layer is in memory; never in\n"
"the image. The runtime passes the container's state on stdin.\n"
"\n"
"An annotation alone is not enough: podman copies an image's annotations\n"
"into its containers', so an image could name any tenant. The cgroup path\n"
"(config.json's linux.cgroupsPath) is the runtime's: podman's\n"
"--cgroup-parent, the bundle's author for plain runc.\n"
"\n"
"Options:\n"
"  -a, --allow TENANT=CGROUP\n"
"                     admit tenant TENANT (or '*': any) for containers whose\n"
"                     cgroup path matches the shell pattern CGROUP ('*' matches\n"
"                     '/' too), e.g. team-a=/gpuslice/team-a/* for\n"
"                     podman --cgroup-parent /gpuslice/team-a (cgroupfs) or\n"
"                     team-a=gpuslice-team_a.slice:* for --cgroup-parent\n"
"                     gpuslice-team_a.slice (systemd). Repeat for more rules\n"
"                     (at most %d); without any, every container is refused\n"
"  -r, --run-dir DIR  gpuslice-server's run directory, an absolute path\n"
"                     (default /run/gpuslice)\n"
"  -s, --shim PATH    the host's libgpuslice.so, an absolute path\n"
"                     (default " GPUSLICE_SHIM_DEFAULT ")\n"
"  -h, --help         show this help\n"
"  -V, --version      show the version\n"
"\n"
"Exit status: 0 when the container is set up; 1 (with one line on stderr)\n"
"when it must not start: no or a malformed tenant name, a tenant no --allow\n"
"rule admits for its cgroup, a tenant the server does not serve, no server\n"
"directory, or a mount that failed; 2 on a usage error.\n", MAX_RULES);
}


/* The --allow rules, from the command line (main's, read-only after the
 * options are parsed). */
static struct rule {
    const char *tenant;      /* a tenant name, or "*" */
    const char *cgroup;      /* an fnmatch(3) pattern */
} rules[MAX_RULES];
static size_t nrules;

/* Parses TENANT=CGROUP into the next rule (arg stays as it is, the rule
 * points into it); false if it is not one. */
static bool add_rule(const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || !eq[1] || nrules == MAX_RULES || (size_t)(eq - arg) >= 64)
        return false;
    static char names[MAX_RULES][64];
    memcpy(names[nrules], arg, (size_t)(eq - arg));
    names[nrules][eq - arg] = '\0';
    if (strcmp(names[nrules], "*") != 0 && !gs_tenant_name_valid(names[nrules]))
        return false;
    rules[nrules].tenant = names[nrules];
    rules[nrules].cgroup = eq + 1;
    nrules++;
    return true;
}

static bool allowed(const char *tenant, const char *cgroup)
{
    for (size_t i = 0; i < nrules; i++)
        if ((strcmp(rules[i].tenant, "*") == 0 || strcmp(rules[i].tenant, tenant) == 0) &&
            fnmatch(rules[i].cgroup, cgroup, 0) == 0)
            return true;
    return false;
}

/* Something from the host that is mounted into the container. */
struct source {
    char path[4200];
    mode_t type;             /* S_IFDIR or S_IFREG */
    const char *what;
    int fd;                  /* O_PATH */
    struct stat st;
};

static void open_source(struct source *s)
{
    s->fd = open(s->path, O_PATH | O_CLOEXEC);
    if (s->fd < 0 || fstat(s->fd, &s->st) != 0)
        die("%s %s: %s", s->what, s->path, strerror(errno));
    if ((s->st.st_mode & S_IFMT) != s->type)
        die("%s %s is not a %s", s->what, s->path, s->type == S_IFDIR ? "directory" : "regular file");
}

/* A bind mount's source must be in the caller's mount namespace: after
 * entering the container's, each source is opened again by its path (the
 * namespace is a copy of the host's) and must be the same file. */
static void reopen_source(struct source *s)
{
    int old = s->fd;
    struct stat before = s->st;
    open_source(s);
    if (s->st.st_dev != before.st_dev || s->st.st_ino != before.st_ino)
        die("%s %s is another file in the container's mount namespace than on the host", s->what, s->path);
    close(old);
}

int main(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"allow", required_argument, NULL, 'a'},
        {"run-dir", required_argument, NULL, 'r'},
        {"shim", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *run_dir = "/run/gpuslice", *shim = GPUSLICE_SHIM_DEFAULT;
    int opt;
    while ((opt = getopt_long(argc, argv, "a:r:s:hV", long_options, NULL)) != -1) {
        switch (opt) {
        case 'a':
            if (!add_rule(optarg)) {
                fprintf(stderr, "gpuslice-hook: --allow %s: %s\n", optarg,
                        nrules == MAX_RULES ? "too many rules"
                                            : "not TENANT=CGROUP (a tenant name or '*', '=', a non-empty pattern)");
                return 2;
            }
            break;
        case 'r': run_dir = optarg; break;
        case 's': shim = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("gpuslice-hook %s\n", GPUSLICE_VERSION); return 0;
        default: fprintf(stderr, "see gpuslice-hook --help\n"); return 2;
        }
    }
    if (optind != argc || run_dir[0] != '/' || shim[0] != '/') {
        fprintf(stderr, "gpuslice-hook: %s; see gpuslice-hook --help\n",
                optind != argc ? "unexpected argument" : "paths must be absolute");
        return 2;
    }
    umask(022); /* mount points made for uids other than root */

    struct oci_container c;
    oci_read(STDIN_FILENO, &c);
    if (!c.tenant[0])
        die("container %s has no " GS_TENANT_ANNOTATION " annotation: no tenant to put it in", c.id);
    if (!gs_tenant_name_valid(c.tenant))
        die("'%s' is not a valid tenant name (letters, digits, '-', '_', '.', at most 63, not starting with '.' "
            "or '-')", c.tenant);
    if (!nrules)
        die("container %s asks for tenant '%s', but the hook has no --allow rule, so it serves no container: "
            "add \"--allow\", \"%s=CGROUP\" to its args (see gpuslice-hook --help)", c.id, c.tenant, c.tenant);
    if (!allowed(c.tenant, c.cgroups_path))
        die("container %s (cgroup '%s') may not use tenant '%s': no --allow rule of the hook admits it for that "
            "cgroup (an annotation alone, which an image can carry, chooses no tenant)", c.id, c.cgroups_path,
            c.tenant);

    /* Everything from the host is checked before entering the container's
     * mount namespace, so that these are the host's files. */
    int run_fd = open(run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (run_fd < 0)
        die("%s: %s: is gpuslice-server running on this node?", run_dir, strerror(errno));
    char tenant_rel[sizeof c.tenant + 16], socket_rel[sizeof c.tenant + 32];
    snprintf(tenant_rel, sizeof tenant_rel, "tenants/%s", c.tenant);
    snprintf(socket_rel, sizeof socket_rel, "%s/gpuslice.sock", tenant_rel);
    struct stat st;
    if (fstatat(run_fd, tenant_rel, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        fstatat(run_fd, socket_rel, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
        die("unknown tenant '%s': gpuslice-server (%s) does not serve it (no socket %s/%s)", c.tenant, run_dir,
            run_dir, socket_rel);
    close(run_fd);
    struct source sources[3] = {
        {.type = S_IFDIR, .what = "the tenant's directory"},
        {.type = S_IFREG, .what = "the shim"},
        {.type = S_IFREG, .what = "the server's preload list"},
    };
    snprintf(sources[0].path, sizeof sources[0].path, "%s/%s", run_dir, tenant_rel);
    snprintf(sources[1].path, sizeof sources[1].path, "%s", shim);
    snprintf(sources[2].path, sizeof sources[2].path, "%s/%s", run_dir, GS_PRELOAD_FILE);
    for (int i = 0; i < 3; i++)
        open_source(&sources[i]);

    if (enter_container_mounts(&c))
        for (int i = 0; i < 3; i++)
            reopen_source(&sources[i]);
    struct root root = {.path = c.root, .readonly = c.root_readonly};
    root.fd = open(c.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root.fd < 0)
        die("cannot open the container's root %s: %s", c.root, strerror(errno));
    root.own_layer = scratch_is_own_layer(&root);
    char staging[4200];
    snprintf(staging, sizeof staging, "%s/.hook", run_dir);
    scratch_init(staging);

    place_bind(&root, sources[0].fd, true, GS_CONTAINER_RUN_DIR);
    place_bind(&root, sources[1].fd, false, GS_CONTAINER_SHIM);
    place_bind(&root, sources[2].fd, false, GS_CONTAINER_PRELOAD);
    scratch_finish();
    return 0;
}
