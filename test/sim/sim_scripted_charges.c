/*
 * The scripted cases about what a tenant is charged and owed
 * (sim_scripted.h): the GPU's floor of virtual time, limits, drains past
 * the grace period, and the memory a process that lost its connection
 * still counts. GPUs are d and e (0, 1); a process's slot k names GPU k.
 */
#include "sim_scripted.h"

enum { D, E };

/* An entry left active while its tenant waits nowhere does not hold a
 * GPU's floor down. G (share 0.1) runs on e, becomes a gang (a process of
 * it asks for d), then that process exits: its entry on e stayed active,
 * waiting nowhere, at a low virtual time, and the floor stopped there. A,
 * idle while B ran alone for 1 s, came back that far behind B and got 379
 * of the next 400 ms. Fails on the plant sched-floor-stale-entry (379 ms
 * again). */
void stale_gang_entry_floor(struct script *s)
{
    script_gpus(s, 2);
    int g = script_tenant(s, "G", 0.1), a = script_tenant(s, "A", 1), b = script_tenant(s, "B", 1);
    script_start(s);
    struct script_proc *g_d = script_process(s, g, false), *g_e = script_process(s, g, false);
    struct script_proc *a_e = script_process(s, a, true), *b_e = script_process(s, b, true);
    script_declare(a_e, E);
    script_declare(b_e, E);
    script_declare(g_e, E);
    script_acquire(a_e, E);
    script_acquire(b_e, E);
    script_run_for(s, 100 * MS);
    script_acquire(g_e, E);
    script_run_for(s, 30 * MS);
    script_check(s, script_holds(g_e, E), "G holds e 30 ms after it asked (the case's premise)");
    script_release(g_e, E, false);
    script_run_for(s, 5 * MS);
    script_declare(g_d, D); /* G is a gang now, and waits: A and B are ahead of it on e */
    script_acquire(g_d, D);
    script_run_for(s, 60 * MS);
    script_exit(g_d); /* its process on d goes: no gang, waiting nowhere */
    script_run_for(s, 300 * MS);
    script_check(s, script_holds(a_e, E), "A holds e when it goes idle (the case's premise)");
    a_e->busy = false;
    script_release(a_e, E, false);
    script_run_for(s, 1000 * MS); /* B alone */
    a_e->busy = true;
    script_acquire(a_e, E);
    uint64_t a0 = script_held_ns(s, E, a), b0 = script_held_ns(s, E, b);
    const uint64_t window = 400 * MS;
    script_run_for(s, window);
    uint64_t held_a = script_held_ns(s, E, a) - a0, held_b = script_held_ns(s, E, b) - b0;
    script_check(s, held_a <= window * 6 / 10 && held_b >= window * 4 / 10,
                 "A back from idle held %.0f ms and B %.0f ms of the next %.0f (each 40..60 %%)", script_ms(held_a),
                 script_ms(held_b), script_ms(window));
}

/* A tenant alone on a GPU that gives back each slice idle (it
 * synchronized, then asked again a little later) raises the GPU's floor
 * as it goes. It left the running at each release, after the slice had
 * ended, so the floor stayed where it was when A left; A, back after B ran
 * alone for 1 s, started that far behind B and held the GPU while B
 * waited (a simulation run met it: 190 ms, against a bound of 148). Fails
 * where the floor is raised neither as a tenant leaves the running
 * (deactivate_unless_waiting) nor at each grant (schedule: A held 399 ms
 * of 400; either alone covers it), and on the plant vtime-order. */
void idle_releases_raise_floor(struct script *s)
{
    script_gpus(s, 1);
    int a = script_tenant(s, "A", 1), b = script_tenant(s, "B", 1);
    script_start(s);
    struct script_proc *a_d = script_process(s, a, true), *b_d = script_process(s, b, false);
    script_declare(a_d, D);
    script_declare(b_d, D);
    script_acquire(a_d, D);
    script_run_for(s, 100 * MS);
    a_d->busy = false;
    if (script_holds(a_d, D))
        script_release(a_d, D, false);
    script_run_for(s, 5 * MS);
    /* B alone for 1 s: a 5 ms burst, then idle 2 ms, and again */
    uint64_t alone_until = script_now(s) + 1000 * MS;
    while (script_now(s) < alone_until) {
        script_acquire(b_d, D);
        script_until_granted(b_d, D, 100 * MS);
        script_run_for(s, 5 * MS);
        if (script_holds(b_d, D))
            script_release(b_d, D, false);
        script_run_for(s, 2 * MS);
    }
    /* A is back, and B is busy now: they should split the GPU */
    a_d->busy = true;
    b_d->busy = true;
    script_acquire(a_d, D);
    script_acquire(b_d, D);
    uint64_t a0 = script_held_ns(s, D, a), b0 = script_held_ns(s, D, b);
    const uint64_t window = 400 * MS;
    script_run_for(s, window);
    uint64_t held_a = script_held_ns(s, D, a) - a0, held_b = script_held_ns(s, D, b) - b0;
    script_check(s, held_a <= window * 6 / 10 && held_b >= window * 4 / 10,
                 "A back after B ran alone held %.0f ms and B %.0f ms of the next %.0f (each 40..60 %%)",
                 script_ms(held_a), script_ms(held_b), script_ms(window));
}

/* A tenant that comes back to a busy GPU waits at most about one quantum
 * for its first slice, whatever it did before (issue 32). inf runs alone
 * for 3 s in steps that go idle (each RELEASE without more), leaves; 2 s
 * later bat starts, busy; 0.5 s later inf asks again. The floor moved only
 * when some tenant became active or left with others in the running,
 * never with inf's own slices: bat started 1.5 s of virtual time behind
 * inf, and inf waited 1 s for bat to use as much (token-return's first
 * step of 0.5 to 1.3 s). Fails where the floor is raised neither as a
 * tenant leaves the running nor at each grant (inf waits 1000 ms again),
 * and on the plant grant-while-held. */
void return_after_solo_run(struct script *s)
{
    script_gpus(s, 1);
    int inf = script_tenant(s, "inf", 1), bat = script_tenant(s, "bat", 1);
    script_start(s);
    struct script_proc *solo = script_process(s, inf, false);
    script_declare(solo, D);
    for (unsigned i = 0; i < 500; i++) { /* steps: 1 ms of kernels, 2 ms idle, then 3 ms of host work */
        script_acquire(solo, D);
        script_until_granted(solo, D, 100 * MS);
        script_run_for(s, 3 * MS);
        script_release(solo, D, false);
        script_run_for(s, 3 * MS);
    }
    script_exit(solo);
    script_run_for(s, 2000 * MS);
    struct script_proc *busy = script_process(s, bat, true);
    script_declare(busy, D);
    script_acquire(busy, D);
    script_run_for(s, 500 * MS);
    struct script_proc *back = script_process(s, inf, false);
    script_declare(back, D);
    script_acquire(back, D);
    uint64_t wait = script_until_granted(back, D, 2000 * MS);
    script_check(s, wait <= 2 * SCRIPT_QUANTUM_NS, "inf granted %.1f ms after it asked (at most two quanta, %.0f ms)",
                 script_ms(wait), script_ms(2 * SCRIPT_QUANTUM_NS));
}

/* A GPU that no slot declares, but on which a live process that lost its
 * connection has memory counted (a ghost), is in use: the server frees a
 * GPU when sched_device_unused says so for --device-linger-ms, and its
 * entries' counts went with it, so the tenant's next process was leased
 * the memory the live one still held, past the tenant's cap. Tenant t (cap
 * 1000 MB): p leases 600 MB and loses its connection, living on; the GPU
 * must stay in use until p is gone (the server's check of its ghosts finds
 * it exited), q's lease of 600 MB meanwhile must be refused, and once p is
 * gone the GPU is unused, its linger starting then. Fails on the plants
 * sched-ghost-gpu-unused, ghost-uncounted and server-gone-kept. */
void ghost_memory_keeps_gpu(struct script *s)
{
    const uint64_t mb = 1000000ull;
    script_gpus(s, 1);
    int t = script_tenant(s, "t", 1);
    script_config(s, t)->memory = 1000 * mb;
    script_start(s);
    struct script_proc *p = script_process(s, t, false);
    script_declare(p, D);
    uint32_t status = script_lease(p, D, 600 * mb);
    script_check(s, status == GS_LEASE_GRANTED && p->lease_granted == 600 * mb,
                 "p's lease of 600 MB: status %u, %llu bytes granted (granted, 600 MB)", (unsigned)status,
                 (unsigned long long)p->lease_granted);
    script_disconnect(p);
    script_run_for(s, 60000 * MS); /* far past any linger */
    const struct device *d = script_device(s, D);
    script_check(s, !sched_device_unused(d), "the GPU %s while p's 600 MB is a ghost on it (in use)",
                 sched_device_unused(d) ? "reads unused" : "reads in use");
    script_check(s, script_mem_counted(s, D, t) == 600 * mb, "t counts %llu bytes after p's connection closed (600 MB)",
                 (unsigned long long)script_mem_counted(s, D, t));
    struct script_proc *q = script_process(s, t, false);
    script_declare(q, D);
    status = script_lease(q, D, 600 * mb);
    script_check(s, status == GS_LEASE_REFUSED, "q's lease of 600 MB past the cap: status %u (refused, %u)",
                 (unsigned)status, (unsigned)GS_LEASE_REFUSED);
    script_exit(q);
    script_run_for(s, 1000 * MS);
    script_check(s, !sched_device_unused(d), "the GPU %s after q left, p's ghost still counted (in use)",
                 sched_device_unused(d) ? "reads unused" : "reads in use");
    uint64_t gone_at = script_now(s);
    script_exit(p);
    script_check(s, script_mem_counted(s, D, t) == 0, "t counts %llu bytes after p exited (0)",
                 (unsigned long long)script_mem_counted(s, D, t));
    script_check(s, sched_device_unused(d) && d->unused_since == gone_at,
                 "the GPU %s, unused since %.0f ms after p exited (unused, since 0 ms)",
                 sched_device_unused(d) ? "reads unused" : "reads in use",
                 (double)(int64_t)(d->unused_since - gone_at) / 1e6);
}

/* A holder's drain past its grace counts toward its limit. L (limit 0.5)
 * alone on d holds a slice and does not release until 400 ms after it
 * began, past deadline (20 ms) + grace (250 ms): the slice was taken back
 * at 270 ms and charged up to then, the late release ignored, and L was
 * granted again 540 ms after its slice began, having held the GPU 400 ms
 * (74 %; the node's named case late-drains-under-limit: a tenant at limit
 * 0.41 whose drains outlasted the grace held 46.9 % of a run). Its late
 * release now says when the drain ended: charged up to then, L waits
 * until 800 ms. Fails where the late release is not charged
 * (charge_late_drain: 270 ms charged, L granted again at 540 ms), or not
 * toward the limit (540 ms), and on the plant no-limit. */
void late_drain_counts_toward_limit(struct script *s)
{
    script_gpus(s, 1);
    int l = script_tenant(s, "L", 1);
    script_config(s, l)->limit = 0.5;
    script_start(s);
    struct script_proc *p = script_process(s, l, false);
    script_declare(p, D);
    uint64_t began = script_now(s);
    script_acquire(p, D);
    uint64_t grant = p->slot[D].held;
    script_check(s, grant != 0, "p holds grant %llu after asking (a grant)", (unsigned long long)grant);
    script_run_until(s, began + 400 * MS);
    script_check(s, !script_holds(p, D), "p %s its slice 400 ms after it began (taken back at deadline + grace)",
                 script_holds(p, D) ? "still holds" : "no longer holds");
    script_release(p, D, false); /* the grant it was given, drained until now */
    script_check(s, script_held_ns(s, D, l) == 400 * MS, "L charged %.1f ms for a slice drained until 400 ms (400)",
                 script_ms(script_held_ns(s, D, l)));
    script_acquire(p, D);
    uint64_t waited = script_until_granted(p, D, 1000 * MS);
    script_check(s, waited >= 400 * MS && waited <= 400 * MS + SCRIPT_GRANT_SLACK_NS,
                 "L granted again %.1f ms after its slice began (800: 400 ms held at limit 0.5)",
                 script_ms(p->slot[D].last_grant_ns - began));
}

/* What a late release charges is bounded: one more grace period. S holds
 * a slice on d, O waits, and S is stopped (SIGSTOP) past its grace; its
 * work ends meanwhile, but it releases only when it runs again, 3 s after
 * its slice began. The server cannot tell that from a drain of 3 s: it
 * charges S up to deadline + 2 x grace (520 ms), not 3000 ms (which would
 * keep S from the GPU until O had used as much). Fails on the plant
 * sched-late-drain-unbounded (3000 ms), and where the late release is not
 * charged (270 ms). */
void late_release_charge_bounded(struct script *s)
{
    script_gpus(s, 1);
    int t = script_tenant(s, "S", 1), o = script_tenant(s, "O", 1);
    script_start(s);
    struct script_proc *p = script_process(s, t, false), *q = script_process(s, o, true);
    script_declare(p, D);
    script_declare(q, D);
    script_acquire(p, D);
    script_acquire(q, D);
    script_run_for(s, 3000 * MS);
    script_release(p, D, false); /* the grant it was given, 3 s ago */
    script_check(s, script_held_ns(s, D, t) == SCRIPT_QUANTUM_NS + 2 * options.grace_ns,
                 "S charged %.1f ms for a release 3000 ms after its slice began (%.1f: deadline + 2 x grace)",
                 script_ms(script_held_ns(s, D, t)), script_ms(SCRIPT_QUANTUM_NS + 2 * options.grace_ns));
}

/* A limit set while a slice runs judges that slice from then on, not from
 * its start. T, busy and alone on d with no limit, holds one slice for 2 s
 * (extended: nobody else wants d); then its limit becomes 0.5. Its slice
 * ends at the next deadline, and it may hold d half the time from the
 * change on: granted again within 2 quanta, not 4 s later (the 2 s held
 * before the change, judged by the new limit: sched_fuzz's liveness check
 * saw 8.4 s held and then a limit of 0.25 keep the GPU idle 25 s). And the
 * limit binds: T holds at most half of the next second. Then the limit
 * goes back to 1 while T waits out a window of 0.1: it is granted at once,
 * not when the old limit would have let it. Fails on the plants
 * sched-limit-from-slice-start (granted again 2040 ms after the change),
 * sched-limit-window-kept (178 ms after the limit went back to 1) and
 * no-limit. */
void limit_set_mid_slice(struct script *s)
{
    script_gpus(s, 1);
    int t = script_tenant(s, "T", 1);
    script_start(s);
    struct script_proc *p = script_process(s, t, true);
    script_declare(p, D);
    script_acquire(p, D);
    script_run_for(s, 2000 * MS);
    script_check(s, script_holds(p, D) && p->slot[D].grants > 50,
                 "T holds d after 2 s alone, its slice extended (%u grants)", p->slot[D].grants);
    uint64_t changed = script_now(s), held_before = script_held_ns(s, D, t);
    struct tenant_config config = *script_config(s, t);
    config.limit = 0.5;
    script_tenant_changed(s, t, config);
    unsigned grants = p->slot[D].grants;
    uint64_t first_slice_end = 0;
    while (script_now(s) < changed + 5000 * MS && p->slot[D].grants == grants) {
        script_run_for(s, MS);
        if (!first_slice_end && !script_holds(p, D))
            first_slice_end = script_now(s);
    }
    uint64_t regranted = p->slot[D].last_grant_ns - changed;
    script_check(s, first_slice_end && regranted <= 2 * SCRIPT_QUANTUM_NS + SCRIPT_GRANT_SLACK_NS,
                 "T granted again %.1f ms after its limit became 0.5 (at most 2 quanta, %.1f ms; not 4 s)",
                 script_ms(regranted), script_ms(2 * SCRIPT_QUANTUM_NS));
    uint64_t from = script_now(s), held_from = script_held_ns(s, D, t);
    script_run_for(s, 1000 * MS);
    double part = (double)(script_held_ns(s, D, t) - held_from) / (double)(script_now(s) - from);
    script_check(s, part > 0.45 && part <= 0.5 + (double)SCRIPT_QUANTUM_NS / 1e9,
                 "T held %.3f of the second after (limit 0.5; %.1f s held before the change)", part,
                 (double)held_before / 1e9);
    /* the limit lowered to 0.1: a window of 9 slices' time to wait out */
    config.limit = 0.1;
    script_tenant_changed(s, t, config);
    while (script_now(s) < from + 3000 * MS && script_holds(p, D))
        script_run_for(s, MS);
    script_run_for(s, 2 * MS);
    const struct device_tenant *dt = script_entry(s, D, t);
    bool waits = !script_holds(p, D) && dt->eligible_at > script_now(s) + 50 * MS;
    script_check(s, waits, "T waits %.1f ms for its limit of 0.1 after a slice",
                 script_ms(dt->eligible_at - script_now(s)));
    config.limit = 1.0;
    script_asks(p, D);
    script_tenant_changed(s, t, config);
    uint64_t wait = script_until_granted(p, D, 1000 * MS);
    script_check(s, waits && wait <= SCRIPT_GRANT_SLACK_NS,
                 "T granted %.1f ms after its limit went back to 1 (at once)", script_ms(wait));
}
