/*
 * Rules that more than one part of gpuslice enforces, defined once: what
 * a tenant name may be (the server's tenant files and sockets, the hook's
 * --allow rules and annotations) and how a byte count is written (a tenant
 * file's `memory`, the shim's GPUSLICE_CONTEXT_BYTES) and shown (the
 * server's and the shim's messages).
 */
#ifndef GPUSLICE_RULES_H
#define GPUSLICE_RULES_H

#include <stdbool.h>
#include <stdint.h>

/* A tenant name: 1 to GS_NAME_MAX - 1 (63) letters, digits, '.', '_' and
 * '-', not beginning with '.' or '-' (a file name and a path component
 * that is never hidden, never an option, never "." or ".."). ASCII only:
 * the same in every locale. */
bool gs_tenant_name_valid(const char *name);

/* A byte count: decimal digits, then optionally K, M, G or T (powers of
 * 1024, either case), optionally followed by i and B ("4G", "4GiB",
 * "4gb" are the same), and nothing else. Zero and counts that do not fit
 * 64 bits are refused. Returns whether text is one; *out is set only
 * then. */
bool gs_parse_bytes(const char *text, uint64_t *out);

/* A byte count as people write one, into out: "512 MiB", "3.8 GiB",
 * "100 TiB", "12 bytes" (one decimal where the unit does not divide it).
 * Returns out. */
const char *gs_bytes_text(uint64_t bytes, char out[32]);

#endif
