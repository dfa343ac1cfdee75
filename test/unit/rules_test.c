/*
 * The rules of include/gpuslice/rules.h, which the server, the hook and
 * the shim share: tenant names and byte counts, case by case.
 */
#include <stdio.h>
#include <string.h>

#include "gpuslice/rules.h"

static int failures;

static void name(const char *n, bool want)
{
    if (gs_tenant_name_valid(n) != want) {
        printf("FAILED: tenant name '%s' should be %s\n", n, want ? "valid" : "refused");
        failures++;
    }
}

static void bytes(const char *text, bool want, uint64_t value)
{
    uint64_t got = 12345;
    bool ok = gs_parse_bytes(text, &got);
    if (ok != want || (ok && got != value) || (!ok && got != 12345)) {
        printf("FAILED: byte count '%s': %s %llu, want %s %llu\n", text, ok ? "accepted as" : "refused,",
               (unsigned long long)got, want ? "accepted as" : "refused", (unsigned long long)value);
        failures++;
    }
}

int main(void)
{
    char longest[64], too_long[65];
    memset(longest, 'a', 63);
    longest[63] = '\0';
    memset(too_long, 'a', 64);
    too_long[64] = '\0';
    name("team-a", true);
    name("a", true);
    name("9lives", true);
    name("a.b_c-d", true);
    name("_under", true);
    name(longest, true);
    name(too_long, false);
    name("", false);
    name(".hidden", false);
    name("-option", false);
    name("..", false);
    name("a/b", false);
    name("a b", false);
    name("caf\xc3\xa9", false);
    name("tab\t", false);

    bytes("1", true, 1);
    bytes("512M", true, 512ull << 20);
    bytes("4G", true, 4ull << 30);
    bytes("4GiB", true, 4ull << 30);
    bytes("4gb", true, 4ull << 30);
    bytes("2t", true, 2ull << 40);
    bytes("100B", true, 100);
    bytes("16777215T", true, 16777215ull << 40);
    bytes("16777216T", false, 0);
    bytes("18446744073709551615", true, 18446744073709551615ull);
    bytes("18446744073709551616", false, 0);
    bytes("0", false, 0);
    bytes("0G", false, 0);
    bytes("", false, 0);
    bytes("G", false, 0);
    bytes("-1", false, 0);
    bytes("+1", false, 0);
    bytes(" 1", false, 0);
    bytes("1 G", false, 0);
    bytes("1.5G", false, 0);
    bytes("0x10", false, 0);
    bytes("1P", false, 0);
    bytes("1Gi", true, 1ull << 30);
    bytes("1iB", false, 0);
    bytes("1GBB", false, 0);
    if (failures)
        return 1;
    printf("ok: tenant names and byte counts follow their rules (40 cases)\n");
    return 0;
}
