/*
 * The share of a GPU a tenant should get now, for /metrics and the status
 * (gpuslicectl top draws it against what the tenant achieved): what the
 * scheduler converges to if the tenants busy on the GPU now stay busy.
 *
 * Busy tenants split the GPU by share, none above its limit, and what a
 * capped tenant leaves goes to the others by share ("water filling"): with
 * a level L, tenant i gets min(limit_i, L * share_i), and L is the level
 * at which the targets add up to the whole GPU (or every tenant is capped).
 * L is found by bisection, O(busy tenants) per step, once per device and
 * instant: the report asks for each tenant in turn at the same instant.
 */
#include "metrics.h"

#define BISECTION_STEPS 64

bool device_tenant_busy(const struct device *d, const struct device_tenant *dt)
{
    return sched_in_line(dt) || (d->holder == dt && d->state != DEV_IDLE);
}

/* Sum over busy tenants of min(limit, level * share). */
static double filled(const struct device *d, double level)
{
    double sum = 0;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (!device_tenant_busy(d, dt))
            continue;
        double want = level * dt->tenant->config.share;
        sum += want < dt->tenant->config.limit ? want : dt->tenant->config.limit;
    }
    return sum;
}

/* The water level of d now. */
static double level_of(const struct device *d)
{
    /* Past the largest limit/share every busy tenant is capped. */
    double top = 0;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        double ratio = dt->tenant->config.limit / dt->tenant->config.share;
        if (device_tenant_busy(d, dt) && ratio > top)
            top = ratio;
    }
    if (top == 0 || filled(d, top) <= 1.0)
        return top;
    double lo = 0, hi = top;
    for (int step = 0; step < BISECTION_STEPS; step++) {
        double mid = (lo + hi) / 2;
        if (filled(d, mid) < 1.0)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

double device_tenant_target_share(const struct device *d, const struct device_tenant *dt, uint64_t now)
{
    /* The last device computed, and when: its level holds for that instant,
     * since nothing changes while a report is being written. */
    static const struct device *memo_device;
    static uint64_t memo_now, memo_grant;
    static double memo_level;
    if (!device_tenant_busy(d, dt))
        return 0;
    if (memo_device != d || memo_now != now || memo_grant != d->grant) {
        memo_device = d;
        memo_now = now;
        memo_grant = d->grant;
        memo_level = level_of(d);
    }
    double want = memo_level * dt->tenant->config.share;
    return want < dt->tenant->config.limit ? want : dt->tenant->config.limit;
}
