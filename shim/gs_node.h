/* The device node that proves access to a GPU (gs_node.c). */
#ifndef GS_NODE_H
#define GS_NODE_H

#include <stdint.h>

/* An open descriptor (close-on-exec) of the device node of the GPU uuid,
 * for the server to check; -1 where there is none to open (no NVIDIA
 * driver lists the GPU) or it cannot be opened. The caller closes it. */
int gs_node_open(const uint8_t uuid[16]);

#endif
