/*
 * fakecuda handle table: turns the opaque CUDA handles given to the
 * application into objects, and rejects garbage, stale and mistyped ones
 * (CUDA_ERROR_INVALID_HANDLE) instead of dereferencing them. Under
 * FAKECUDA_STRICT=1 the use of a stale handle (one that was valid and has
 * been destroyed) aborts, so that a debugger or ASan shows the caller.
 *
 * A handle is (type << 56) | (generation << 32) | (index + 1). Every reuse
 * of an entry raises its generation, whatever the type. The table is
 * process-wide; table_lock guards it.
 */
#include "fc_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct handle_entry {
    void *object;
    uint32_t generation;
    uint8_t type;
};

/* Process-wide table of live handles; guarded by table_lock. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle_entry *table;
static uint32_t table_len, table_cap;
static uint32_t *free_list;
static uint32_t free_len;

uint64_t fc_handle_new(enum fc_handle_type type, void *object)
{
    pthread_mutex_lock(&table_lock);
    uint32_t index;
    if (free_len > 0) {
        index = free_list[--free_len];
    } else {
        if (table_len == table_cap) {
            uint32_t cap = table_cap ? table_cap * 2 : 256;
            struct handle_entry *grown = realloc(table, cap * sizeof *grown);
            uint32_t *grown_free = realloc(free_list, cap * sizeof *grown_free);
            if (grown)
                table = grown;
            if (grown_free)
                free_list = grown_free;
            if (!grown || !grown_free) {
                pthread_mutex_unlock(&table_lock);
                return 0;
            }
            table_cap = cap;
        }
        index = table_len++;
        table[index].generation = 0;
    }
    struct handle_entry *e = &table[index];
    e->object = object;
    e->type = (uint8_t)type;
    e->generation = (e->generation + 1) & 0xffffff;
    uint64_t handle = ((uint64_t)type << 56) | ((uint64_t)e->generation << 32) | (index + 1);
    pthread_mutex_unlock(&table_lock);
    return handle;
}

static struct handle_entry *lookup_locked(enum fc_handle_type type, uint64_t handle)
{
    if ((handle >> 56) != (uint64_t)type)
        return NULL;
    uint32_t index = (uint32_t)(handle & 0xffffffffu);
    uint32_t generation = (uint32_t)((handle >> 32) & 0xffffff);
    if (index == 0 || index > table_len)
        return NULL;
    struct handle_entry *e = &table[index - 1];
    if (!e->object || e->type != type || e->generation != generation)
        return NULL;
    return e;
}

void *fc_handle_lookup(enum fc_handle_type type, uint64_t handle, bool *stale)
{
    *stale = false;
    pthread_mutex_lock(&table_lock);
    struct handle_entry *e = lookup_locked(type, handle);
    void *object = e ? e->object : NULL;
    if (!e && (handle >> 56) == (uint64_t)type) {
        uint32_t index = (uint32_t)(handle & 0xffffffffu);
        uint32_t generation = (uint32_t)((handle >> 32) & 0xffffff);
        /* Issued once (its generation was reached) and not live now. */
        *stale = index > 0 && index <= table_len && generation != 0 &&
                 generation <= table[index - 1].generation;
    }
    pthread_mutex_unlock(&table_lock);
    return object;
}

static const char *type_name(enum fc_handle_type type)
{
    switch (type) {
    case FC_H_CONTEXT: return "CUcontext";
    case FC_H_STREAM: return "CUstream";
    case FC_H_EVENT: return "CUevent";
    case FC_H_MODULE: return "CUmodule";
    case FC_H_FUNCTION: return "CUfunction";
    case FC_H_LIBRARY: return "CUlibrary";
    case FC_H_GRAPH: return "CUgraph";
    case FC_H_GRAPH_NODE: return "CUgraphNode";
    case FC_H_GRAPH_EXEC: return "CUgraphExec";
    case FC_H_ARRAY: return "CUarray";
    case FC_H_MIPMAP: return "CUmipmappedArray";
    case FC_H_MEMPOOL: return "CUmemoryPool";
    case FC_H_MEMHANDLE: return "CUmemGenericAllocationHandle";
    }
    return "handle";
}

/* FAKECUDA_STRICT, read once; written under pthread_once, read-only after. */
static pthread_once_t strict_once = PTHREAD_ONCE_INIT;
static bool strict;

static void load_strict(void)
{
    const char *v = getenv("FAKECUDA_STRICT");
    strict = v && strcmp(v, "0") != 0 && v[0] != '\0';
}

void fc_stale_use(const char *call, enum fc_handle_type type, uint64_t handle)
{
    pthread_once(&strict_once, load_strict);
    if (!strict)
        return;
    char line[256];
    int n = snprintf(line, sizeof line, "fakecuda[%d]: %s: stale %s 0x%" PRIx64
                     " (used after it was destroyed)\n", (int)getpid(), call, type_name(type), handle);
    if (n > 0) {
        ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)ignored;
    }
    abort();
}

void *fc_handle_use(const char *call, enum fc_handle_type type, uint64_t handle)
{
    bool stale;
    void *object = fc_handle_lookup(type, handle, &stale);
    if (stale)
        fc_stale_use(call, type, handle);
    return object;
}

void *fc_handle_get(enum fc_handle_type type, uint64_t handle)
{
    pthread_mutex_lock(&table_lock);
    struct handle_entry *e = lookup_locked(type, handle);
    void *object = e ? e->object : NULL;
    pthread_mutex_unlock(&table_lock);
    return object;
}

void fc_handle_free(enum fc_handle_type type, uint64_t handle)
{
    pthread_mutex_lock(&table_lock);
    struct handle_entry *e = lookup_locked(type, handle);
    if (e) {
        e->object = NULL;
        free_list[free_len++] = (uint32_t)(handle & 0xffffffffu) - 1;
    }
    pthread_mutex_unlock(&table_lock);
}

void fc_handles_atfork_prepare(void)
{
    pthread_mutex_lock(&table_lock);
}

void fc_handles_atfork_parent(void)
{
    pthread_mutex_unlock(&table_lock);
}

void fc_handles_atfork_child(void)
{
    /* The child inherits the parent's objects but none of its threads:
     * every handle is stale there. The memory is left to the child's exit. */
    for (uint32_t i = 0; i < table_len; i++)
        if (table[i].object) {
            table[i].object = NULL;
            free_list[free_len++] = i;
        }
    pthread_mutex_unlock(&table_lock);
}
