/*
 * The scripted cases (sim --case NAME), one history each, written by hand
 * on the harness of sim_script.h: SCRIPTED(name, function, what it shows).
 * Each is a regression case for the scheduler (tokenserver/sched.c and
 * the server's glue the simulation runs): the comment above its function
 * says what broke, and what the case catches when that comes back.
 *
 *   sim_scripted_gangs.c    gangs: gathering, their limits, their turns
 *   sim_scripted_latency.c  latency tenants: preemption, bounds, notices
 *   sim_scripted_charges.c  what a tenant is charged and owed: the floor,
 *                           limits, late drains, a ghost's memory
 */
#ifndef GPUSLICE_SIM_SCRIPTED_H
#define GPUSLICE_SIM_SCRIPTED_H

#include "sim_script.h"

#define SCRIPTED_CASES \
    SCRIPTED("gang-held-back-by-limit", gang_held_back_by_limit, \
             "a gang its limit holds back is not chosen to gather at another gang's turn") \
    SCRIPTED("gathering-leaves-no-gpu-idle", gathering_leaves_no_gpu_idle, \
             "a GPU a gang starts gathering from is not left idle while a plain tenant waits there") \
    SCRIPTED("gang-fallback-not-next-everywhere", gang_fallback_not_next_everywhere, \
             "where the gang picked to gather is not next on all its GPUs, the GPU's own best gang is tried") \
    SCRIPTED("gathering-for-nobody-gives-up", gathering_for_nobody_gives_up, \
             "a gathering gang none of whose processes waits any more gives up") \
    SCRIPTED("gang-limit-on-another-gpu", gang_limit_on_another_gpu, \
             "a gang its limit holds back on one GPU is granted when the limit lets it go, whichever GPU it " \
             "asks on") \
    SCRIPTED("gang-takes-no-turn-from-holder-behind", gang_takes_no_turn_from_holder_behind, \
             "a gang does not take a GPU at every turn from a holder behind it there") \
    SCRIPTED("latency-waiting-as-batch-slice-starts", latency_waiting_as_batch_slice_starts, \
             "a batch slice begun with a latency tenant waiting ends when its holder passes that tenant") \
    SCRIPTED("latency-stream-beside-batch", latency_stream_beside_batch, \
             "a latency tenant's requests beside two busy batch tenants are each granted within 2 ms") \
    SCRIPTED("latency-next-when-tenant-ahead-leaves", latency_next_when_tenant_ahead_leaves, \
             "a latency tenant preempts once the tenant ahead of it leaves, not at the end of the batch slice") \
    SCRIPTED("latency-declared-mid-slice", latency_declared_mid_slice, \
             "a latency tenant that names a GPU mid-slice bounds the holder then, and lifts the bound as it " \
             "leaves") \
    SCRIPTED("latency-waits-holder-share-halved", latency_waits_holder_share_halved, \
             "a holder's share halved mid-slice brings the preemption a latency tenant waits for forward") \
    SCRIPTED("latency-declaration-flips", latency_declaration_flips, \
             "a latency tenant flipping its declaration of a GPU sends the holder at most one notice per 2 ms") \
    SCRIPTED("latency-ask-release-churn", latency_ask_release_churn, \
             "a latency tenant that asks and gives back at once preempts only as far as its holding pays") \
    SCRIPTED("join-as-latency-settle-ends", join_as_latency_settle_ends, \
             "the holders of a slice a process joins as a latency tenant's settle time ends are bounded too") \
    SCRIPTED("stale-gang-entry-floor", stale_gang_entry_floor, \
             "an entry left active while its tenant waits nowhere does not hold a GPU's floor down") \
    SCRIPTED("idle-releases-raise-floor", idle_releases_raise_floor, \
             "a tenant alone that gives each slice back idle raises the GPU's floor as it goes") \
    SCRIPTED("return-after-solo-run", return_after_solo_run, \
             "a tenant back to a busy GPU after a solo run and a pause waits at most two quanta") \
    SCRIPTED("ghost-memory-keeps-gpu", ghost_memory_keeps_gpu, \
             "a GPU on which a process that lost its connection still counts memory stays in use") \
    SCRIPTED("late-drain-counts-toward-limit", late_drain_counts_toward_limit, \
             "a drain past the grace period counts toward the holder's limit") \
    SCRIPTED("late-release-charge-bounded", late_release_charge_bounded, \
             "a release long after the grace period charges one more grace period at most") \
    SCRIPTED("limit-set-mid-slice", limit_set_mid_slice, \
             "a limit set while a slice runs judges it from then on, and binds; lifted, it lets the tenant go")

#define SCRIPTED(name, fn, what) script_fn fn;
SCRIPTED_CASES
#undef SCRIPTED

#endif
