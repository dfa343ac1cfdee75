"""fakecuda's memory: accounted per device across processes, never
oversubscribed, and returned when a process exits or is killed."""
import signal
import time

from testlib import MEMHOG, Checks, Machine, RandomChunks, parse_line, run_paced

GIB = 1 << 30
checks = Checks()
machine = Machine(memory="1G")

# Three processes allocating and freeing 64 MiB chunks at random, 600 steps
# each, with 30 samples of the meter taken while they run (by count:
# testlib.run_paced).
allocators = [RandomChunks(machine.env, 64 << 20, seed) for seed in range(3)]
samples = {"peak": 0, "consistent": True}


def sample():
    m = machine.meter()
    used = m["devices"][0]["mem_used"]
    samples["peak"] = max(samples["peak"], used)
    samples["consistent"] &= sum(p["mem_used"] for p in m["processes"]) == used


taken, stalls = run_paced([a.step for a in allocators], 600, sample, 30)
for a in allocators:
    a.close()
peak = samples["peak"]
checks.expect(not stalls and not any(a.errors for a in allocators),
              "three random allocators run, each call answered success or CUDA_ERROR_OUT_OF_MEMORY (%s; stalled: %s)"
              % ([e for a in allocators for e in a.errors][:3], stalls[:3]))
checks.expect(taken >= 30 and 0 < peak <= GIB, "device use never exceeded 1 GiB in %d samples (peak %d MiB)"
              % (taken, peak >> 20))
checks.expect(samples["consistent"], "per-process memory always sums to the device's")
checks.expect(sum(a.ooms for a in allocators) > 0, "the device filled up: some allocations got OOM")
checks.expect(machine.meter()["devices"][0]["mem_used"] == 0, "all memory returned after exit")

# A process that fills the device, then is killed with SIGKILL.
hog = machine.spawn([MEMHOG, "--chunk-mb", "256", "--count", "4", "--hold"], stdin=__import__("subprocess").PIPE)
line = parse_line(hog.stdout.readline(), "memhog")
checks.expect(line["allocated"] == "4", "a process holds the whole 1 GiB device")
second = machine.spawn([MEMHOG, "--chunk-mb", "256", "--count", "1"])
line = parse_line(second.communicate()[0], "memhog")
checks.expect(line["allocated"] == "0" and line["last_error"] == "CUDA_ERROR_OUT_OF_MEMORY",
              "a second process gets CUDA_ERROR_OUT_OF_MEMORY while it is held")
hog.send_signal(signal.SIGKILL)
time.sleep(0.05)  # not reaped by us yet: a zombie must not hold memory either
third = machine.spawn([MEMHOG, "--chunk-mb", "256", "--count", "4"])
line = parse_line(third.communicate()[0], "memhog")
checks.expect(line["allocated"] == "4", "after kill -9 the next process gets all 4 chunks back")
hog.wait()
checks.expect(machine.meter()["devices"][0]["mem_used"] == 0, "nothing left allocated")

checks.finish()
