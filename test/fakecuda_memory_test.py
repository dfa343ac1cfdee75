"""fakecuda's memory: accounted per device across processes, never
oversubscribed, and returned when a process exits or is killed."""
import signal
import time

from testlib import MEMHOG, Checks, Machine, parse_line

GIB = 1 << 30
checks = Checks()
machine = Machine(memory="1G")

# Three processes allocating and freeing 64 MiB chunks at random.
procs = [machine.spawn([MEMHOG, "--chunk-mb", "64", "--random", "1500", "--seed", str(i)]) for i in range(3)]
peak = 0
consistent = True
while any(p.poll() is None for p in procs):
    m = machine.meter()
    used = m["devices"][0]["mem_used"]
    peak = max(peak, used)
    by_process = sum(p["mem_used"] for p in m["processes"])
    consistent = consistent and by_process == used
    time.sleep(0.01)
results = [parse_line(p.communicate()[0], "memhog") for p in procs]
checks.expect(all(p.returncode == 0 for p in procs), "three random allocators exit 0")
checks.expect(0 < peak <= GIB, "device use never exceeded 1 GiB (peak %d MiB)" % (peak >> 20))
checks.expect(consistent, "per-process memory always sums to the device's")
checks.expect(sum(int(r["ooms"]) for r in results) > 0, "the device filled up: some allocations got OOM")
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
