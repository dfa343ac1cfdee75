"""Per-tenant device memory caps across processes, judged by fakecuda's
count of each process's device memory and by CUDA error codes."""
import os
import signal
import subprocess
import time

from testlib import BUILD, MEMHOG, Checks, LoadWatch, Machine, RandomChunks, Server, parse_line, run_paced

GIB, MIB = 1 << 30, 1 << 20
checks = Checks()


def tenant_device_memory(machine, pids):
    return sum(p["mem_used"] for p in machine.meter()["processes"] if p["pid"] in pids)


def memhog(server, tenant, *args):
    return server.machine.spawn([MEMHOG, "--chunk-mb", "64"] + list(args), env=server.tenant_env(tenant),
                                stdin=subprocess.PIPE)


def held(p):
    return parse_line(p.stdout.readline(), "memhog")


# Every path, the info calls on every lookup path, exact counts.
machine = Machine(memory="1G")
server = Server(machine, {"small": "memory = 256M\n"})
out = subprocess.run([os.path.join(BUILD, "test", "memory", "paths_test")], env=server.tenant_env("small"),
                     capture_output=True, text=True, timeout=60)
print(out.stdout, out.stderr)
checks.expect(out.returncode == 0, "every allocation path is counted and freed exactly; "
              "cuMemGetInfo_v2/cuDeviceTotalMem_v2 report the cap on all paths (%s)" % out.stdout.strip().splitlines()[-1:])
server.stop()

# Three processes allocating 64 MiB chunks at random under a 1 GiB cap, 400
# steps each, with 30 samples of their true device memory taken while they
# run (by count: testlib.run_paced).
machine = Machine(memory="4G")
server = Server(machine, {"t": "memory = 1G\n"})
allocators = [RandomChunks(server.tenant_env("t"), 64 * MIB, seed) for seed in range(3)]
pids = {a.pid for a in allocators}
peak = [0]
taken, stalls = run_paced([a.step for a in allocators], 400,
                          lambda: peak.__setitem__(0, max(peak[0], tenant_device_memory(machine, pids))), 30)
for a in allocators:
    a.close()
checks.expect(not stalls and not any(a.errors for a in allocators),
              "three random allocators run, each call answered success or CUDA_ERROR_OUT_OF_MEMORY (%s; stalled: %s)"
              % ([e for a in allocators for e in a.errors][:3], stalls[:3]))
checks.expect(taken >= 30 and 0 < peak[0] <= GIB, "the tenant's device memory never exceeded 1 GiB in %d samples "
              "(peak %d MiB)" % (taken, peak[0] // MIB))
checks.expect(sum(a.ooms for a in allocators) > 0, "allocations past the cap were refused")
time.sleep(0.1)
status = server.status()
checks.expect(status["tenants"][0]["devices"][0]["mem_used"] == 0, "the server's count is back to 0")

# OOM exactly when the next chunk would cross the cap.
first = memhog(server, "t", "--count", "10", "--hold")
line = held(first)
second = memhog(server, "t", "--count", "16", "--hold")
line2 = held(second)
checks.expect(line["allocated"] == "10" and line2["allocated"] == "6" and
              line2["last_error"] == "CUDA_ERROR_OUT_OF_MEMORY",
              "with 640 MiB held by one process, another gets exactly 6 x 64 MiB, then OOM (%s)" % line2)
second.stdin.close()
second.wait()

# kill -9 frees a process's share for the others within 100 ms.
waiter = machine.spawn([MEMHOG, "--chunk-mb", "512", "--retry"], env=server.tenant_env("t"))
parse_line(waiter.stdout.readline(), "memhog")
time.sleep(0.2)
watch = LoadWatch()
killed_ns = time.monotonic_ns()
first.send_signal(signal.SIGKILL)
line = parse_line(waiter.communicate()[0], "memhog")
delay_ms = (int(line["ok_ns"]) - killed_ns) / 1e6
checks.expect(line["last_error"] == "CUDA_SUCCESS" and delay_ms <= 100,
              "kill -9 of a holder frees its memory for the others within 100 ms (%.1f ms; %s)" % (delay_ms, watch))
first.wait()

# A server restart keeps the count, and the cap still holds.
holder = memhog(server, "t", "--count", "8", "--hold")
held(holder)
server.kill(signal.SIGKILL)
time.sleep(0.3)
server.start()
time.sleep(1.5)  # the holder reconnects and declares its 512 MiB
probe = memhog(server, "t", "--count", "16")
line = held(probe)
probe.wait()
checks.expect(line["allocated"] == "8", "after a server restart the cap still holds: 8 more chunks, not 16 (%s)" % line)

# A raised or lowered cap applies within 2 s, without a restart.
server.write_tenant("t", "memory = 2G\n")
time.sleep(2.0)
probe = memhog(server, "t", "--count", "24")
line = held(probe)
probe.wait()
checks.expect(line["allocated"] == "24", "cap raised to 2 GiB: 24 more chunks fit beside 512 MiB (%s)" % line)
server.write_tenant("t", "memory = 256M\n")
time.sleep(2.0)
probe = memhog(server, "t", "--count", "1")
line = held(probe)
probe.wait()
checks.expect(line["allocated"] == "0" and line["last_error"] == "CUDA_ERROR_OUT_OF_MEMORY",
              "cap lowered below usage: new allocations are refused (%s)" % line)
status = server.status()["tenants"][0]["devices"][0]
checks.expect(status["mem_used"] == 512 * MIB and status["mem_cap"] == 256 * MIB and status["oom_refusals"] > 0,
              "gpuslicectl status shows used, cap and refusals (%s)" % {k: status[k] for k in ("mem_used", "mem_cap", "mem_peak", "oom_refusals")})
holder.stdin.close()
holder.wait()
server.stop()
checks.finish()
