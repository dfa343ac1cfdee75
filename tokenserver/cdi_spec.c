/*
 * Renders the CDI spec of a set of tenants (see cdi_spec.h). Each tenant
 * is one device whose containerEdits bind-mount, read-only, the tenant's
 * socket directory, the shim and the server's one-line preload list, and
 * set LD_PRELOAD: the same three mounts gpuslice-hook makes.
 *
 * cdiVersion is 0.5.0: podman 4.x and containerd 1.7 reject 0.6.0.
 *
 * After an uninstall the devices stay, inert (an environment variable
 * and nothing else), so that containers naming a tenant still start.
 */
#include "cdi_spec.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/containers.h"

bool cdi_valid_device_name(const char *name)
{
    if (!isalnum((unsigned char)name[0]))
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.' && *p != ':')
            return false;
    return true;
}

/* Writes s as a JSON string, quotes included. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void mount_entry(FILE *f, const char *host, const char *container, bool last)
{
    fputs("          {\"hostPath\": ", f);
    json_string(f, host);
    fputs(", \"containerPath\": ", f);
    json_string(f, container);
    fprintf(f, ", \"options\": [\"ro\", \"bind\"]}%s\n", last ? "" : ",");
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* run_dir NULL: the inert spec. */
static char *render(const char *const *names, size_t count, const char *run_dir, const char *shim)
{
    const char **sorted = malloc((count ? count : 1) * sizeof *sorted);
    if (!sorted)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (cdi_valid_device_name(names[i]))
            sorted[n++] = names[i];
    qsort(sorted, n, sizeof *sorted, by_name);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        free(sorted);
        return NULL;
    }
    fputs("{\n  \"cdiVersion\": \"0.5.0\",\n  \"kind\": \"" GS_CDI_KIND "\",\n  \"devices\": [\n", f);
    char path[4096];
    for (size_t i = 0; i < n; i++) {
        fputs("    {\n      \"name\": ", f);
        json_string(f, sorted[i]);
        if (!run_dir) {
            fprintf(f, ",\n      \"containerEdits\": {\n        \"env\": [\"" CDI_UNINSTALLED_ENV "\"]\n      }\n    }%s\n",
                    i + 1 < n ? "," : "");
            continue;
        }
        fputs(",\n      \"containerEdits\": {\n"
              "        \"env\": [\"LD_PRELOAD=" GS_CONTAINER_SHIM "\"],\n"
              "        \"mounts\": [\n", f);
        snprintf(path, sizeof path, "%s/tenants/%s", run_dir, sorted[i]);
        mount_entry(f, path, GS_CONTAINER_RUN_DIR, false);
        mount_entry(f, shim, GS_CONTAINER_SHIM, false);
        snprintf(path, sizeof path, "%s/%s", run_dir, GS_PRELOAD_FILE);
        mount_entry(f, path, GS_CONTAINER_PRELOAD, true);
        fprintf(f, "        ]\n      }\n    }%s\n", i + 1 < n ? "," : "");
    }
    fputs("  ]\n}\n", f);
    free(sorted);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

char *cdi_spec_render(const char *const *names, size_t count, const char *run_dir, const char *shim)
{
    return render(names, count, run_dir, shim);
}

char *cdi_spec_render_inert(const char *const *names, size_t count)
{
    return render(names, count, NULL, NULL);
}

bool cdi_spec_run_dir(const char *text, char *out, size_t len)
{
    static const char key[] = "\"hostPath\": \"", suffix[] = "/" GS_PRELOAD_FILE;
    for (const char *p = strstr(text, key); p; p = strstr(p, key)) {
        p += sizeof key - 1;
        size_t n = 0;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++; /* json_string escapes only '"' and '\\' in paths */
            if (n + 1 < len)
                out[n++] = *p;
        }
        out[n < len ? n : len - 1] = '\0';
        size_t sl = sizeof suffix - 1;
        if (n + 1 < len && n > sl && strcmp(out + n - sl, suffix) == 0) {
            out[n - sl] = '\0';
            return true;
        }
    }
    return false;
}
