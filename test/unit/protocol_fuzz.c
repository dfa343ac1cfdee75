/*
 * Fuzz target for the wire protocol decoder, the code that parses bytes
 * from another process. Any input must decode without reading out of
 * bounds, and whatever decodes must encode back to the same bytes.
 *
 * Built two ways: with clang -fsanitize=fuzzer as a libFuzzer target (CI
 * runs it for 60 s), and with a small main() that replays the files named
 * on the command line (the meson test replays the seed corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_msg msg;
    if (gs_msg_decode(data, size, &msg) != GS_DECODE_OK)
        return 0;
    static uint8_t again[GS_MSG_MAX];
    size_t len = gs_msg_encode(&msg, again, sizeof again);
    /* Strings are re-padded with NULs on encoding; compare what decodes. */
    struct gs_msg round;
    if (len == 0 || gs_msg_decode(again, len, &round) != GS_DECODE_OK || round.type != msg.type ||
        memcmp(&round.u, &msg.u, sizeof msg.u) != 0 || round.text_len != msg.text_len ||
        (msg.text_len && memcmp(round.text, msg.text, msg.text_len) != 0))
        abort();
    return 0;
}

#ifndef GS_LIBFUZZER
#include "fuzz_replay.h"

int main(int argc, char **argv)
{
    static uint8_t buf[GS_MSG_MAX * 2];
    int files = 0;
    for (int i = 1; i < argc; i++) {
        long bytes = fuzz_replay_read(argv[i], buf, sizeof buf);
        if (bytes < 0)
            return 1;
        size_t n = (size_t)bytes;
        LLVMFuzzerTestOneInput(buf, n);
        /* every prefix too: truncation is the commonest damage */
        for (size_t k = 0; k < n && k < 64; k++)
            LLVMFuzzerTestOneInput(buf, k);
        files++;
    }
    printf("%d passed, 0 failed\n", files);
    return 0;
}
#endif
