"""Shares for real launch patterns, judged by the fakecuda meter.

Busy tenants whose programs synchronize after every N launches (or never),
with kernels from 50 us to 5 ms, must split the device by their shares;
a lone tenant with a limit must get its limit; the device must stay as
busy as the same programs keep it without gpuslice.

  share_matrix.py [--subset] [--seconds S] [--only TEXT]

--subset runs three representative cells; --only runs the cells whose
name contains TEXT. Prints one line per cell (with the
server's overrun p99 per tenant, for information: the time its slices
ran past their deadlines) and exits 1 if any cell misses its target:
  split        each tenant's part of the device time used, within +-2
               points of share / sum of shares
  limit        a lone tenant with `limit = L` gets between L - 2 and L + 1
               points of the device (of what its program can use alone,
               when that is less than L)
  utilization  at least 95 % of what the same programs achieve together
               without gpuslice; for programs that cannot fill the device
               alone, at least 95 % of the best any of them achieves alone
               (slices are exclusive, so a tenant's own gaps stay idle)

Programs use the default scheduling (CU_CTX_SCHED_AUTO), as applications
do: a synchronizing thread spins while it waits.

At the end, one BENCH-RESULT line per target over the cells run
(test/bench/bench_result.py; --targets prints their declarations): the
largest split error, the lowest utilization against its bound, and the
number of limit cells outside their band."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from testlib import SPIN, Machine, Server, tenant_overruns, tenant_shares  # noqa: E402
from bench_result import Target, Targets  # noqa: E402

TARGETS = Targets("bench/share_matrix", [
    Target("share.split", "busy tenants' split of the device time against share / sum of shares, the largest "
           "error over the share cells", "points", "<=", 2),
    Target("share.utilization", "device busy with gpuslice against the same programs without it (or the best "
           "any of them achieves alone, if less), the lowest ratio over the share cells", "ratio", ">=", 0.95),
    Target("share.limit", "limit cells where a lone tenant with limit L gets outside L - 2 to L + 1 points "
           "(of what its program can use alone, if less)", "cells", "<=", 0),
])
# What the cells run so far measured, for the BENCH-RESULT lines.
worst = {"split": [], "ratio": [], "limit_missed": [], "limit_cells": 0, "failed": []}

WARMUP = 0.8
KERNELS_US = [50, 200, 500, 1000, 5000]
SYNCS = [1, 4, 32, 0]  # 0: never (16 kernels in flight)


def spin_argv(seconds, kernel_us, sync_every):
    argv = [SPIN, "--seconds", "%.2f" % seconds, "--kernel-us", str(kernel_us)]
    if sync_every:
        argv += ["--sync-every", str(sync_every)]
    return argv


def run(programs, seconds, confs=None):
    """programs: [(tenant, kernel_us, sync_every)], one process each.
    confs: {tenant: conf text} to run under gpuslice, None to run bare.
    Returns ({tenant: part of the device time used}, utilization, ok,
    {tenant: the server's overrun p99 in ms} under gpuslice, else {})."""
    machine = Machine()
    server = Server(machine, confs) if confs is not None else None
    procs = []
    for tenant, kernel_us, sync_every in programs:
        env = server.tenant_env(tenant) if server else machine.env
        procs.append((tenant, machine.spawn(spin_argv(WARMUP + seconds + 0.5, kernel_us, sync_every), env=env)))
    time.sleep(WARMUP)
    snap = machine.snapshot()
    time.sleep(seconds)
    meter = machine.meter(since=snap)
    ok = True
    pids = {}
    for tenant, p in procs:
        pids.setdefault(tenant, []).append(p.pid)
        p.communicate()
        ok &= p.returncode == 0
    overrun = {}
    if server:
        overrun = tenant_overruns(server.status(), none=0.0)
        server.stop()
    return tenant_shares(meter, pids), meter["devices"][0]["utilization"], ok, overrun


def pattern_name(kernel_us, sync_every):
    return "k=%dus sync=%s" % (kernel_us, sync_every or "never")


def share_cell(name, programs, shares, seconds):
    """A cell of busy tenants: programs [(tenant, kernel_us, sync)], shares {tenant: share}."""
    confs = {t: "share = %g\n" % s for t, s in shares.items()}
    got, util, ok, overrun = run(programs, seconds, confs)
    bare_util = run(programs, seconds)[1]
    # the best any one program achieves alone: the bound for exclusive slices
    alone = max(run([p], seconds * 0.6)[1] for p in {(None, k, s) for _, k, s in programs})
    total = sum(got.values()) or 1.0
    wsum = sum(shares.values())
    err = max(abs(got[t] / total - shares[t] / wsum) for t in shares)
    bound = bare_util if alone >= 0.95 else min(bare_util, alone)
    good = ok and err <= 0.02 and util >= 0.95 * bound
    worst["split"].append((100 * err, name))
    worst["ratio"].append((util / bound if bound else 0.0, name))
    if not ok:
        worst["failed"].append(name)
    print("%-34s split %-22s err %.1fpp  util %.1f%% (bare %.1f%%, alone %.1f%%, ratio %.2f)  "
          "overrun p99 %s ms  %s" % (
              name, "/".join("%.1f" % (100 * got[t] / total) for t in sorted(shares)), 100 * err, 100 * util,
              100 * bare_util, 100 * alone, util / bound if bound else 0,
              "/".join("%.1f" % overrun.get(t, 0.0) for t in sorted(shares)), "ok" if good else "MISS"), flush=True)
    return good


def limit_cell(limit, kernel_us, sync_every, seconds):
    got, util, ok, _ = run([("t", kernel_us, sync_every)], seconds, {"t": "limit = %g\n" % limit})
    alone = run([(None, kernel_us, sync_every)], seconds * 0.6)[1]
    target = min(limit, alone)
    good = ok and target - 0.02 <= util <= limit + 0.01
    worst["limit_cells"] += 1
    if not good:
        worst["limit_missed"].append("limit %.1f %s: %.1f %%" % (limit, pattern_name(kernel_us, sync_every), 100 * util))
    print("%-34s util %.1f%% (target %.1f%%, alone %.1f%%)  %s" % (
        "limit %.1f %s" % (limit, pattern_name(kernel_us, sync_every)), 100 * util, 100 * target, 100 * alone,
        "ok" if good else "MISS"), flush=True)
    return good


def cells(subset):
    out = []
    for k in KERNELS_US:
        for s in SYNCS:
            pat = pattern_name(k, s)
            out.append(("3:1 " + pat, lambda sec, k=k, s=s: share_cell(
                "3:1 " + pattern_name(k, s), [("a", k, s), ("b", k, s)], {"a": 3, "b": 1}, sec)))
            out.append(("1:1:1:1 " + pat, lambda sec, k=k, s=s: share_cell(
                "1:1:1:1 " + pattern_name(k, s), [(t, k, s) for t in "abcd"], {t: 1 for t in "abcd"}, sec)))
            for limit in (0.3, 0.7):
                out.append(("limit %.1f %s" % (limit, pat), lambda sec, k=k, s=s, limit=limit: limit_cell(
                    limit, k, s, sec)))
    out.append(("3:1 mixed sync-1 vs deep", lambda sec: share_cell(
        "3:1 mixed a: k=500us sync=1, b: deep", [("a", 500, 1), ("b", 1000, 0)], {"a": 3, "b": 1}, sec)))
    out.append(("1:3 mixed sync-1 vs deep", lambda sec: share_cell(
        "1:3 mixed a: k=200us sync=1, b: deep", [("a", 200, 1), ("b", 1000, 0)], {"a": 1, "b": 3}, sec)))
    out.append(("1:1 16 synchronizing processes vs 1", lambda sec: share_cell(
        "1:1 a: 16 procs k=500us sync=4, b: 1", [("a", 500, 4)] * 16 + [("b", 500, 4)], {"a": 1, "b": 1}, sec)))
    # Many processes that never synchronize: a tenant's slice ends when
    # the last of its processes has drained (see the overrun).
    for n in (4, 16):
        out.append(("1:1 %d deep processes vs 1" % n, lambda sec, n=n: share_cell(
            "1:1 a: %d procs k=1000us deep, b: 1" % n, [("a", 1000, 0)] * n + [("b", 1000, 0)],
            {"a": 1, "b": 1}, sec)))
    if subset:
        # Three representative cells: synchronizing programs at 3:1 and
        # 1:1:1:1 (test/server/sync_shares_test.py judges such cells in the suite).
        keep = ("3:1 k=500us sync=4", "1:1:1:1 k=1000us sync=32", "3:1 k=1000us sync=32")
        out = [c for c in out if c[0] in keep]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="measured window per run (default 4)")
    ap.add_argument("--subset", action="store_true", help="only three representative cells")
    ap.add_argument("--only", default="", help="only cells whose name contains this text")
    ap.add_argument("--targets", action="store_true", help="print the targets' declarations and exit")
    args = ap.parse_args()
    TARGETS.declare_if_asked()
    failures = 0
    for name, fn in cells(args.subset):
        if args.only in name:
            failures += not fn(args.seconds)
    print("%d cell(s) missed" % failures)
    report_targets("%s, %.0f s windows" % ("three representative cells" if args.subset else
                                           "cells matching '%s'" % args.only if args.only else "every cell",
                                           args.seconds))
    return 1 if failures else 0


def report_targets(cells_run):
    failed = "; programs failed in %s" % ", ".join(worst["failed"]) if worst["failed"] else ""
    if worst["split"]:
        err, name = max(worst["split"])
        TARGETS.result("share.split", None if worst["failed"] else err,
                       note="%s; %d share cells, largest in %s%s" % (cells_run, len(worst["split"]), name, failed))
        ratio, name = min(worst["ratio"])
        TARGETS.result("share.utilization", None if worst["failed"] else ratio,
                       note="%s; %d share cells, lowest in %s%s" % (cells_run, len(worst["split"]), name, failed))
    else:
        TARGETS.result("share.split", None, note="%s: no share cell run" % cells_run)
        TARGETS.result("share.utilization", None, note="%s: no share cell run" % cells_run)
    missed = worst["limit_missed"]
    TARGETS.result("share.limit", len(missed) if worst["limit_cells"] else None,
                   note="%s; %d of %d limit cells outside%s" % (
                       cells_run, len(missed), worst["limit_cells"], ": " + ", ".join(missed) if missed else ""))


if __name__ == "__main__":
    sys.exit(main())
