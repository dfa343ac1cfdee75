/*
 * The server's tables: every tenant, every client connection, and a count
 * of the tenants and GPUs freed. Defined here, below the files that read
 * them (accept.c, cdi.c, status.c, the metrics), so that reading a table
 * makes no circle through the files that change it: tenants.c adds and
 * removes tenants, clients.c connections, and tenants.c and devices.c
 * count removals. All owned by the loop's thread.
 */
#include "server.h"

/* The tenants, oldest first, and how many. */
struct tenant *tenants;
unsigned ntenants;

/* Every connection, and how many (all tenants). */
struct client *clients;
unsigned nclients;

/* Tenants and GPUs freed so far: a status cursor's pointer is still valid
 * while this has not changed (status.c). */
uint64_t removals;
