"""A tenant that does not run the shim can say anything in its RELEASE,
including that it left every slice idle. The server refunds idle time it
cannot check only up to a bound (tokenserver/sched.c, IDLE_REFUND_MAX), so
such a liar gains at most a few percent over its weight in held time,
never passes its limit in held time, and the honest tenant keeps its split.

The liar (test/helpers/hostile_tenant.c `hold --claim-idle`) holds each
slice until its deadline and reports all of it idle; it measures its held
time by its own clock. The honest tenant is spin through the shim; its
device time is the fakecuda meter's. Before the bound, at 1:1 the honest
tenant got 0.05 s of 6 s, at 10:1 0.2 s, and a liar with limit 0.25 held
the GPU 100 % of the time."""
import os
import subprocess
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

HOSTILE = os.path.join(BUILD, "test", "helpers", "hostile_tenant")
checks = Checks()


def device_uuid(machine):
    return machine.meter()["devices"][0]["uuid"]


def run_liar(server, machine, liar, seconds, honest=None):
    """Runs the liar for `seconds` (beside a busy honest spin, if given);
    returns (liar held fraction of its wall time, honest busy seconds in the
    same window, liar wall seconds)."""
    spin = server.spin(honest, seconds + 3, kernel_us=1000, depth=16) if honest else None
    time.sleep(0.7 if honest else 0)
    snap = machine.snapshot()
    out = subprocess.run([HOSTILE, "hold", server.socket(liar), str(seconds), device_uuid(machine), "--claim-idle"],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    meter = machine.meter(since=snap)
    if spin:
        spin.kill()
        spin.communicate()
    held = parse_line(out, "held " + device_uuid(machine))
    wall = parse_line(out, "wall")
    if not held or not wall:
        return None, 0.0, 0.0
    held_s, wall_s = float(held["ms"]) / 1e3, float(wall["ms"]) / 1e3
    honest_s = 0.0
    if spin:
        honest_s = sum(p["busy_ns"] for p in meter["processes"] if p["pid"] == spin.pid) / 1e9
    return held_s / wall_s, honest_s, wall_s


# 1. Equal shares: the honest tenant's split holds, the liar holds at most
#    1.1 x its weight's share of the time.
machine = Machine()
server = Server(machine, {"honest": "share = 1\n", "liar": "share = 1\n"})
held, honest_s, wall = run_liar(server, machine, "liar", 10.0, honest="honest")
if held is None:
    checks.expect(False, "the liar ran and reported its held time")
else:
    split = honest_s / (honest_s + held * wall)
    checks.expect(abs(split - 0.5) <= 0.02,
                  "1:1 against a tenant that claims every slice idle: the honest tenant's split is %.1f %% "
                  "(50 +- 2; %.2f s of device time in %.1f s)%s" % (100 * split, honest_s, wall, load_note()))
    checks.expect(held <= 1.1 * 0.5,
                  "the liar held the GPU %.1f %% of the time (at most 1.1 x its weight's 50 %%)" % (100 * held))
server.stop()

# 2. Share 10 against the liar's 1.
machine = Machine()
server = Server(machine, {"honest": "share = 10\n", "liar": "share = 1\n"})
held, honest_s, wall = run_liar(server, machine, "liar", 10.0, honest="honest")
if held is None:
    checks.expect(False, "the liar ran and reported its held time")
else:
    split = honest_s / (honest_s + held * wall)
    checks.expect(abs(split - 10 / 11) <= 0.02,
                  "10:1 against the liar: the honest tenant's split is %.1f %% (90.9 +- 2)%s"
                  % (100 * split, load_note()))
    checks.expect(held <= 1.1 / 11,
                  "the liar held the GPU %.1f %% of the time (at most 1.1 x its weight's 9.1 %%)" % (100 * held))
server.stop()

# 3. A liar with limit 0.25, alone: its limit holds in held time.
machine = Machine()
server = Server(machine, {"liar": "limit = 0.25\n"})
held, _, _ = run_liar(server, machine, "liar", 10.0)
checks.expect(held is not None and held <= 0.25 + 0.01,
              "a liar with limit 0.25 holds the GPU %s of the time (at most 25 %% + 1)"
              % ("%.1f %%" % (100 * held) if held is not None else "an unknown part"))
server.stop()
checks.finish()
