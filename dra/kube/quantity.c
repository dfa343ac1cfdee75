/*
 * Kubernetes resource quantities: parsing resource.Quantity's text form
 * (a number, then a binary suffix Ki..Ei, a decimal suffix m k M G T P E or
 * an exponent e3/E-3) exactly, to a whole count rounded up or to a double,
 * and writing byte counts back as quantities.
 */
#include "quantity.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An exponent beyond this many powers of ten is treated as this one: the
 * value then overflows (or rounds up to 1) all the same. */
#define EXPONENT_LIMIT 100000L

/* value = digits × 10^exponent10 × 2^binary_shift, digits without leading
 * or trailing zeros ("" for zero). */
struct parsed_quantity {
    char digits[KUBE_QUANTITY_MAX_TEXT + 1];
    size_t ndigits;
    long exponent10;
    unsigned binary_shift;
};

static const struct {
    const char *suffix;
    int exponent10;
    unsigned binary_shift;
} suffixes[] = {
    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60},
    {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0}, {"E", 18, 0},
};

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Parses "e3", "E-3", "e+12" (after the mantissa) into *exponent. */
static int parse_exponent(const char *p, long *exponent)
{
    if (*p != 'e' && *p != 'E')
        return -1;
    p++;
    int negative = 0;
    if (*p == '+' || *p == '-')
        negative = *p++ == '-';
    if (!is_digit(*p))
        return -1;
    long value = 0;
    for (; is_digit(*p); p++) {
        if (value < EXPONENT_LIMIT)
            value = value * 10 + (*p - '0');
    }
    if (*p != '\0')
        return -1;
    if (value > EXPONENT_LIMIT)
        value = EXPONENT_LIMIT;
    *exponent = negative ? -value : value;
    return 0;
}

static int parse_quantity(const char *text, struct parsed_quantity *q, char *error, size_t error_size)
{
    if (!text) {
        snprintf(error, error_size, "no quantity");
        return -1;
    }
    size_t length = strlen(text);
    if (length == 0) {
        snprintf(error, error_size, "an empty quantity");
        return -1;
    }
    if (length > KUBE_QUANTITY_MAX_TEXT) {
        snprintf(error, error_size, "a quantity longer than %d characters", KUBE_QUANTITY_MAX_TEXT);
        return -1;
    }
    memset(q, 0, sizeof *q);
    const char *p = text;
    if (*p == '-') {
        snprintf(error, error_size, "quantity \"%s\" is negative", text);
        return -1;
    }
    if (*p == '+')
        p++;
    size_t mantissa_digits = 0;
    int seen_point = 0;
    for (; is_digit(*p) || (*p == '.' && !seen_point); p++) {
        if (*p == '.') {
            seen_point = 1;
            continue;
        }
        mantissa_digits++;
        if (seen_point)
            q->exponent10--;
        if (q->ndigits == 0 && *p == '0')
            continue; /* a leading zero */
        q->digits[q->ndigits++] = *p;
    }
    if (mantissa_digits == 0) {
        snprintf(error, error_size, "quantity \"%s\" does not start with a number", text);
        return -1;
    }
    if (*p != '\0') {
        size_t i;
        for (i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
            if (strcmp(p, suffixes[i].suffix) == 0)
                break;
        }
        if (i < sizeof suffixes / sizeof suffixes[0]) {
            q->exponent10 += suffixes[i].exponent10;
            q->binary_shift = suffixes[i].binary_shift;
        } else {
            long exponent;
            if (parse_exponent(p, &exponent) != 0) {
                snprintf(error, error_size, "quantity \"%s\" has an unknown suffix \"%s\"", text, p);
                return -1;
            }
            q->exponent10 += exponent;
        }
    }
    /* Trailing zeros move into the exponent. */
    while (q->ndigits > 0 && q->digits[q->ndigits - 1] == '0') {
        q->ndigits--;
        q->exponent10++;
    }
    q->digits[q->ndigits] = '\0';
    return 0;
}

/* Appends decimal digit d to *value: false on overflow. */
static bool append_digit(uint64_t *value, unsigned d)
{
    if (*value > (UINT64_MAX - d) / 10)
        return false;
    *value = *value * 10 + d;
    return true;
}

int kube_quantity_bytes(const char *text, uint64_t *out, char *error, size_t error_size)
{
    struct parsed_quantity q;
    if (parse_quantity(text, &q, error, error_size) != 0)
        return -1;
    if (q.ndigits == 0) {
        *out = 0;
        return 0;
    }
    /* The digits times 2^shift, as a little-endian decimal number: at most
     * 64 digits times 2^60 (19 more digits). */
    unsigned char number[KUBE_QUANTITY_MAX_TEXT + 24];
    size_t length = q.ndigits;
    for (size_t i = 0; i < length; i++)
        number[i] = (unsigned char)(q.digits[length - 1 - i] - '0');
    for (unsigned s = 0; s < q.binary_shift; s++) {
        unsigned carry = 0;
        for (size_t i = 0; i < length; i++) {
            unsigned d = number[i] * 2u + carry;
            number[i] = (unsigned char)(d % 10);
            carry = d / 10;
        }
        if (carry)
            number[length++] = (unsigned char)carry;
    }
    /* Times 10^exponent10: whole digits from the top, rounding up if any
     * digit below the point is not zero. */
    uint64_t value = 0;
    if (q.exponent10 >= 0) {
        if ((long)length + q.exponent10 > 20)
            goto overflow;
        for (size_t i = length; i-- > 0;) {
            if (!append_digit(&value, number[i]))
                goto overflow;
        }
        for (long e = 0; e < q.exponent10; e++) {
            if (!append_digit(&value, 0))
                goto overflow;
        }
    } else {
        size_t below = q.exponent10 < -(long)length ? length : (size_t)-q.exponent10;
        bool fraction = false;
        for (size_t i = 0; i < below; i++)
            fraction = fraction || number[i] != 0;
        for (size_t i = length; i-- > below;) {
            if (!append_digit(&value, number[i]))
                goto overflow;
        }
        if (fraction) {
            if (value == UINT64_MAX)
                goto overflow;
            value++;
        }
    }
    *out = value;
    return 0;
overflow:
    snprintf(error, error_size, "quantity \"%s\" is larger than %" PRIu64, text, UINT64_MAX);
    return -1;
}

int kube_quantity_double(const char *text, double *out, char *error, size_t error_size)
{
    struct parsed_quantity q;
    if (parse_quantity(text, &q, error, error_size) != 0)
        return -1;
    if (q.ndigits == 0) {
        *out = 0.0;
        return 0;
    }
    /* Digits and an exponent, no decimal point: the locale's radix
     * character plays no part. */
    char scientific[KUBE_QUANTITY_MAX_TEXT + 32];
    snprintf(scientific, sizeof scientific, "%se%ld", q.digits, q.exponent10);
    errno = 0;
    char *end;
    double value = strtod(scientific, &end);
    if (*end != '\0') {
        snprintf(error, error_size, "quantity \"%s\" is not a number", text);
        return -1;
    }
    value = ldexp(value, (int)q.binary_shift);
    if (!isfinite(value) || (errno == ERANGE && value != 0.0)) {
        snprintf(error, error_size, "quantity \"%s\" is too large", text);
        return -1;
    }
    *out = value;
    return 0;
}

bool kube_quantity_format_bytes(uint64_t bytes, char *out, size_t out_size)
{
    static const char *const binary[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    int written = -1;
    for (int i = 0; i < 6 && bytes != 0; i++) {
        unsigned shift = 60u - 10u * (unsigned)i;
        if ((bytes & ((UINT64_C(1) << shift) - 1)) == 0) {
            written = snprintf(out, out_size, "%" PRIu64 "%s", bytes >> shift, binary[i]);
            break;
        }
    }
    if (written < 0)
        written = snprintf(out, out_size, "%" PRIu64, bytes);
    return written >= 0 && (size_t)written < out_size;
}
