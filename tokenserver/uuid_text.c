/*
 * A GPU's UUID as text, the form the NVIDIA driver and nvidia-smi print
 * after "GPU-": 8-4-4-4-12 lowercase hex digits. Used by the status, the
 * metrics and the log lines about a client's GPU.
 */
#include "server.h"

void uuid_text(const uint8_t uuid[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        *p++ = hex[uuid[i] >> 4];
        *p++ = hex[uuid[i] & 15];
        if (i == 3 || i == 5 || i == 7 || i == 9)
            *p++ = '-';
    }
    *p = '\0';
}
