"""A gang cannot keep a GPU from the tenants that share it. A gang spans
GPUs X and Y; a tenant that claims every slice idle holds Y; a victim uses
only X. Before, X stayed reserved for the gang while the liar held Y, the
reservation was charged to nobody, and no other gang could form: the victim
got 0.00 s of 8 s. Now a reserved GPU is charged to the gang, a gang keeps
nothing reserved while a GPU it waits for is held past its deadline, a
gathering gives up after a bound, and a GPU the gang waits for runs the
tenant next there meanwhile (tokenserver/sched.c, gangs).

The gang and the liar are hostile_tenant (test/helpers/hostile_tenant.c);
the victim is spin, judged by the fakecuda meter: at equal shares it keeps
at least its half of X against the gang's own held time there (less 2
points; the gang pays for what it keeps reserved, so the victim may get
more), at least 40 % of X's time in all, and the gang still progresses."""
import os
import subprocess
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

HOSTILE = os.path.join(BUILD, "test", "helpers", "hostile_tenant")
SECONDS = 10.0

checks = Checks()
machine = Machine(devices=2)
x, y = [d["uuid"] for d in machine.meter()["devices"]]
server = Server(machine, {"gang": "share = 1\n", "liar": "share = 1\n", "victim": "share = 1\n"})

victim = server.spin("victim", SECONDS + 4, kernel_us=1000, depth=16)
time.sleep(0.7)
gang = subprocess.Popen([HOSTILE, "hold", server.socket("gang"), str(SECONDS), "%s,%s" % (x, y)],
                        stdout=subprocess.PIPE, text=True)
liar = subprocess.Popen([HOSTILE, "hold", server.socket("liar"), str(SECONDS), y, "--claim-idle"],
                        stdout=subprocess.PIPE, text=True)
snap = machine.snapshot()
gang_out, _ = gang.communicate(timeout=SECONDS + 30)
liar_out, _ = liar.communicate(timeout=SECONDS + 30)
meter = machine.meter(since=snap)
victim.kill()
victim.communicate()

held_x = parse_line(gang_out, "held " + x)
wall = parse_line(gang_out, "wall")
busy = sum(p["busy_ns"] for p in meter["processes"] if p["pid"] == victim.pid and p["device"] == 0) / 1e9
checks.expect(held_x is not None and wall is not None, "the gang ran and reported its held time (%r)" % gang_out.strip())
if held_x and wall:
    gang_s, wall_s = float(held_x["ms"]) / 1e3, float(wall["ms"]) / 1e3
    split = busy / (busy + gang_s) if busy + gang_s > 0 else 0
    checks.expect(split >= 0.48,
                  "the victim's split with the gang on GPU X is %.1f %% (at least its weight's 50, less 2: the gang "
                  "pays for the GPUs it keeps while it gathers): %.2f s of device time, the gang held %.2f s of %.1f s%s"
                  % (100 * split, busy, gang_s, wall_s, load_note()))
    checks.expect(busy >= 0.4 * wall_s, "the victim got %.2f s of %.1f s on X (at least 40 %%: its half, less the "
                  "gang's gatherings and the handoffs)" % (busy, wall_s))
    checks.expect(gang_s > 0.1 * wall_s, "the gang progressed: it held X %.2f s" % gang_s)
server.stop()
checks.finish()
