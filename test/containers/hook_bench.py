"""Benchmark: gpuslice-hook's own run time in a real runc container start,
at createRuntime (the slowest stage: it enters the container's mount
namespace, and the image lacks every mount point, so it builds three
overlays). 20 containers are created and deleted; a wrapper around the hook
times it from its exec to its exit. Target: median <= 50 ms."""
import os
import statistics
import subprocess

import ctlib
import runtimes
from ctlib import Cleanup, Server

ctlib.require({"runc": "runc"})
ctlib.require_hook()
RUNS, TARGET_MS = 20, 50.0
failed = False
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    server = Server(machine, {"a": "share = 1\n"})
    cleanup.add(server.stop)
    runc = runtimes.Runc(machine, server)
    cleanup.add(runc.cleanup)
    times = os.path.join(machine.dir, "hook-times")
    wrapper = os.path.join(machine.dir, "timed-hook")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nstart=$(date +%s%N)\n"$HOOK" "$@"\nrc=$?\nend=$(date +%s%N)\n'
                'echo $((end - start)) >>"$TIMES"\nexit $rc\n')
    os.chmod(wrapper, 0o755)
    hook = runc.hook()
    hook.update({"path": wrapper, "env": ["PATH=/usr/bin:/bin", "HOOK=" + ctlib.HOOK, "TIMES=" + times]})
    for i in range(RUNS):
        bundle, cid = runc.bundle("bench%d" % i, rootfs, ["/bin/true"], "a", "createRuntime", hook=hook)
        runc.ids.append(cid)
        subprocess.run(["runc", "--root", runc.root, "create", "--bundle", bundle, cid], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        subprocess.run(["runc", "--root", runc.root, "delete", "-f", cid], check=True)
    with open(times) as f:
        ms = sorted(int(line) / 1e6 for line in f if line.strip())
    median = statistics.median(ms)
    print("gpuslice-hook at createRuntime, %d container starts: median %.1f ms, min %.1f, max %.1f "
          "(target: median <= %.0f ms)" % (len(ms), median, ms[0], ms[-1], TARGET_MS))
    failed = len(ms) != RUNS or median > TARGET_MS
print("FAILED" if failed else "ok")
raise SystemExit(1 if failed else 0)
