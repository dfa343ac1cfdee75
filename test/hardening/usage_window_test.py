"""USAGE tells a tenant nothing about other tenants, its window included.

Tenant b uses GPU 0 for over a second; then tenant a names GPU 0 and a
GPU nobody has used (GPU 1) and asks USAGE of each. Both answers must
cover the same window: one that ended where the GPU was first used (a few
milliseconds on GPU 1, a second on GPU 0) told a whether another tenant
had used the GPU in the last second. And a's own device time in each is
its own: none, on both."""
import time

import gsproto
from testlib import Checks, Machine, Server

WINDOW_NS = 1000000000

checks = Checks()
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
b = gsproto.Client(server.socket("b"))
b.device(0, gsproto.uuid_bytes(0))
# b holds GPU 0 in slices of about 20 ms for 1.2 s (counted by slices, so
# a slow machine only makes it longer)
began = time.monotonic()
slices = 0
while slices < 60 or time.monotonic() - began < 1.2:
    b.acquire(0)
    g = b.expect(gsproto.GRANT)
    if g is None:
        checks.expect(False, "b granted GPU 0 (slice %d): no GRANT in 5 s" % slices)
        break
    time.sleep(0.02)
    b.release(0, g["grant"])
    slices += 1

a = gsproto.Client(server.socket("a"))
a.device(0, gsproto.uuid_bytes(0))
a.device(1, gsproto.uuid_bytes(1))
answers = {}
for gpu in (0, 1):
    a.usage(gsproto.uuid_bytes(gpu), 100 + gpu)
    answers[gpu] = a.expect(gsproto.USAGE)
for gpu, u in answers.items():
    checks.expect(u is not None and u["status"] == gsproto.USAGE_OK and u["id"] == 100 + gpu,
                  "a's USAGE for GPU %d answered (%s)" % (gpu, u and {k: u[k] for k in ("status", "id")}))
if all(answers.values()):
    w0, w1 = answers[0]["window_ns"], answers[1]["window_ns"]
    checks.expect(w0 == w1 == WINDOW_NS, "the window is 1 s on both: on GPU 0, b's for %d slices, %.1f ms; on GPU 1, "
                  "unused before, %.1f ms" % (slices, w0 / 1e6, w1 / 1e6))
    checks.expect(answers[0]["busy_ns"] == answers[1]["busy_ns"] == 0,
                  "a's device time is its own, none on either (%d, %d ns)"
                  % (answers[0]["busy_ns"], answers[1]["busy_ns"]))
# b's own answer still counts b's device time (the window did not empty it)
b.usage(gsproto.uuid_bytes(0), 7)
ub = b.expect(gsproto.USAGE)
checks.expect(ub is not None and ub["window_ns"] == WINDOW_NS and ub["busy_ns"] > 0.3 * WINDOW_NS,
              "b's USAGE for GPU 0 counts its own slices: %s ms busy of a %s ms window"
              % (ub and round(ub["busy_ns"] / 1e6, 1), ub and round(ub["window_ns"] / 1e6, 1)))
a.close()
b.close()
server.stop()
checks.finish()
