/*
 * The scripted cases about gangs (sim_scripted.h): their gathering, their
 * limits and their turns. GPUs are d, e and f (0, 1, 2); a process's slot
 * k names GPU k.
 */
#include "sim_scripted.h"

enum { D, E, F };

/* A gang whose limit holds it back is never chosen to gather by another
 * gang's turn. Gangs G (share 10, limit 0.5) and H (share 1), a busy rank
 * of each on GPUs d and e: each time H's turn came, G (first by virtual
 * time) was chosen to gather in its place, limit or not, and held 90 % of
 * both GPUs. Fails where a gang's limit is not looked at when it is picked
 * to gather (gang_to_form's gang_eligible and gang_next_everywhere's test
 * of its limit, both: G held 1680 ms of 2000; either alone covers it), and
 * on the plants no-limit and grant-while-held (test/sim/plant.py). */
void gang_held_back_by_limit(struct script *s)
{
    script_gpus(s, 2);
    int g = script_tenant(s, "G", 10), h = script_tenant(s, "H", 1);
    script_config(s, g)->limit = 0.5;
    script_start(s);
    struct script_proc *g_d = script_process(s, g, true), *g_e = script_process(s, g, true);
    struct script_proc *h_d = script_process(s, h, true), *h_e = script_process(s, h, true);
    script_declare(g_d, D);
    script_declare(g_e, E);
    script_declare(h_d, D);
    script_declare(h_e, E);
    script_acquire(g_d, D);
    script_acquire(g_e, E);
    script_acquire(h_d, D);
    script_acquire(h_e, E);
    const uint64_t window = 2000 * MS;
    script_run_for(s, window);
    for (int i = D; i <= E; i++) {
        uint64_t held_g = script_held_ns(s, i, g), held_h = script_held_ns(s, i, h);
        script_check(s, held_g <= window * 55 / 100,
                     "G held GPU %d for %.0f ms of %.0f: at most its limit 0.5 (+5 points)", i, script_ms(held_g),
                     script_ms(window));
        script_check(s, held_g + held_h >= window * 95 / 100,
                     "GPU %d held %.0f ms of %.0f by the two busy gangs: not left idle for the limit", i,
                     script_ms(held_g + held_h), script_ms(window));
    }
}

/* A GPU is not left idle while a tenant that is no gang waits there, when
 * a gang starts gathering from it. Gangs U (GPUs e, f) and T (d, e), plain
 * N on d, plain Y holding e (it does not give it back until its grace
 * ends). U and T wait; N gives d back asking for more: T's turn on d picks
 * U to gather (first by index), which needs no d, and d was left idle with
 * no timer while N waited, 260 ms, until Y's grace ended. The scheduler
 * now has U gather when it asks (it is next everywhere then), so N's
 * release meets a gathering under way, and dropping the look at d after
 * a gathering begins no longer fails here: the case holds the GPU's idle
 * time and N's wait to their bounds whichever way the gathering begins
 * (it fails on the plant grant-while-held). */
void gathering_leaves_no_gpu_idle(struct script *s)
{
    script_gpus(s, 3);
    int u = script_tenant(s, "U", 1), t = script_tenant(s, "T", 1);
    int n = script_tenant(s, "N", 1), y = script_tenant(s, "Y", 1);
    script_start(s);
    struct script_proc *u_e = script_process(s, u, false), *u_f = script_process(s, u, false);
    struct script_proc *t_d = script_process(s, t, false), *t_e = script_process(s, t, false);
    struct script_proc *n_d = script_process(s, n, false), *y_e = script_process(s, y, false);
    script_declare(u_e, E);
    script_declare(u_f, F);
    script_declare(t_d, D);
    script_declare(t_e, E);
    script_declare(n_d, D);
    script_declare(y_e, E);
    script_acquire(y_e, E);
    script_acquire(n_d, D);
    script_run_for(s, 5 * MS);
    script_acquire(u_e, E);
    script_acquire(t_d, D);
    script_run_for(s, 5 * MS);
    script_check(s, script_holds(n_d, D), "N holds d before it gives it back (the case's premise)");
    script_release(n_d, D, true);
    uint64_t unheld0 = s->unheld_wait_ns[D];
    uint64_t wait = script_until_granted(n_d, D, 50 * MS);
    script_run_for(s, 50 * MS - wait);
    script_check(s, wait <= MS, "N granted d %.1f ms after it asked again (at most 1 ms)", script_ms(wait));
    script_check(s, s->unheld_wait_ns[D] - unheld0 <= MS,
                 "d granted to nobody for %.1f ms of the next 50 while someone waited there (at most 1 ms)",
                 script_ms(s->unheld_wait_ns[D] - unheld0));
}

/* When the gang picked to gather is not next on all its GPUs, the
 * fallback considers the GPU's own best gang. Gang U (share 0.1; GPUs e,
 * f, behind plain X and Z on f) and gang T (d, e); a rank of T asks for d:
 * U comes first by gang order but is not next on f, and the fallback then
 * skipped T itself (the GPU's best) instead of U (the one tried): d and e
 * idled 440 ms and more while T and U waited. Fails on the plant
 * sched-gang-fallback-none (no other gang tried: d and e idle 500 and
 * 440 ms); skipping the GPU's best instead of the gang tried no longer
 * fails, as e's own look forms T's gang. */
void gang_fallback_not_next_everywhere(struct script *s)
{
    script_gpus(s, 3);
    int u = script_tenant(s, "U", 0.1), t = script_tenant(s, "T", 1);
    int x = script_tenant(s, "X", 1), z = script_tenant(s, "Z", 1);
    script_start(s);
    struct script_proc *u_f = script_process(s, u, false), *u_e = script_process(s, u, false);
    struct script_proc *t_d = script_process(s, t, true), *t_e = script_process(s, t, true);
    struct script_proc *x_f = script_process(s, x, true), *z_f = script_process(s, z, true);
    script_declare(u_f, F);
    script_declare(x_f, F);
    script_declare(z_f, F);
    script_acquire(u_f, F);
    script_acquire(x_f, F);
    script_acquire(z_f, F);
    script_run_for(s, 21 * MS); /* U's slice on f ends; it gives f back 1 ms late */
    script_check(s, script_holds(u_f, F), "U still holds f past its slice (the case's premise)");
    script_release(u_f, F, false);
    script_declare(u_e, E);
    script_acquire(u_e, E); /* U is a gang now, behind X and Z on f */
    script_declare(t_d, D);
    script_declare(t_e, E);
    uint64_t unheld_d = s->unheld_wait_ns[D], unheld_e = s->unheld_wait_ns[E];
    script_acquire(t_d, D);
    uint64_t wait = script_until_granted(t_d, D, 500 * MS);
    const struct device *e = script_device(s, E);
    script_check(s, wait <= 10 * MS, "T granted d %.0f ms after its rank asked (at most 10 ms)", script_ms(wait));
    script_check(s, e->state == DEV_RUNNING && e->holder && e->holder->tenant == script_sched_tenant(s, t),
                 "T's slice runs on e as well when it is granted d (a gang's GPUs together)");
    script_check(s, s->unheld_wait_ns[D] - unheld_d <= 10 * MS && s->unheld_wait_ns[E] - unheld_e <= 10 * MS,
                 "d and e granted to nobody while someone waited: %.0f and %.0f ms (at most 10 ms)",
                 script_ms(s->unheld_wait_ns[D] - unheld_d), script_ms(s->unheld_wait_ns[E] - unheld_e));
}

/* A gathering gang none of whose processes waits any more gives up. Gang
 * G (processes P1, P2 on d and e), plain X busy on e. P1 asks for d, G
 * starts gathering (d reserved), and P1 exits: G still gathered, took e
 * from X at the end of X's slice and held both GPUs a quantum for nobody,
 * X waiting meanwhile and G charged for it. Fails on the plants
 * sched-gathers-for-nobody (d stays reserved, X waits 20 ms) and
 * server-gone-kept. */
void gathering_for_nobody_gives_up(struct script *s)
{
    script_gpus(s, 2);
    int g = script_tenant(s, "G", 1), x = script_tenant(s, "X", 1);
    script_start(s);
    struct script_proc *p1 = script_process(s, g, false), *p2 = script_process(s, g, false);
    struct script_proc *x_e = script_process(s, x, true);
    script_declare(p1, D);
    script_declare(p1, E);
    script_declare(p2, D);
    script_declare(p2, E);
    script_declare(x_e, E);
    script_acquire(x_e, E);
    script_run_for(s, 5 * MS);
    script_acquire(p1, D);
    const struct device *d = script_device(s, D);
    script_check(s, server_sched.forming_gang == script_sched_tenant(s, g) && d->state == DEV_RESERVED,
                 "G gathers once P1 asks for d, d reserved for it (the case's premise)");
    script_exit(p1);
    script_check(s, server_sched.forming_gang != script_sched_tenant(s, g) && d->state == DEV_IDLE,
                 "once P1 exits, G gathers no more and d is free (d is %s)",
                 d->state == DEV_IDLE ? "idle" : d->state == DEV_RESERVED ? "reserved" : "granted");
    uint64_t waited0 = x_e->slot[E].waited_ns, unheld0 = s->unheld_wait_ns[E];
    const uint64_t window = 60 * MS;
    script_run_for(s, window);
    script_check(s, x_e->slot[E].waited_ns - waited0 <= MS, "X waited %.0f ms for e in the next %.0f (at most 1 ms)",
                 script_ms(x_e->slot[E].waited_ns - waited0), script_ms(window));
    script_check(s, s->unheld_wait_ns[E] - unheld0 <= MS,
                 "e granted to nobody for %.0f ms while X waited (at most 1 ms)",
                 script_ms(s->unheld_wait_ns[E] - unheld0));
    script_check(s, script_held_ns(s, D, g) == 0 && script_held_ns(s, E, g) == 0,
                 "G, which no process of asked for, charged %.0f ms on d and %.0f ms on e (none)",
                 script_ms(script_held_ns(s, D, g)), script_ms(script_held_ns(s, E, g)));
}

/* A gang whose limit holds it back on one GPU is granted when the limit
 * lets it go, whichever of its GPUs its rank asks on. G (limit 0.5) holds
 * d alone for 10 ms, so its limit keeps it off d for 10 ms more; then its
 * process names e too (G is a gang now) and asks for e, idle. The gang
 * gathers once d lets it: nothing looked at d when the rank asked on e,
 * so no timer was armed for it, and the rank waited for ever (sched_fuzz's
 * liveness check, corpus liveness-gang-limit-elsewhere). Fails on the
 * plants sched-gang-limit-unlooked (not granted in a second) and
 * no-limit. */
void gang_limit_on_another_gpu(struct script *s)
{
    script_gpus(s, 2);
    int g = script_tenant(s, "G", 1);
    script_config(s, g)->limit = 0.5;
    script_start(s);
    struct script_proc *p = script_process(s, g, false);
    script_declare(p, D);
    script_acquire(p, D);
    uint64_t began = script_now(s);
    script_run_for(s, 10 * MS);
    script_release(p, D, false);
    script_declare(p, E);
    script_acquire(p, E);
    uint64_t wait = script_until_granted(p, E, 1000 * MS);
    uint64_t granted = wait < 1000 * MS ? p->slot[E].last_grant_ns - began : script_now(s) - began;
    script_check(s, wait < 1000 * MS && granted >= 20 * MS && granted <= 20 * MS + SCRIPT_GRANT_SLACK_NS,
                 "G's rank %s e %.1f ms after G's slice on d began (20: 10 ms held at limit 0.5)",
                 wait < 1000 * MS ? "granted" : "still not granted", script_ms(granted));
}

/* A gang does not take a GPU at every turn from a holder behind it there.
 * Gang G (share 1) with a busy rank on d and on e, plain T (share 10,
 * busy) on e. Each time G's slice ended, T got e and G, alone on d, was
 * next there and next everywhere (T held e, so it did not wait): it
 * gathered, and e was reserved for it when T's slice ended, however far
 * behind G T was. G held half of e against a weight of 1/11 (the node's
 * named case gang-behind-holder meets the same). Fails where
 * gang_next_everywhere does not test a holder that would still be behind
 * the gang (G held 1000 ms of 2000), and on the plant
 * server-timer-not-rearmed. */
void gang_takes_no_turn_from_holder_behind(struct script *s)
{
    script_gpus(s, 2);
    int g = script_tenant(s, "G", 1), t = script_tenant(s, "T", 10);
    script_start(s);
    struct script_proc *g_d = script_process(s, g, true), *g_e = script_process(s, g, true);
    struct script_proc *t_e = script_process(s, t, true);
    script_declare(g_d, D);
    script_declare(g_e, E);
    script_declare(t_e, E);
    script_acquire(g_d, D);
    script_acquire(g_e, E);
    script_acquire(t_e, E);
    const uint64_t window = 2000 * MS;
    script_run_for(s, window);
    uint64_t held_g = script_held_ns(s, E, g), held_t = script_held_ns(s, E, t);
    script_check(s, held_g <= window * 14 / 100 && held_g > 0,
                 "G held e for %.0f ms of %.0f: its weight 1/11 (9 %%, +5 points), and not nothing", script_ms(held_g),
                 script_ms(window));
    script_check(s, held_g + held_t >= window * 95 / 100, "e held %.0f ms of %.0f by the two busy tenants",
                 script_ms(held_g + held_t), script_ms(window));
}
