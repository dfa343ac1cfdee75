"""The simulation can fail: each of the bugs below is planted, one at a time,
in a copy of the scheduler's sources (tokenserver/sched.c, memory.c), of
the server's glue the simulation runs (tokenserver/client_messages.c,
dispatch.c, devices.c)
and of the shim's (its slice machine shim/gs_slice.c, its dispatch
shim/gs_dispatch.c, what its gate thread does with what it reads
shim/gs_gate_messages.c, a drainer's round shim/gs_drain_round.c, its
lease ledger shim/gs_lease.c), the simulation is built from
that copy, and it must break an invariant within the first 1000 seeds
(or, for a bug only rare runs meet, in the seeds named with it: the ones a
search found, or the seeds of a named case, "case NAME FIRST-LAST"; when
the simulation changes, search again; a bug only a scripted case meets
names that case, whose checks fail on it). Prints the first
seed that caught each bug.

    plant.py SOURCE_ROOT CC [BUG ...]

The shim's headers need the CUDA driver's cuda.h: from the directory in
GPUSLICE_CUDA_INCLUDE, else CUDA_HOME/include, else /usr/local/cuda/include.

Exit status 0 when every bug is caught, 1 when one is not (or its patch
no longer applies: the code it names has changed), 2 on a usage error."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SEEDS = 1000

# name: (file, exact text, its replacement, what the bug is[, seeds "FIRST-LAST"])
BUGS = {
    "vtime-order": (
        "tokenserver/sched.c", "if (!best || dt->vtime < best->vtime ||\n",
        "if (!best || dt->vtime > best->vtime ||\n",
        "the scheduler picks the largest virtual time, not the smallest"),
    "memory-kept": (
        "tokenserver/memory.c", "    else if (dt && slot->mem_held)\n        sub(dt, slot, slot->mem_held);",
        "", "what a killed process held stays counted"),
    "ghost-uncounted": (
        "tokenserver/memory.c", "keep_ghost(dt, slot->pid, slot->mem_held); /* still counted */",
        "sub(dt, slot, slot->mem_held);",
        "what a process that lives on holds is uncounted when its connection closes"),
    "grant-while-held": (
        "tokenserver/sched.c", "static void schedule(struct sched *s, struct device *d, uint64_t now)\n{\n    if (d->state != DEV_IDLE)\n        return;",
        "static void schedule(struct sched *s, struct device *d, uint64_t now)\n{\n    if (d->state == DEV_RESERVED)\n        return;",
        "a GPU is granted while another tenant holds it"),
    "no-limit": (
        "tokenserver/sched.c", "    if (limit < 1.0) {\n        /* A limit set while",
        "    if (limit < 0.0) {\n        /* A limit set while",
        "a tenant's limit is never applied"),
    "sched-no-preempt": (
        "tokenserver/sched.c",
        "static void preempt_for(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t now)\n{\n",
        "static void preempt_for(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t now)\n{\n"
        "    return;\n",
        "a latency tenant never preempts: it waits for the batch slice to end"),
    "sched-extension-unpreempted": (
        "tokenserver/sched.c", "             * extension: the plant sched-extension-unpreempted). */\n            preempt_check(s, d, now);",
        "             * extension: the plant sched-extension-unpreempted). */",
        "a batch slice extended for being behind is not cut short when it passes a latency tenant waiting"),
    "sched-leaver-unlooked": (
        "tokenserver/sched.c", "                if (dt != d->holder && d->state == DEV_RUNNING)\n                    preempt_check(s, d, now);",
        "",
        "a tenant ahead of a latency tenant stops waiting, and nobody looks whether the latency tenant may "
        "preempt now", "case latency-next-when-tenant-ahead-leaves 1-1"),
    "sched-eligible-unlooked": (
        "tokenserver/sched.c",
        "        if (dt->eligible_at < d->deadline && (!d->timer_at || dt->eligible_at < d->timer_at))\n"
        "            set_timer(s, d, dt->eligible_at);\n", "",
        "a latency tenant its limit held back is not looked at again when the limit lets it go: it waits out the "
        "batch slice"),
    "sched-look-overwritten": (
        "tokenserver/sched.c",
        "    else if (!d->timer_at || d->deadline < d->timer_at)\n        set_timer(s, d, d->deadline);",
        "    else\n        set_timer(s, d, d->deadline);",
        "a preemption planned for one latency tenant drops the look planned for another one's limit", "447-447"),
    "sched-bound-unchanged": (
        "tokenserver/sched.c", "                    send_grant(s, d->slots[i], d, 0, true);\n", "                    (void)0;\n",
        "a batch holder is told of a latency tenant that names its GPU only with its next slice: until then it "
        "admits without a bound", "case latency-declared-mid-slice 1-1"),
    "sched-notices-unspaced": (
        "tokenserver/sched.c", "        if (d->bound_sent_at && now < d->bound_sent_at + BOUND_NOTICE_GAP_NS) {",
        "        if (false) {",
        "a batch holder gets a GRANT for each change of its bound, however close together (a latency tenant "
        "flipping its declaration had it dropped for not reading)", "case latency-device-flood 1-8"),
    "sched-change-unlooked": (
        "tokenserver/sched.c",
        "                bound_changed(s, d, now);\n                preempt_check(s, d, now);\n            }\n        break;",
        "                bound_changed(s, d, now);\n            }\n        break;",
        "a holder's new share does not move the preemption planned with its old one",
        "case latency-behind-holder-share-change 15-20"),
    "sched-preempted-min-charged": (
        "tokenserver/sched.c", "    if (used < MIN_SLICE_CHARGE_NS && !d->preempting) {",
        "    if (used < MIN_SLICE_CHARGE_NS) {",
        "a batch slice a latency tenant preempted early is charged the least a slice costs",
        "case batch-preempted-early 1-8"),
    "sched-preempted-refund-capped": (
        "tokenserver/sched.c", "    if (d->preempting) {\n        uint64_t handoff",
        "    if (false) {\n        uint64_t handoff",
        "a batch slice a latency tenant preempted early is refunded only 1/32 of it for the GRANT's way",
        "case batch-preempted-early 1-8"),
    # bugs only the scripted cases (test/sim/sim_scripted_*.c) meet: each
    # in the case that guards against it, one run
    "sched-floor-stale-entry": (
        "tokenserver/sched.c",
        "(dt != d->holder && (dt->eligible_at > now || is_gang(dt->tenant) || !waits_for(dt))))",
        "(dt != d->holder && (dt->eligible_at > now || is_gang(dt->tenant))))",
        "an entry left active while its tenant waits nowhere holds the GPU's floor down: a tenant back from "
        "idle starts that far behind", "case stale-gang-entry-floor 1-1"),
    "sched-gathers-for-nobody": (
        "tokenserver/sched.c", "    if (t->waiting == 0 && s->forming_gang == t)\n        gang_cancel(s, now);", "",
        "a gathering gang whose only waiting process exited goes on gathering, keeping GPUs for nobody",
        "case gathering-for-nobody-gives-up 1-1"),
    "sched-gang-limit-unlooked": (
        "tokenserver/sched.c", "        if (t->waiting > 0 && is_gang(t))\n            mark_dirty(s, e);", "",
        "a gang that starts waiting is not looked at on its other GPUs: where its limit holds it back no timer "
        "is armed, and its rank waits for ever", "case gang-limit-on-another-gpu 1-1"),
    "sched-gang-fallback-none": (
        "tokenserver/sched.c", "if (u != tried && is_gang(u) && waits_for(&d->tenants[i])",
        "if (0 && u != tried && is_gang(u) && waits_for(&d->tenants[i])",
        "where the gang picked to gather is not next on all its GPUs, no other gang is tried: the GPUs idle while "
        "gangs wait", "case gang-fallback-not-next-everywhere 1-1"),
    "sched-preemptions-free": (
        "tokenserver/sched.c", "        dt->preempt_debt_ns += PREEMPT_COST_NS;", "",
        "a latency tenant's preemptions cost it nothing: one that asks and gives back at once preempts at "
        "every ask", "case latency-ask-release-churn 1-1"),
    "sched-joiner-bound-untold": (
        "tokenserver/sched.c", "    if (d->ahead_granted != told) {", "    if (d->ahead_granted != told && 0) {",
        "a process that joins a slice as a latency tenant's settle time ends gets the new bound, and the "
        "holders never do", "case join-as-latency-settle-ends 1-1"),
    "sched-late-drain-unbounded": (
        "tokenserver/sched.c", "                d->holder->late_stop = now + s->grace_ns;",
        "                d->holder->late_stop = UINT64_MAX;",
        "a release long after the grace period charges all that time, not one more grace period at most",
        "case late-release-charge-bounded 1-1"),
    "sched-limit-from-slice-start": (
        "tokenserver/sched.c", "        dt->cap_from = now > d->slice_start ? now : d->slice_start;\n        return;",
        "        return;",
        "a limit set while a slice runs judges the slice from its start: a long slice held with no limit keeps "
        "its tenant off the GPU for seconds", "case limit-set-mid-slice 1-1"),
    "sched-limit-window-kept": (
        "tokenserver/sched.c",
        "    if (dt->eligible_at <= now || old >= 1.0 || dt->cap_until <= dt->cap_from)\n        return;",
        "    return;",
        "a tenant waiting out its limit's window keeps it when the limit changes (a limit lifted still holds "
        "it back)", "case limit-set-mid-slice 1-1"),
    "sched-ghost-gpu-unused": (
        "tokenserver/sched_prepare.c",
        "        if (dt->mem_used)\n            return false;\n        for (int g = 0; g < MEM_GHOSTS; g++)\n"
        "            if (dt->ghosts[g].pid)\n                return false;", "",
        "a GPU on which only a process that lost its connection counts memory reads unused (freed, its counts "
        "would go with it)", "case ghost-memory-keeps-gpu 1-1"),
    "gang-rank-forgotten": (
        "tokenserver/sched.c", "    if (dt && dt->refs > 0 && --dt->refs == 0) {\n        slot->tenant->devices--;",
        "    if (dt && dt->refs > 0 && dt->refs == 0) {\n        slot->tenant->devices--;",
        "a rank that exits still counts as one of its gang's GPUs"),
    # the shim's slice machine
    "shim-admit-after-revoke": (
        "shim/gs_slice.c", "    if (s->state != GS_SLICE_HOLD || ev->grant != s->grant)\n        return;\n    s->deadline_ns = now;",
        "    if (s->state != GS_SLICE_HOLD || ev->grant == s->grant)\n        return;\n    s->deadline_ns = now;",
        "the shim ignores a REVOKE of the slice it holds and goes on admitting launches"),
    "shim-idle-forgotten": (
        "shim/gs_slice.c", "    if (since && now > since)\n        atomic_fetch_add(&s->idle_ns, now - since);\n}",
        "    (void)since;\n}",
        "the idle spell a launch ends is not added to what RELEASE reports"),
    "shim-release-undrained": (
        "shim/gs_slice.c", "    if (!s->drainer) {\n        /* Nobody can wait for the work",
        "    if (1) {\n        /* Nobody can wait for the work",
        "a drain ends at once: RELEASE goes out before the admitted work has finished"),
    "shim-idle-unwoken": (
        "shim/gs_slice.c", "((held_idle(s) || s->round_owed_at) && (!s->gate_plan_ns",
        "(s->round_owed_at && (!s->gate_plan_ns",
        "the gate thread is not woken for the end of an idle spell: a slice is held idle to its deadline"),
    "shim-drainer-asleep": (
        "shim/gs_slice.c", "            s->round_owed_at = now + MEASURE_INTERVAL_NS;\n",
        "            ;\n",
        "a launch admitted after a wait owes no round: nothing sees its work finish until the deadline"),
    "shim-rejoined-unextended": (
        "shim/gs_slice.c", "    if (ev->grant == s->last_released && !join && !extension)\n",
        "    if (ev->grant == s->last_released && !join)\n",
        "a process that gave its slice back and joined it again ignores the slice's extensions (a new deadline, "
        "a bound on work ahead)", "case rejoined-holder-bounded 1-8"),
    "shim-ahead-ignored": (
        "shim/gs_slice.c", "    s->ahead_ns = ev->ahead_ns;", "    s->ahead_ns = 0;",
        "the shim ignores the GRANT's bound on what it admits ahead of the GPU (a preemption waits for its queue)"),
    # the shim's dispatch (what a slice machine's actions do)
    "dispatch-round-unwoken": (
        "shim/gs_dispatch.c", "        case GS_SLICE_START_ROUND:\n            gs_wake_drainers_locked();\n",
        "        case GS_SLICE_START_ROUND:\n",
        "START_ROUND does not wake the drainers: a round waits for a drainer's own timeout"),
    "dispatch-launchers-unwoken": (
        "shim/gs_dispatch.c", "        case GS_SLICE_WAKE_LAUNCHERS:\n            gs_wake_launchers_locked();\n",
        "        case GS_SLICE_WAKE_LAUNCHERS:\n",
        "WAKE_LAUNCHERS does not wake the launches waiting for admission"),
    "dispatch-gate-unwoken": (
        "shim/gs_dispatch.c", "            if (a->wake && a->at && sleeps_until && a->at < sleeps_until)",
        "            if (a->wake && a->at && sleeps_until && a->at > sleeps_until)",
        "ARM_TIMER wakes the gate thread only for a timer after the time it sleeps until, never for an earlier one"),
    "dispatch-owed-launchers-lost": (
        "shim/gs_dispatch.c", "        state->owed |= GS_OWED_LAUNCHERS;\n        return;", "        return;",
        "a wake-up of the launchers on the gate thread is dropped, not owed: a GRANT does not wake the launches "
        "waiting for it"),
    "dispatch-owed-drainers-lost": (
        "shim/gs_dispatch.c", "        state->owed |= GS_OWED_DRAINERS;\n", "        ;\n",
        "a wake-up of the drainers on the gate thread is dropped, not owed"),
    "dispatch-owed-ungiven": (
        "shim/gs_dispatch.c", "    unsigned o = state->owed & which;", "    unsigned o = 0;",
        "the wake-ups the gate thread owes are never given"),
    # the gate thread's handling of what it reads (gs_gate_messages.c)
    "gate-welcome-undeclared": (
        "shim/gs_gate_messages.c", "            m.u.mem.bytes = gs_lease_count(d);\n            gs_conn_send_about_locked(d, &m);",
        "            m.u.mem.bytes = gs_lease_count(d);",
        "a WELCOME declares no GPU's count: after a server's restart it counts nothing of what the processes hold"),
    "gate-revoke-ignored": (
        "shim/gs_gate_messages.c", "    case GS_MSG_GRANT:\n    case GS_MSG_REVOKE: {", "    case GS_MSG_GRANT: {",
        "a REVOKE is not handed to the slice machine: the process admits launches to its deadline"),
    "gate-grant-sent-ignored": (
        "shim/gs_gate_messages.c", "gs_slice_wire_event(msg, sent_ns, gs_conn_clock_offset_locked(), &ev);",
        "gs_slice_wire_event(msg, now, gs_conn_clock_offset_locked(), &ev);",
        "a GRANT's slice is taken to start when it is read, not when it was sent: its idle start goes unreported"),
    "gate-recall-unanswered": (
        "shim/gs_gate_messages.c", "m.u.mem.bytes = d->used ? gs_lease_recall(d, now) : 0;", "m.u.mem.bytes = 0;",
        "a MEM_RECALL is answered with nothing: a sibling's headroom is never lent, and a lease within the cap is "
        "refused"),
    # (a sibling's lease given headroom out of the room a recall made,
    # sibling_recalling's rule, costs the asker a round trip only since a
    # retry recalls the siblings leased during its round: not planted)
    "memory-retry-recalls-nobody": (
        "tokenserver/memory.c",
        "(send || (sib->leased_ns > asker->round_ns && sib->leased_ns > sib->recalled_ns))", "send",
        "a lease's retry does not recall a sibling granted a lease since its round of recalls began",
        "case sibling-leases-after-recall-round 1-1000"),
    "gate-lost-unheard": (
        "shim/gs_gate_messages.c",
        "    gs_conn_lost_locked(why);\n    struct gs_slice_event ev = {.type = GS_SLICE_DISCONNECTED, "
        ".policy_open = gs_conn_policy_open_locked()};\n    gs_dispatch_all_locked(&ev, now);",
        "    gs_conn_lost_locked(why);\n    (void)now;",
        "a lost connection is not told to the slice machines: a slice held goes on admitting"),
    # what a client's message does (client_messages.c)
    "client-welcome-unsent": (
        "tokenserver/client_messages.c", "        client_send(c, &welcome);\n", "        (void)welcome;\n",
        "a HELLO is not answered with WELCOME: the process never declares its GPUs, and waits for slices forever"),
    "server-gone-kept": (
        "tokenserver/devices.c", "    if (named == 0)\n        return;\n    struct sched_event ev = {.type = SCHED_CLIENT_GONE",
        "    if (named >= 0)\n        return;\n    struct sched_event ev = {.type = SCHED_CLIENT_GONE",
        "a closed client's slots are not undeclared: the scheduler keeps them waiting and holding"),
    "server-timer-not-rearmed": (
        "tokenserver/dispatch.c", "        timer_at(&((struct gpu *)a->device)->timer, a->at);",
        "        if (!((struct gpu *)a->device)->timer.at || !a->at)\n"
        "            timer_at(&((struct gpu *)a->device)->timer, a->at);",
        "a GPU's timer already armed is not armed again (an extension, a new deadline keep the old time)"),
    "server-wake-unarmed": (
        "tokenserver/dispatch.c", "    timer_at(&wake_timer, at);", "    timer_at(&wake_timer, 0);",
        "the scheduler's wake-up (SET_WAKE) is never armed: leases deferred while a restarted server recovers "
        "wait for the next memory event"),
    "server-late-unlogged": (
        "tokenserver/dispatch.c", "    case SCHED_LATE: {", "    case SCHED_LATE + 1000: {",
        "a slice taken back past its grace period is not logged"),
    # a drainer's round as the slice machine sees it (gs_drain_round.c)
    "drain-round-one-early": (
        "shim/gs_drain_round.c", "    done.target = atomic_load(&d->slice.submitted);",
        "    done.target = atomic_load(&d->slice.submitted);\n    done.target -= done.target > 0;",
        "a drain round reports finished one launch before the last it waited for"),
    "drain-round-wait-forgotten": (
        "shim/gs_drain_round.c", ".wait_until = out.round_begins ? 0 : out.round_wait_until};",
        ".wait_until = 0};",
        "a drainer told to look again at a time sleeps until woken instead"),
    "drain-round-done-untold": (
        "shim/gs_drain_round.c", "    gs_dispatch_locked(d, reading, end, &out);", "    (void)end, (void)out;",
        "a round's end is not told to the slice machine: a drain never ends"),
}

SCHEDULER = ["tokenserver/sched.c", "tokenserver/sched_prepare.c", "tokenserver/memory.c", "tokenserver/histogram.c",
             "tokenserver/sched_wire.c"]
SHIM = ["shim/gs_slice.c", "shim/gs_slice_wire.c", "shim/gs_dispatch.c", "shim/gs_gate_messages.c",
        "shim/gs_drain_round.c", "shim/gs_lease.c"]

# The server's glue the simulation runs: what a client's message does, the
# scheduler's driver and the GPUs clients declare, with what they read
# below them.
SERVER = ["tokenserver/options.c", "tokenserver/tables.c", "tokenserver/dispatch.c", "tokenserver/devices.c",
          "tokenserver/client_messages.c"]


def cuda_include():
    """Where cuda.h is (see the docstring)."""
    if os.environ.get("GPUSLICE_CUDA_INCLUDE"):
        return os.environ["GPUSLICE_CUDA_INCLUDE"]
    if os.environ.get("CUDA_HOME"):
        return os.path.join(os.environ["CUDA_HOME"], "include")
    return "/usr/local/cuda/include"


def build(root, cc, workdir, bug):
    """Copies the sources, plants bug, builds sim; its path or None."""
    headers = ["shim/" + f for f in os.listdir(os.path.join(root, "shim")) if f.endswith(".h")]
    for rel in SCHEDULER + SHIM + SERVER + headers + ["tokenserver/sched.h", "tokenserver/histogram.h",
                                                      "tokenserver/server.h"]:
        os.makedirs(os.path.dirname(os.path.join(workdir, rel)), exist_ok=True)
        shutil.copy(os.path.join(root, rel), os.path.join(workdir, rel))
    path, old, new = BUGS[bug][:3]
    target = os.path.join(workdir, path)
    text = open(target).read()
    if text.count(old) != 1:
        print("FAILED: bug %s: its text is not found once in %s (the code changed: update plant.py)" % (bug, path))
        return None
    open(target, "w").write(text.replace(old, new))
    sim_dir = os.path.join(root, "test", "sim")
    sources = [os.path.join(sim_dir, f) for f in sorted(os.listdir(sim_dir)) if f.endswith(".c")]
    sources += [os.path.join(workdir, rel) for rel in SCHEDULER + SHIM + SERVER]
    sources += [os.path.join(root, "include", "gpuslice", "protocol.c")]
    exe = os.path.join(workdir, "sim")
    # (the scheduler's sched.h for "sched.h" only: it would stand for the
    # system's <sched.h>, which <pthread.h> includes)
    argv = [cc, "-std=c11", "-O2", "-D_GNU_SOURCE", "-w", "-DGPUSLICE_SHIM_DEFAULT=\"libgpuslice.so\"",
            "-DGPUSLICE_VERSION=\"planted\"", "-I", os.path.join(root, "include"),
            "-iquote", os.path.join(workdir, "tokenserver"), "-I", os.path.join(workdir, "shim"), "-I", sim_dir,
            "-I", cuda_include(), "-o", exe] + sources + ["-lm"]
    built = subprocess.run(argv, capture_output=True, text=True)
    if built.returncode != 0:
        print("FAILED: bug %s: the planted copy does not build:\n%s" % (bug, built.stderr[-2000:]))
        return None
    return exe


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root, cc = sys.argv[1], sys.argv[2]
    bugs = sys.argv[3:] or list(BUGS)
    missed = 0
    for bug in bugs:
        if bug not in BUGS:
            print("unknown bug %s (known: %s)" % (bug, ", ".join(BUGS)))
            return 2
        with tempfile.TemporaryDirectory(prefix="gpuslice-plant-") as workdir:
            exe = build(root, cc, workdir, bug)
            if not exe:
                missed += 1
                continue
            seeds = BUGS[bug][4] if len(BUGS[bug]) > 4 else "1-%d" % SEEDS
            which = ["--case"] + seeds.split()[1:2] if seeds.startswith("case ") else []
            out = subprocess.run([exe] + which + ["--seeds", seeds.split()[-1], "--jobs", "2", "--first-failure"],
                                 capture_output=True, text=True, timeout=1800).stdout
        first = re.search(r"first failing seed (\d+)", out)
        what = [line for line in out.splitlines() if "FAILED" in line and re.match(r"(case \S+, )?seed ", line)]
        if first:
            detail = [line for line in what if re.match(r"(case \S+, )?seed %s:" % first.group(1), line)]
            print("ok: bug %s (%s) caught by seed %s: %s" % (bug, BUGS[bug][3], first.group(1),
                                                              (detail or what or ["?"])[0].split("FAILED", 1)[-1].strip()))
        else:
            missed += 1
            print("FAILED: bug %s (%s) is not caught by seeds %s" % (bug, BUGS[bug][3], seeds))
    print("%d passed, %d failed" % (len(bugs) - missed, missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
