/*
 * Kubernetes quantities (dra/kube/quantity.c): a table of texts with the
 * bytes (rounded up) and the double each stands for, the texts refused and
 * why, and byte counts written back as quantities.
 */
#include "check.h"
#include "quantity.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static const struct {
    const char *text;
    uint64_t bytes;
    double value;
} accepted[] = {
    {"0", 0, 0.0},
    {"25", 25, 25.0},
    {"+25", 25, 25.0},
    {"007", 7, 7.0},
    {"0.5", 1, 0.5},
    {".5", 1, 0.5},
    {"5.", 5, 5.0},
    {"1.25", 2, 1.25},
    {"250m", 1, 0.25},
    {"1500m", 2, 1.5},
    {"2000m", 2, 2.0},
    {"1e3", 1000, 1000.0},
    {"1E3", 1000, 1000.0},
    {"1.5e3", 1500, 1500.0},
    {"1e-3", 1, 0.001},
    {"25e+0", 25, 25.0},
    {"2k", 2000, 2000.0},
    {"3M", 3000000, 3e6},
    {"3G", 3000000000ull, 3e9},
    {"1T", 1000000000000ull, 1e12},
    {"1P", 1000000000000000ull, 1e15},
    {"1E", 1000000000000000000ull, 1e18},
    {"1Ki", 1024, 1024.0},
    {"8Gi", 8ull << 30, 8.0 * (1ull << 30)},
    {"80Gi", 80ull << 30, 80.0 * (1ull << 30)},
    {"1.5Gi", 3ull << 29, 1.5 * (1ull << 30)},
    {"0.1Ki", 103, 102.4},
    {"1Ti", 1ull << 40, 1099511627776.0},
    {"1Pi", 1ull << 50, 1125899906842624.0},
    {"15Ei", 15ull << 60, 15.0 * 1152921504606846976.0},
    {"18446744073709551615", UINT64_MAX, 18446744073709551615.0},
    {"18446744073709551.615k", UINT64_MAX, 18446744073709551615.0},
    {"0.000000000000000000001", 1, 1e-21},
    {"1e-100000", 1, 0.0},
    {"0e99999", 0, 0.0},
    {"100", 100, 100.0},
};

static const struct {
    const char *text;
    const char *why; /* a part of the message */
} refused[] = {
    {"", "empty"},
    {"-1", "negative"},
    {"-0.5Gi", "negative"},
    {"abc", "does not start with a number"},
    {".", "does not start with a number"},
    {"Gi", "does not start with a number"},
    {"1Q", "unknown suffix \"Q\""},
    {"1 Gi", "unknown suffix \" Gi\""},
    {" 1", "does not start with a number"},
    {"1gi", "unknown suffix"},
    {"1KI", "unknown suffix"},
    {"1.2.3", "unknown suffix \".3\""},
    {"1e", "unknown suffix"},
    {"1e3.5", "unknown suffix"},
    {"1Gi5", "unknown suffix"},
    {"0x10", "unknown suffix"},
    {"12345678901234567890123456789012345678901234567890123456789012345", "longer than 64"},
};

/* Only the byte count overflows: these are fine as doubles. */
static const char *const too_large_for_bytes[] = {
    "18446744073709551616", "16Ei", "1e20", "20E", "18446744073709551.6151k", "99999999999999999999999",
};

int main(void)
{
    char error[256];
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        uint64_t bytes = 12345;
        double value = -1;
        int rc = kube_quantity_bytes(accepted[i].text, &bytes, error, sizeof error);
        if (rc != 0 || bytes != accepted[i].bytes)
            printf("quantity \"%s\": bytes %" PRIu64 " (rc %d %s), want %" PRIu64 "\n", accepted[i].text, bytes, rc,
                   rc ? error : "", accepted[i].bytes);
        EXPECT(rc == 0 && bytes == accepted[i].bytes);
        rc = kube_quantity_double(accepted[i].text, &value, error, sizeof error);
        double tolerance = fabs(accepted[i].value) * 1e-12;
        if (rc != 0 || fabs(value - accepted[i].value) > tolerance)
            printf("quantity \"%s\": value %.17g (rc %d), want %.17g\n", accepted[i].text, value, rc,
                   accepted[i].value);
        EXPECT(rc == 0 && fabs(value - accepted[i].value) <= tolerance);
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        uint64_t bytes;
        double value;
        error[0] = '\0';
        int rc = kube_quantity_bytes(refused[i].text, &bytes, error, sizeof error);
        if (rc == 0 || !strstr(error, refused[i].why))
            printf("quantity \"%s\": rc %d, message \"%s\", want one with \"%s\"\n", refused[i].text, rc, error,
                   refused[i].why);
        EXPECT(rc == -1 && strstr(error, refused[i].why));
        EXPECT(kube_quantity_double(refused[i].text, &value, error, sizeof error) == -1);
    }
    for (size_t i = 0; i < sizeof too_large_for_bytes / sizeof too_large_for_bytes[0]; i++) {
        uint64_t bytes;
        double value;
        int rc = kube_quantity_bytes(too_large_for_bytes[i], &bytes, error, sizeof error);
        if (rc == 0 || !strstr(error, "is larger than 18446744073709551615"))
            printf("quantity \"%s\": rc %d (%s), want an overflow\n", too_large_for_bytes[i], rc, error);
        EXPECT(rc == -1 && strstr(error, "is larger than"));
        EXPECT(kube_quantity_double(too_large_for_bytes[i], &value, error, sizeof error) == 0 && value > 1.8e19);
    }
    double value;
    EXPECT(kube_quantity_double("1e400", &value, error, sizeof error) == -1 && strstr(error, "too large"));
    EXPECT(kube_quantity_bytes(NULL, &(uint64_t){0}, error, sizeof error) == -1);

    /* Writing bytes back. */
    static const struct {
        uint64_t bytes;
        const char *text;
    } formatted[] = {
        {0, "0"},
        {1, "1"},
        {1000, "1000"},
        {1024, "1Ki"},
        {1536, "1536"},
        {3ull << 29, "1536Mi"},
        {80ull << 30, "80Gi"},
        {85520809984ull, "81559Mi"}, /* an H100 80GB */
        {3000000000ull, "3000000000"},
        {1ull << 60, "1Ei"},
        {UINT64_MAX, "18446744073709551615"},
    };
    for (size_t i = 0; i < sizeof formatted / sizeof formatted[0]; i++) {
        char text[32];
        bool ok = kube_quantity_format_bytes(formatted[i].bytes, text, sizeof text);
        if (!ok || strcmp(text, formatted[i].text) != 0)
            printf("bytes %" PRIu64 ": \"%s\", want \"%s\"\n", formatted[i].bytes, text, formatted[i].text);
        EXPECT(ok && strcmp(text, formatted[i].text) == 0);
        uint64_t back;
        EXPECT(kube_quantity_bytes(text, &back, error, sizeof error) == 0 && back == formatted[i].bytes);
    }
    char small[4];
    EXPECT(!kube_quantity_format_bytes(80ull << 30, small, sizeof small));
    return check_finish();
}
