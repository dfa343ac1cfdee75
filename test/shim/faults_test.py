"""The shim under conditions an application's process can be in:

1. Threads cannot be started for a while (a container at its pids.max):
   the shim's first one or two pthread_create calls fail. The shim starts
   its threads later, when launches need them, and the program runs to its
   end (before: every launch waited for good).
2. Another thread releases its reference to the primary context (the
   context lives on) while a long kernel in it is being drained, and an
   allocation over the tenant's memory cap is made meanwhile: it is
   refused, as at any other time (before: it went through uncounted, and
   the gate thread, settling the pool's growth later, waited for a server
   answer that only it reads: the program hung)."""
import os
import subprocess

from testlib import BUILD, SPIN, Checks, Machine, Server, parse_line

FAIL_THREADS = os.path.join(BUILD, "test", "helpers", "fail_threads.so")
RELEASE_RACE = os.path.join(BUILD, "test", "helpers", "release_race")

checks = Checks()
machine = Machine(memory="8G")
server = Server(machine, {"t": "memory = 512M\n"})


def run(argv, env, timeout):
    """(exit code or None if it hung, stdout, stderr)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out, err


# ---- 1. threads that cannot be started at first -----------------------------
for failures in (1, 2):
    env = server.tenant_env("t", FAIL_THREADS=failures)
    env["LD_PRELOAD"] = FAIL_THREADS + ":" + env["LD_PRELOAD"]
    rc, out, err = run([SPIN, "--seconds", "0.5", "--kernel-us", "1000", "--blocking-sync"], env, 30)
    checks.expect(err.count("fail_threads:") == failures, "the shim's first %d thread start(s) failed (%s)"
                  % (failures, err.count("fail_threads:")))
    checks.expect(rc == 0, "with %d failed thread start(s) the program runs to its end (exit %s; %s)"
                  % (failures, "none: hung" if rc is None else rc, err[-400:]))
    checks.expect("cannot start the" in err, "and the failure is logged")

# The drainer never starts (every thread start of the shim fails but the
# gate thread's): slices end without waiting for their work, and the
# program still runs to its end.
env = server.tenant_env("t", FAIL_THREADS_EXCEPT=2)
env["LD_PRELOAD"] = FAIL_THREADS + ":" + env["LD_PRELOAD"]
rc, out, err = run([SPIN, "--seconds", "0.5", "--kernel-us", "1000", "--blocking-sync"], env, 30)
checks.expect(rc == 0 and "cannot start the drainer" in err, "with no drainer at all the program runs to its end "
              "(exit %s; %s)" % ("none: hung" if rc is None else rc, err[-300:]))
line = parse_line(out, "spin") or {}
checks.expect(int(line.get("kernels", 0)) > 16, "and it launched more than a first slice's allowance (%s kernels)"
              % line.get("kernels"))

# A program whose first CUDA call allocates: the gate thread's start fails
# three times, the third from the allocation itself, which must try again.
env = server.tenant_env("t", FAIL_THREADS=3)
env["LD_PRELOAD"] = FAIL_THREADS + ":" + env["LD_PRELOAD"]
rc, out, err = run([RELEASE_RACE, "1024"], env, 30)
checks.expect(rc == 0, "an allocation whose gate thread could not start at first completes (exit %s; %s)"
              % ("none: hung" if rc is None else rc, err[-300:]))

# ---- 2. an allocation while another thread releases the context -------------
rc, out, err = run([RELEASE_RACE, "1024"], server.tenant_env("t"), 30)
line = parse_line(out, "release_race") or {}
checks.expect(rc == 0, "release_race ran to its end (exit %s; %s)" % ("none: hung" if rc is None else rc, err[-400:]))
checks.expect(line.get("release") == "CUDA_SUCCESS", "the other thread's release succeeded (%s)" % line.get("release"))
checks.expect(line.get("pending") == "1", "and was still under way when the allocation was made (%s)"
              % line.get("pending"))
checks.expect(line.get("async_alloc") == "CUDA_ERROR_OUT_OF_MEMORY",
              "1 GiB asked for during the release, cap 512 MiB: %s (CUDA_ERROR_OUT_OF_MEMORY expected)"
              % line.get("async_alloc"))
checks.expect(int(line.get("launches", 0)) > 0, "and it launched afterwards (%s launches)" % line.get("launches"))
server.stop()
checks.finish()
