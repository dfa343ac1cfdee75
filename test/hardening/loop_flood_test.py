"""One tenant cannot take the event loop from the others. 256 connections
of one tenant declare their device slots as ever new GPUs as fast as the
server reads them; another tenant's ACQUIRE -> GRANT stays fast. Before,
the loop read up to 32 messages per connection per round (8192 a round for
this tenant), and forgetting a device's user scanned up to 4096 users:
the other tenant's grants took 49-52 ms (median), up to 1.9 s. Now a
tenant's connections together get TENANT_BATCH messages a round
(tokenserver/clients.c) and a device forgets a user in O(1).

Latency is measured by a client of the other tenant
(test/helpers/hostile_tenant.c `latency`): 400 grants, by count. Before
this change, p99 28 ms and median 2.3 ms in this test."""
import os
import subprocess
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

HOSTILE = os.path.join(BUILD, "test", "helpers", "hostile_tenant")
SAMPLES = 400

checks = Checks()
machine = Machine()
# The flood keeps the server busy, so on a machine of two CPUs whatever
# else runs takes turns with it: the server runs at nice -10, as a node's
# token server should, so that what is measured is its loop, not the
# machine's CPU scheduler (a round costs the server about 0.2 ms of CPU).
server = Server(machine, {"evil": "share = 1\n", "good": "share = 1\n"}, nofile=4096,
                wrapper=["nice", "-n", "-10"] if os.geteuid() == 0 else [])


def latency():
    # The measuring client runs at the server's priority too: the flood is
    # one busy process, and on two CPUs a client at nice 0 beside it waits
    # for the CPU scheduler, not for the server, whenever the server is
    # busy with the flood (its p99 went from 0.4 to 4-8 ms by that alone).
    nice = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
    out = subprocess.run(nice + [HOSTILE, "latency", server.socket("good"), "cd" * 16, str(SAMPLES)],
                         capture_output=True, text=True, timeout=120).stdout
    return parse_line(out, "latency_us")


def ms(figures, key):
    return float(figures[key]) / 1e3


flood = subprocess.Popen([HOSTILE, "flood", server.socket("evil"), "256", "60"], stdout=subprocess.DEVNULL)
try:
    time.sleep(1.0)  # the flood is under way once its connections are accepted
    flooded = latency()
finally:
    flood.kill()
    flood.wait()
checks.expect(flooded is not None, "the other tenant is granted during the flood")
if flooded:
    # Judged on the median and p90, which the loop decides, and on the p99
    # with room for the CPU scheduler: beside a busy loop (nice 0) the p99
    # read 2.7 to 4.1 ms, max 8 to 11 ms, while the median stayed 0.03 ms;
    # the server was waiting for a CPU, not for its loop. Before the
    # change above: median 2.3 ms, p99 28 ms.
    checks.expect(ms(flooded, "p50") <= 1.0 and ms(flooded, "p90") <= 1.0 and ms(flooded, "p99") <= 15.0,
                  "with 256 connections of another tenant flooding the loop, ACQUIRE -> GRANT median %.2f ms and "
                  "p90 %.2f ms (each at most 1), p99 %.2f ms (at most 15), max %.2f ms%s"
                  % (ms(flooded, "p50"), ms(flooded, "p90"), ms(flooded, "p99"), ms(flooded, "max"), load_note()))
status = server.status()
checks.expect(any(t["name"] == "good" for t in status["tenants"]), "the status still answers")
server.stop()
checks.finish()
