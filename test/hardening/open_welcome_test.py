"""Under GPUSLICE_ON_SERVER_DOWN=open, allocations made before the first
WELCOME went uncounted even with the server up, and were only declared
later with a warning: a 512 MiB cap let a process take gigabytes. With the
server reachable, the first allocation now waits for the WELCOME; with the
server really unreachable, the open policy still lets it through."""
from testlib import MEMHOG, Checks, Machine, Server, parse_line

checks = Checks()
machine = Machine(memory="16G")
server = Server(machine, {"capped": "memory = 512M\n"})

# A process that allocates at once, in 64 MiB chunks, as many as it may.
for attempt in range(3):
    p = machine.spawn([MEMHOG, "--chunk-mb", "64", "--count", "64"],
                      env=server.tenant_env("capped", GPUSLICE_ON_SERVER_DOWN="open"))
    out, _ = p.communicate(timeout=60)
    line = parse_line(out, "memhog") or {}
    allocated = int(line.get("allocated", -1))
    checks.expect(p.returncode == 0 and allocated == 8,
                  "open policy, server up, run %d: the first allocations are counted: 8 x 64 MiB under a 512 MiB cap "
                  "(got %d, %s)" % (attempt + 1, allocated, line.get("last_error")))

# The server really down: the open policy goes ahead, uncounted.
server.stop()
p = machine.spawn([MEMHOG, "--chunk-mb", "64", "--count", "12"],
                  env=server.tenant_env("capped", GPUSLICE_ON_SERVER_DOWN="open"))
out, _ = p.communicate(timeout=60)
line = parse_line(out, "memhog") or {}
checks.expect(int(line.get("allocated", -1)) == 12, "open policy, server down: allocations go ahead (%s)"
              % line.get("allocated"))
checks.finish()
