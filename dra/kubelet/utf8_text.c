/*
 * UTF-8 repair for the strings the kubelet side sends (services.h): the
 * errors dra_prepare and dra_unprepare write, possibly truncated in the
 * middle of a character or holding bytes of a claim's data.
 */
#include "services.h"

/* The length of the valid UTF-8 sequence (RFC 3629) that starts at text,
 * or 0 if none does. Reads no further than a NUL. */
static int valid_sequence_length(const unsigned char *text)
{
    unsigned char lead = text[0];
    unsigned char second_low = 0x80, second_high = 0xBF;
    int continuations;

    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF) {
        continuations = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        continuations = 2;
        if (lead == 0xE0)
            second_low = 0xA0; /* no overlong forms */
        if (lead == 0xED)
            second_high = 0x9F; /* no surrogates */
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        continuations = 3;
        if (lead == 0xF0)
            second_low = 0x90;
        if (lead == 0xF4)
            second_high = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (text[1] < second_low || text[1] > second_high)
        return 0;
    for (int i = 2; i <= continuations; i++) {
        if (text[i] < 0x80 || text[i] > 0xBF)
            return 0;
    }
    return continuations + 1;
}

void utf8_text_repair(char *text)
{
    unsigned char *at = (unsigned char *)text;
    while (*at != '\0') {
        int length = valid_sequence_length(at);
        if (length == 0) {
            *at++ = '?';
        } else {
            at += length;
        }
    }
}
