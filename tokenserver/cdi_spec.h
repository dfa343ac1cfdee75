/*
 * The CDI spec of gpuslice's tenants, as text: shared by gpuslice-server,
 * which writes it into its CDI directory, and gpuslicectl cdi, which
 * prints it for a dry run. Nothing here touches a file.
 */
#ifndef GPUSLICE_CDI_SPEC_H
#define GPUSLICE_CDI_SPEC_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a tenant name is also a valid CDI device name (it must start
 * with a letter or a digit). */
bool cdi_valid_device_name(const char *name);

/* The spec (cdiVersion 0.5.0, kind gpuslice.io/tenant) with one device per
 * name, sorted by name, for a server whose run directory is run_dir and
 * whose shim on the host is shim. Names that are not valid device names
 * are left out. Returns a malloc'd NUL-terminated string, or NULL if out
 * of memory. */
char *cdi_spec_render(const char *const *names, size_t count, const char *run_dir, const char *shim);

/* The spec gpuslice-server --uninstall leaves: the same devices, whose
 * only edit sets GPUSLICE_UNINSTALLED=1 (a CDI device needs one), so that
 * a container that still names a tenant starts, without gpuslice. */
#define CDI_UNINSTALLED_ENV "GPUSLICE_UNINSTALLED=1"
char *cdi_spec_render_inert(const char *const *names, size_t count);

/* The run directory whose tenants a spec's devices mount: the directory
 * of the preload list it mounts (RUN_DIR/cdi/ld.so.preload), into out.
 * False if the text names none (an inert spec, or another's). */
bool cdi_spec_run_dir(const char *text, char *out, size_t len);

#endif
