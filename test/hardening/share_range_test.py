"""A share so small that virtual time overflows: with share = 1e-300 a
tenant's virtual time became inf, every tenant activating after it
inherited inf as its floor, and list order decided who ran. Shares must be
decimal numbers from 0.001 to 1000000 (limits from 0.001 to 1), and at the
smallest share a tenant gets its tiny part while the others split the GPU."""
import os
import time

from testlib import Checks, LoadWatch, Machine, Server, tenant_shares, wait_for

checks = Checks()
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n", "tiny": "share = 1e-300\n"})


def measure(procs, seconds=2.0):
    """{tenant: share} over the next `seconds`; the window's load in `load`."""
    global load
    snap = machine.snapshot()
    load = LoadWatch()
    time.sleep(seconds)
    shares = tenant_shares(machine.meter(since=snap), {t: [p.pid] for t, p in procs.items()})
    load.stop()
    return shares


checks.expect(wait_for(lambda: "tiny.conf:1: share must be a decimal number from 0.001 to 1000000, got '1e-300'"
                       in server.log()), "share = 1e-300 is refused with the file, line and range")
checks.expect(not os.path.exists(server.socket("tiny")), "and the tenant is not created")

# The attack as it was seen: the tiny tenant busy first, the others later.
procs = {"tiny": server.spin("tiny", 9)}
time.sleep(0.5)
procs["a"] = server.spin("a", 8.5)
procs["b"] = server.spin("b", 8.5)
time.sleep(0.7)
shares = measure(procs)
checks.expect(abs(shares["a"] - 0.5) <= 0.05 and abs(shares["b"] - 0.5) <= 0.05,
              "a and b, busy after it, split the GPU 50/50 +-5 (%.1f/%.1f, tiny %.1f; %s)"
              % (100 * shares["a"], 100 * shares["b"], 100 * shares["tiny"], load))

for text, what in (("share = 0x10\n", "0x10"), ("share = inf\n", "inf"), ("share = nan\n", "nan"),
                   ("share = 0.0009\n", "0.0009"), ("share = 1000001\n", "1000001")):
    server.write_tenant("tiny", text)
    checks.expect(wait_for(lambda: "tiny.conf:1: share must be a decimal number from 0.001 to 1000000, got '%s'"
                           % what in server.log()), "share = %s is refused" % what)
server.write_tenant("lim", "limit = 1e-300\n")
checks.expect(wait_for(lambda: "lim.conf:1: limit must be a fraction with 0.001 <= limit <= 1, got '1e-300'"
                       in server.log()), "limit = 1e-300 is refused")

# The smallest share: the tiny tenant connects and gets its tiny part.
server.write_tenant("tiny", "share = 0.001\n")
checks.expect(wait_for(lambda: os.path.exists(server.socket("tiny"))), "share = 0.001 is taken")
checks.expect(wait_for(lambda: {t["name"]: t for t in server.status()["tenants"]}["tiny"]["clients"] == 1, 3.0),
              "its waiting process connects")
time.sleep(0.5)
shares = measure(procs)
checks.expect(abs(shares["a"] - 0.5) <= 0.05 and abs(shares["b"] - 0.5) <= 0.05 and shares["tiny"] <= 0.02,
              "at share 0.001 against 1 and 1: a and b 50/50 +-5, the tiny tenant at most 2%% (%.1f/%.1f/%.1f; %s)"
              % (100 * shares["a"], 100 * shares["b"], 100 * shares["tiny"], load))
for p in procs.values():
    p.kill()
    p.wait()
server.stop()
checks.finish()
